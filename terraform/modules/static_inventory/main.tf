# Clusters that already exist (owned racks, machines rented by hand): nothing is created.
# The node list becomes vfleet's inventory shape, and one terraform_data records it in the
# state and hosts the checks that span variables or need the file system.

locals {
  hosts = [
    for n in var.nodes : {
      name            = n.name
      address         = n.address
      private_address = coalesce(n.private_address, n.address)
      gpus            = n.gpus
      gpu             = n.gpu
    }
  ]

  inventory = {
    source         = "static_inventory"
    cluster        = var.cluster_name
    profile        = coalesce(var.profile, "static")
    ssh_user       = var.ssh_user
    ssh_config     = var.ssh_config
    inventory_path = tostring(null) # no inventory file exists beforehand; modules/ansible_inventory writes one
    hosts          = local.hosts
  }
}

resource "terraform_data" "nodes" {
  input = local.hosts

  lifecycle {
    precondition {
      condition     = var.ssh_config == null || fileexists(coalesce(var.ssh_config, "/"))
      error_message = "ssh_config ${coalesce(var.ssh_config, "-")} does not exist; write it first (bastion, keys), or leave ssh_config null."
    }
    precondition {
      condition     = length(distinct([for h in local.hosts : h.private_address])) == length(local.hosts)
      error_message = "Two nodes share a private_address: ${join(", ", [for h in local.hosts : "${h.name}=${h.private_address}"])}."
    }
  }
}
