output "inventory" {
  description = "The hosts in vfleet's inventory shape: source, cluster, profile, ssh_user, ssh_config, inventory_path, hosts[name, address, private_address, gpus, gpu]."
  value       = module.testbed.inventory
}

output "ansible_inventory" {
  description = "The Ansible YAML inventory (also written to hosts_yml)."
  value       = module.ansible_inventory.yaml
}

output "hosts_yml" {
  description = "Path of the rendered Ansible inventory."
  value       = module.ansible_inventory.hosts_yml
}

output "hosts_json" {
  description = "Path of the inventory shape as JSON."
  value       = module.ansible_inventory.hosts_json
}
