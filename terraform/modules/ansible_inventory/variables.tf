variable "inventory" {
  description = "vfleet's inventory shape, as local_testbed, baremetal_gpu_cloud and static_inventory output it: source, cluster, profile, ssh_user, ssh_config (path or null), inventory_path (path or null) and hosts, a list of {name, address, private_address, gpus, gpu}. This type is the contract between the modules."
  type = object({
    source         = string
    cluster        = string
    profile        = string
    ssh_user       = string
    ssh_config     = string
    inventory_path = string
    hosts = list(object({
      name            = string
      address         = string
      private_address = string
      gpus            = number
      gpu             = string
    }))
  })

  validation {
    condition     = contains(["local_testbed", "baremetal_gpu_cloud", "static_inventory"], var.inventory.source)
    error_message = "inventory.source must name the module that produced it: local_testbed, baremetal_gpu_cloud or static_inventory."
  }

  validation {
    condition     = length(var.inventory.hosts) >= 1
    error_message = "inventory.hosts is empty: there is nothing to write an inventory for."
  }

  validation {
    condition     = length(distinct([for h in var.inventory.hosts : h.name])) == length(var.inventory.hosts)
    error_message = "inventory.hosts repeats a host name; Ansible would merge those hosts into one."
  }

  validation {
    condition     = alltrue([for h in var.inventory.hosts : h.address != "" && h.gpus >= 1])
    error_message = "Every host needs an address and at least one GPU."
  }
}

variable "env" {
  description = "Environment the inventory belongs to (local, staging, prod, ...), written as the vfleet_env group variable."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,31}$", var.env))
    error_message = "env must be 1-32 characters of a-z, 0-9 and -, starting with a letter, e.g. \"local\"."
  }
}

variable "out_dir" {
  description = "Absolute path of a directory to write hosts.yml (the rendered inventory) and hosts.json (the inventory shape) into, or null to write nothing and only output them. The envs use artifacts/<env>/."
  type        = string
  default     = null

  validation {
    condition     = var.out_dir == null || can(regex("^/[^\\s]*[^/\\s]$", coalesce(var.out_dir, "/x")))
    error_message = "out_dir must be an absolute path without spaces or a trailing slash, or null."
  }
}
