# Bare-metal 8-GPU nodes on Oracle Cloud Infrastructure, joined by an RDMA cluster network.
#
# A compute cluster (oci_core_compute_cluster) is OCI's RDMA network group for instances
# managed one by one; each node is an oci_core_instance launched into it, in the cluster's
# availability domain and compartment. The Oracle Cloud Agent's HPC RDMA plugins configure
# and authenticate the RDMA interfaces on boot. Nodes are keyed by name (for_each), so
# shrinking node_count removes the highest-numbered nodes and leaves the others alone.
#
# The provider cannot be installed offline: tests/unit/terraform checks this module statically
# with python-hcl2 (variables described, typed, validated; outputs; provider pinned).

locals {
  # GPUs per node and their catalog names (`vfleet gpus`).
  shapes = {
    "BM.GPU.H100.8"    = { gpus = 8, gpu = "H100-SXM-80GB" }
    "BM.GPU.H200.8"    = { gpus = 8, gpu = "H200-SXM-141GB" }
    "BM.GPU.A100-v2.8" = { gpus = 8, gpu = "A100-SXM-80GB" }
  }

  node_names = [for i in range(var.node_count) : "${var.cluster_name}-${i + 1}"]
  tags       = merge(var.freeform_tags, { "vfleet-cluster" = var.cluster_name })
}

resource "oci_core_compute_cluster" "this" {
  availability_domain = var.availability_domain
  compartment_id      = var.compartment_id
  display_name        = var.cluster_name
  freeform_tags       = local.tags
}

resource "oci_core_instance" "node" {
  for_each = toset(local.node_names)

  availability_domain     = var.availability_domain
  compartment_id          = var.compartment_id
  compute_cluster_id      = oci_core_compute_cluster.this.id
  capacity_reservation_id = var.capacity_reservation_id
  shape                   = var.shape
  display_name            = each.key
  freeform_tags           = local.tags

  create_vnic_details {
    subnet_id        = var.subnet_id
    assign_public_ip = var.assign_public_ip
    hostname_label   = each.key
    nsg_ids          = var.nsg_ids
  }

  source_details {
    source_type             = "image"
    source_id               = var.image_id
    boot_volume_size_in_gbs = var.boot_volume_size_gbs
  }

  metadata = merge(
    { ssh_authorized_keys = trimspace(var.ssh_public_key) },
    var.user_data == null ? {} : { user_data = base64encode(var.user_data) },
  )

  agent_config {
    plugins_config {
      name          = "Compute HPC RDMA Authentication"
      desired_state = "ENABLED"
    }
    plugins_config {
      name          = "Compute HPC RDMA Auto-Configuration"
      desired_state = "ENABLED"
    }
  }

  timeouts {
    create = "60m" # bare-metal GPU nodes take far longer to launch than VMs
  }
}
