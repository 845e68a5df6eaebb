# Stand-in for terraform/modules/baremetal_gpu_cloud/outputs.tf (offline tests only): the
# same outputs and inventory keys, from the stand-in resources.

output "inventory" {
  description = "As the real module's inventory output."
  value = {
    source         = "baremetal_gpu_cloud"
    cluster        = var.cluster_name
    profile        = var.shape
    ssh_user       = var.ssh_user
    ssh_config     = var.ssh_config
    inventory_path = tostring(null)
    hosts = [
      for name in local.node_names : {
        name            = name
        address         = var.assign_public_ip ? terraform_data.node[name].output.public_ip : terraform_data.node[name].output.private_ip
        private_address = terraform_data.node[name].output.private_ip
        gpus            = local.shapes[var.shape].gpus
        gpu             = local.shapes[var.shape].gpu
      }
    ]
  }
}

output "compute_cluster_id" {
  description = "As the real module's compute_cluster_id output."
  value       = terraform_data.compute_cluster.output.id
}

output "instance_ids" {
  description = "As the real module's instance_ids output."
  value       = { for name, node in terraform_data.node : name => node.output.id }
}
