# Oracle Cloud Infrastructure for mode = "cloud", authenticated by an API key profile in
# ~/.oci/config. In mode = "static" nothing uses it and Terraform never configures it (the
# provider is still installed by `terraform init`). Kept apart from versions.tf so an
# offline copy of this env can drop it (tests/unit/terraform/test_terraform.py).
provider "oci" {
  region              = var.cloud == null ? null : var.cloud.region
  config_file_profile = var.cloud == null ? null : var.cloud.oci_profile
}
