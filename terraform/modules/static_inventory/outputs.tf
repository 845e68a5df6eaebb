output "inventory" {
  description = "The nodes in vfleet's inventory shape (source, cluster, profile, ssh_user, ssh_config, inventory_path, hosts[name, address, private_address, gpus, gpu]); modules/ansible_inventory renders it."
  value       = local.inventory
  # Read after the checks on terraform_data.nodes have passed.
  depends_on = [terraform_data.nodes]
}
