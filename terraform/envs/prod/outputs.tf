output "inventory" {
  description = "The nodes in vfleet's inventory shape: source (baremetal_gpu_cloud or static_inventory, by mode), cluster, profile, ssh_user, ssh_config, inventory_path, hosts[name, address, private_address, gpus, gpu]."
  value       = local.inventory
}

output "ansible_inventory" {
  description = "The Ansible YAML inventory (also written to hosts_yml)."
  value       = one(module.ansible_inventory[*].yaml)
}

output "hosts_yml" {
  description = "Path of the rendered Ansible inventory."
  value       = one(module.ansible_inventory[*].hosts_yml)
}

output "hosts_json" {
  description = "Path of the inventory shape as JSON."
  value       = one(module.ansible_inventory[*].hosts_json)
}
