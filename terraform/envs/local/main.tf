# The local env: test hosts on this machine (systemd-nspawn, GPU stand-ins) in place of GPU
# nodes, and the Ansible inventory for them in artifacts/local/.

locals {
  env           = "local"
  artifacts_dir = var.artifacts_dir != null ? var.artifacts_dir : abspath("${path.root}/../../../artifacts/${local.env}")
}

module "testbed" {
  source = "../../modules/local_testbed"

  name        = var.testbed_name
  host_count  = var.host_count
  profile     = var.profile
  shape       = var.shape
  testbed_bin = var.testbed_bin
  run_dir     = var.run_dir
}

module "ansible_inventory" {
  source = "../../modules/ansible_inventory"

  env       = local.env
  inventory = module.testbed.inventory
  out_dir   = local.artifacts_dir
}
