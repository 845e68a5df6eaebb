output "inventory" {
  description = "The nodes in vfleet's inventory shape (source, cluster, profile = the OCI shape, ssh_user, ssh_config, inventory_path = null, hosts[name, address, private_address, gpus, gpu]); address is the public IP when assign_public_ip, else the private IP. modules/ansible_inventory renders it."
  value = {
    source         = "baremetal_gpu_cloud"
    cluster        = var.cluster_name
    profile        = var.shape
    ssh_user       = var.ssh_user
    ssh_config     = var.ssh_config
    inventory_path = tostring(null) # no inventory file exists beforehand; modules/ansible_inventory writes one
    hosts = [
      for name in local.node_names : {
        name            = name
        address         = var.assign_public_ip ? oci_core_instance.node[name].public_ip : oci_core_instance.node[name].private_ip
        private_address = oci_core_instance.node[name].private_ip
        gpus            = local.shapes[var.shape].gpus
        gpu             = local.shapes[var.shape].gpu
      }
    ]
  }
}

output "compute_cluster_id" {
  description = "OCID of the compute cluster (the RDMA network group) the nodes are in."
  value       = oci_core_compute_cluster.this.id
}

output "instance_ids" {
  description = "OCID of each node's instance, by node name."
  value       = { for name, node in oci_core_instance.node : name => node.id }
}
