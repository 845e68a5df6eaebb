variable "cluster_name" {
  description = "Name of the staging cluster: prefix of its node names (<cluster_name>-1, ...)."
  type        = string
  default     = "staging"
}

variable "cloud" {
  description = <<-EOT
    Where and what to rent on Oracle Cloud Infrastructure (modules/baremetal_gpu_cloud checks
    each field): region, oci_profile (~/.oci/config profile, default DEFAULT),
    compartment_id, availability_domain, subnet_id, image_id, ssh_public_key, and optionally
    shape (default BM.GPU.H100.8), node_count (default 1), ssh_user (default ubuntu),
    ssh_config, assign_public_ip (default false), capacity_reservation_id, nsg_ids,
    boot_volume_size_gbs (default 512), user_data.
  EOT
  type = object({
    region                  = string
    oci_profile             = optional(string, "DEFAULT")
    compartment_id          = string
    availability_domain     = string
    subnet_id               = string
    image_id                = string
    ssh_public_key          = string
    shape                   = optional(string, "BM.GPU.H100.8")
    node_count              = optional(number, 1)
    ssh_user                = optional(string, "ubuntu")
    ssh_config              = optional(string)
    assign_public_ip        = optional(bool, false)
    capacity_reservation_id = optional(string)
    nsg_ids                 = optional(list(string), [])
    boot_volume_size_gbs    = optional(number, 512)
    user_data               = optional(string)
  })

  validation {
    condition     = can(regex("^[a-z]{2,}(-[a-z0-9]+)+-[0-9]+$", var.cloud.region))
    error_message = "cloud.region must be an OCI region identifier, e.g. \"us-ashburn-1\"."
  }

  validation {
    condition     = can(regex("^[A-Za-z0-9_.-]+$", var.cloud.oci_profile))
    error_message = "cloud.oci_profile must name a profile of ~/.oci/config, e.g. \"DEFAULT\"."
  }
}

variable "artifacts_dir" {
  description = "Directory for hosts.yml and hosts.json (the rendered inventory); null: <repo>/artifacts/staging."
  type        = string
  default     = null

  validation {
    condition     = var.artifacts_dir == null || can(regex("^/[^\\s]*[^/\\s]$", coalesce(var.artifacts_dir, "/x")))
    error_message = "artifacts_dir must be an absolute path without spaces or a trailing slash, or null."
  }
}
