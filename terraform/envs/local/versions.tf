terraform {
  # terraform_data and `terraform test` need 1.4 and 1.6; only built-ins are used, so
  # `terraform init` downloads nothing.
  required_version = ">= 1.6"

  # State lives with the env's other outputs in <repo>/artifacts/local/ (git-ignored). The
  # path is relative to the working directory: run Terraform as
  # `terraform -chdir=terraform/envs/local ...` (or from this directory).
  backend "local" {
    path = "../../../artifacts/local/terraform.tfstate"
  }
}
