output "yaml" {
  description = "The Ansible YAML inventory: group gpu_hosts, host variables ansible_host, vfleet_private_address, vfleet_gpus, vfleet_gpu; group variables ansible_user, ansible_ssh_common_args (-F <ssh_config>, when there is one), vfleet_env, vfleet_cluster, vfleet_inventory_source, vfleet_profile."
  value       = local.yaml
}

output "hosts_yml" {
  description = "Path of the written hosts.yml (the yaml output), or null when out_dir is null."
  value       = local.hosts_yml
  depends_on  = [terraform_data.files]
}

output "hosts_json" {
  description = "Path of the written hosts.json (the inventory shape as JSON), or null when out_dir is null."
  value       = local.hosts_json
  depends_on  = [terraform_data.files]
}
