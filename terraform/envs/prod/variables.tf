variable "mode" {
  description = "Where the prod GPU nodes come from: \"cloud\" rents bare-metal nodes on OCI (modules/baremetal_gpu_cloud, set var.cloud); \"static\" takes nodes that already exist (modules/static_inventory, set var.static)."
  type        = string
  default     = "cloud"

  validation {
    condition     = contains(["cloud", "static"], var.mode)
    error_message = "mode must be \"cloud\" or \"static\"."
  }
}

variable "cluster_name" {
  description = "Name of the prod cluster: prefix of rented nodes' names, and the inventory's cluster."
  type        = string
  default     = "prod"
}

variable "cloud" {
  description = <<-EOT
    mode = "cloud": where and what to rent on Oracle Cloud Infrastructure
    (modules/baremetal_gpu_cloud checks each field): region, oci_profile (~/.oci/config
    profile, default DEFAULT), compartment_id, availability_domain, subnet_id, image_id,
    ssh_public_key, and optionally shape (default BM.GPU.H200.8), node_count (default 2),
    ssh_user (default ubuntu), ssh_config, assign_public_ip (default false),
    capacity_reservation_id, nsg_ids, boot_volume_size_gbs (default 512), user_data.
    null in mode = "static".
  EOT
  type = object({
    region                  = string
    oci_profile             = optional(string, "DEFAULT")
    compartment_id          = string
    availability_domain     = string
    subnet_id               = string
    image_id                = string
    ssh_public_key          = string
    shape                   = optional(string, "BM.GPU.H200.8")
    node_count              = optional(number, 2)
    ssh_user                = optional(string, "ubuntu")
    ssh_config              = optional(string)
    assign_public_ip        = optional(bool, false)
    capacity_reservation_id = optional(string)
    nsg_ids                 = optional(list(string), [])
    boot_volume_size_gbs    = optional(number, 512)
    user_data               = optional(string)
  })
  default = null

  validation {
    condition     = var.cloud == null || can(regex("^[a-z]{2,}(-[a-z0-9]+)+-[0-9]+$", var.cloud.region))
    error_message = "cloud.region must be an OCI region identifier, e.g. \"us-ashburn-1\"."
  }

  validation {
    condition     = var.cloud == null || can(regex("^[A-Za-z0-9_.-]+$", var.cloud.oci_profile))
    error_message = "cloud.oci_profile must name a profile of ~/.oci/config, e.g. \"DEFAULT\"."
  }
}

variable "static" {
  description = <<-EOT
    mode = "static": the nodes of a cluster that already exists (modules/static_inventory
    checks them): nodes, a list of {name, address, gpus, gpu, private_address (optional)},
    and optionally ssh_user (default root), ssh_config (absolute path) and profile (a label
    for the hardware, default "static"). null in mode = "cloud".
  EOT
  type = object({
    nodes = list(object({
      name            = string
      address         = string
      gpus            = number
      gpu             = string
      private_address = optional(string)
    }))
    ssh_user   = optional(string, "root")
    ssh_config = optional(string)
    profile    = optional(string)
  })
  default = null

  validation {
    condition     = var.static == null || try(length(var.static.nodes) >= 1, false)
    error_message = "static.nodes must list at least one node."
  }
}

variable "artifacts_dir" {
  description = "Directory for hosts.yml and hosts.json (the rendered inventory); null: <repo>/artifacts/prod."
  type        = string
  default     = null

  validation {
    condition     = var.artifacts_dir == null || can(regex("^/[^\\s]*[^/\\s]$", coalesce(var.artifacts_dir, "/x")))
    error_message = "artifacts_dir must be an absolute path without spaces or a trailing slash, or null."
  }
}
