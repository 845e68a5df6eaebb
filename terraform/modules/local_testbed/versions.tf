terraform {
  # terraform_data and `terraform test` need 1.4 and 1.6. Only the built-in
  # terraform.io/builtin/terraform provider is used: nothing is downloaded.
  required_version = ">= 1.6"
}
