terraform {
  required_version = ">= 1.6"

  required_providers {
    # Oracle Cloud Infrastructure. The 6.x schema is the one this module was written
    # against (oci_core_compute_cluster, oci_core_instance.compute_cluster_id). The lock file
    # that the first online `terraform init` of an env writes pins the exact build; commit it.
    # Configure the provider (region, auth) in the env, not here.
    oci = {
      source  = "oracle/oci"
      version = "~> 6.0"
    }
  }
}
