# The staging env: a small bare-metal GPU cluster rented on OCI (one BM.GPU.H100.8 by
# default), and the Ansible inventory for it in artifacts/staging/.

locals {
  env           = "staging"
  artifacts_dir = var.artifacts_dir != null ? var.artifacts_dir : abspath("${path.root}/../../../artifacts/${local.env}")
}

module "cluster" {
  source = "../../modules/baremetal_gpu_cloud"

  cluster_name            = var.cluster_name
  node_count              = var.cloud.node_count
  shape                   = var.cloud.shape
  compartment_id          = var.cloud.compartment_id
  availability_domain     = var.cloud.availability_domain
  subnet_id               = var.cloud.subnet_id
  image_id                = var.cloud.image_id
  ssh_public_key          = var.cloud.ssh_public_key
  ssh_user                = var.cloud.ssh_user
  ssh_config              = var.cloud.ssh_config
  assign_public_ip        = var.cloud.assign_public_ip
  capacity_reservation_id = var.cloud.capacity_reservation_id
  nsg_ids                 = var.cloud.nsg_ids
  boot_volume_size_gbs    = var.cloud.boot_volume_size_gbs
  user_data               = var.cloud.user_data
  freeform_tags           = { "vfleet-env" = local.env }
}

module "ansible_inventory" {
  source = "../../modules/ansible_inventory"

  env       = local.env
  inventory = module.cluster.inventory
  out_dir   = local.artifacts_dir
}
