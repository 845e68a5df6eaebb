output "inventory" {
  description = "The hosts in vfleet's inventory shape (source, cluster, profile, ssh_user, ssh_config, inventory_path, hosts[name, address, private_address, gpus, gpu]); modules/ansible_inventory renders it. Known at plan time; available once the testbed is up."
  value       = local.inventory
  # Whatever reads the inventory runs after `testbed up`, not before.
  depends_on = [terraform_data.testbed]
}

output "name" {
  description = "The testbed's name, for `testbed status --name` and `testbed down --name`."
  value       = var.name
}
