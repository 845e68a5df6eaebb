# The prod env: GPU nodes rented on OCI (mode = "cloud") or nodes that already exist
# (mode = "static"), and the Ansible inventory for them in artifacts/prod/. Both modules
# output the same inventory shape, so everything downstream is the same in either mode.

locals {
  env           = "prod"
  artifacts_dir = var.artifacts_dir != null ? var.artifacts_dir : abspath("${path.root}/../../../artifacts/${local.env}")

  # A mode without its settings fails the preconditions below, before anything is created.
  use_cloud  = var.mode == "cloud" && var.cloud != null
  use_static = var.mode == "static" && var.static != null
}

# The mode's own settings must be given, and only those: a forgotten `mode` must not rent
# nodes while a static node list sits unused, or the other way round.
resource "terraform_data" "mode" {
  input = var.mode

  lifecycle {
    precondition {
      condition     = var.mode != "cloud" || var.cloud != null
      error_message = "mode = \"cloud\" needs var.cloud (region, compartment_id, availability_domain, subnet_id, image_id, ssh_public_key)."
    }
    precondition {
      condition     = var.mode != "static" || var.static != null
      error_message = "mode = \"static\" needs var.static (nodes: name, address, gpus, gpu)."
    }
    precondition {
      condition     = (var.mode == "cloud" && var.static == null) || (var.mode == "static" && var.cloud == null)
      error_message = "mode = \"${var.mode}\" takes var.${var.mode} only; remove var.${var.mode == "cloud" ? "static" : "cloud"} or change mode."
    }
  }
}

module "cloud" {
  source = "../../modules/baremetal_gpu_cloud"
  count  = local.use_cloud ? 1 : 0

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

  depends_on = [terraform_data.mode]
}

module "static" {
  source = "../../modules/static_inventory"
  count  = local.use_static ? 1 : 0

  cluster_name = var.cluster_name
  nodes        = var.static.nodes
  ssh_user     = var.static.ssh_user
  ssh_config   = var.static.ssh_config
  profile      = var.static.profile

  depends_on = [terraform_data.mode]
}

locals {
  inventory = local.use_static ? one(module.static[*].inventory) : one(module.cloud[*].inventory)
}

module "ansible_inventory" {
  source = "../../modules/ansible_inventory"
  count  = local.use_cloud || local.use_static ? 1 : 0

  env       = local.env
  inventory = local.inventory
  out_dir   = local.artifacts_dir
}
