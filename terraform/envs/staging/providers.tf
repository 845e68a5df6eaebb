# Oracle Cloud Infrastructure, authenticated by an API key profile in ~/.oci/config (the
# OCI CLI's `oci setup config` writes one). Kept apart from versions.tf so an offline copy
# of this env can drop it (tests/unit/terraform/test_terraform.py).
provider "oci" {
  region              = var.cloud.region
  config_file_profile = var.cloud.oci_profile
}
