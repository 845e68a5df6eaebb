# Stand-in for terraform/modules/baremetal_gpu_cloud/main.tf (offline tests only): one
# terraform_data per node in place of oci_core_instance, with made-up addresses (private
# 10.0.0.x, public 192.0.2.x, a documentation range) and OCIDs.

locals {
  # Must equal the real module's table (the static check compares them).
  shapes = {
    "BM.GPU.H100.8"    = { gpus = 8, gpu = "H100-SXM-80GB" }
    "BM.GPU.H200.8"    = { gpus = 8, gpu = "H200-SXM-141GB" }
    "BM.GPU.A100-v2.8" = { gpus = 8, gpu = "A100-SXM-80GB" }
  }

  node_names = [for i in range(var.node_count) : "${var.cluster_name}-${i + 1}"]
}

resource "terraform_data" "compute_cluster" {
  input = { id = "ocid1.computecluster.oc1.stub.${var.cluster_name}" }
}

resource "terraform_data" "node" {
  for_each = { for i, name in local.node_names : name => i }

  input = {
    id         = "ocid1.instance.oc1.stub.${each.key}"
    private_ip = cidrhost("10.0.0.0/24", 11 + each.value)
    public_ip  = cidrhost("192.0.2.0/24", 11 + each.value)
  }
}
