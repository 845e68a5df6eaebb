variable "cluster_name" {
  description = "Name of the existing cluster (reported as the inventory's cluster), e.g. \"prod-h200\"."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,40}$", var.cluster_name))
    error_message = "cluster_name must be 1-41 characters of a-z, 0-9 and -, starting with a letter."
  }
}

variable "nodes" {
  description = "The cluster's GPU nodes: name (inventory host name), address (what Ansible connects to: IP or DNS name), gpus (GPUs in the node), gpu (catalog name from `vfleet gpus`, or the name nvidia-smi prints) and optionally private_address (the address on the cluster's fast network, default: address)."
  type = list(object({
    name            = string
    address         = string
    gpus            = number
    gpu             = string
    private_address = optional(string)
  }))

  validation {
    condition     = length(var.nodes) >= 1
    error_message = "nodes must list at least one node."
  }

  validation {
    condition     = alltrue([for n in var.nodes : can(regex("^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$", n.name))])
    error_message = "Each node name must be a host name label: 1-63 of A-Z, a-z, 0-9 and -, not starting or ending with -."
  }

  validation {
    condition     = length(distinct([for n in var.nodes : n.name])) == length(var.nodes)
    error_message = "Two nodes have the same name; inventory host names must be unique."
  }

  validation {
    condition = alltrue([
      for n in var.nodes : alltrue([
        for a in compact([n.address, n.private_address]) :
        can(regex("^([0-9]{1,3}\\.){3}[0-9]{1,3}$", a)) ? can(cidrhost("${a}/32", 0)) : can(regex("^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$", a))
      ])
    ])
    error_message = "Each address and private_address must be an IPv4 address (each part 0-255) or a DNS name."
  }

  validation {
    condition     = length(distinct([for n in var.nodes : n.address])) == length(var.nodes)
    error_message = "Two nodes have the same address; each node needs its own."
  }

  validation {
    condition     = alltrue([for n in var.nodes : n.gpus >= 1 && n.gpus <= 72 && floor(n.gpus) == n.gpus])
    error_message = "Each node's gpus must be a whole number from 1 to 72."
  }

  validation {
    condition     = alltrue([for n in var.nodes : can(regex("^\\S(.*\\S)?$", n.gpu))])
    error_message = "Each node's gpu must be a GPU name, e.g. \"H100-SXM-80GB\" or \"NVIDIA H100 80GB HBM3\" (`vfleet gpus` lists them)."
  }
}

variable "profile" {
  description = "Free label for the hardware the nodes share, reported as the inventory's profile (e.g. \"hgx-h200-8gpu\"). null: \"static\"."
  type        = string
  default     = null

  validation {
    condition     = var.profile == null || can(regex("^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", coalesce(var.profile, "x")))
    error_message = "profile must be null or 1-64 characters of A-Z, a-z, 0-9, ., _ and -."
  }
}

variable "ssh_user" {
  description = "User Ansible logs in as on every node."
  type        = string
  default     = "root"

  validation {
    condition     = can(regex("^[a-z_][a-z0-9_-]{0,31}$", var.ssh_user))
    error_message = "ssh_user must be a POSIX user name: 1-32 of a-z, 0-9, _ and -, starting with a letter or _."
  }
}

variable "ssh_config" {
  description = "Absolute path of an ssh config that reaches the nodes (bastion, ProxyJump, keys), or null to connect directly. It must exist when Terraform plans."
  type        = string
  default     = null

  validation {
    condition     = var.ssh_config == null || can(regex("^/", coalesce(var.ssh_config, "/")))
    error_message = "ssh_config must be an absolute path or null."
  }
}
