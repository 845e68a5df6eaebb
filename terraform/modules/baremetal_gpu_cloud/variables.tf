variable "cluster_name" {
  description = "Name of the cluster: the compute cluster's display name and the prefix of every node's name and hostname (<cluster_name>-1, -2, ...)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,40}$", var.cluster_name))
    error_message = "cluster_name must be 1-41 characters of a-z, 0-9 and -, starting with a letter (it becomes part of DNS hostname labels)."
  }
}

variable "node_count" {
  description = "How many bare-metal GPU nodes to launch into the compute cluster."
  type        = number

  validation {
    condition     = var.node_count >= 1 && var.node_count <= 256 && floor(var.node_count) == var.node_count
    error_message = "node_count must be a whole number from 1 to 256."
  }
}

variable "shape" {
  description = "OCI bare-metal GPU shape: BM.GPU.H100.8 (8 x H100 80GB SXM), BM.GPU.H200.8 (8 x H200 141GB) or BM.GPU.A100-v2.8 (8 x A100 80GB SXM), each with an RDMA cluster network."
  type        = string
  default     = "BM.GPU.H100.8"

  validation {
    condition     = contains(["BM.GPU.H100.8", "BM.GPU.H200.8", "BM.GPU.A100-v2.8"], var.shape)
    error_message = "shape must be one of BM.GPU.H100.8, BM.GPU.H200.8, BM.GPU.A100-v2.8."
  }
}

variable "compartment_id" {
  description = "OCID of the compartment (or the tenancy) to create the compute cluster and the nodes in."
  type        = string

  validation {
    condition     = can(regex("^ocid1\\.(compartment|tenancy)\\.[a-z0-9-]+\\.[a-z0-9.-]*\\.[a-z0-9]+$", var.compartment_id))
    error_message = "compartment_id must be a compartment or tenancy OCID, e.g. ocid1.compartment.oc1..aaaa..."
  }
}

variable "availability_domain" {
  description = "Availability domain that holds the GPU capacity, e.g. \"Uocm:US-ASHBURN-AD-1\". The compute cluster and all its nodes must be in the same one."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9]+:[A-Za-z0-9-]+-AD-[0-9]+$", var.availability_domain))
    error_message = "availability_domain must be a full availability domain name like \"Uocm:US-ASHBURN-AD-1\" (`oci iam availability-domain list`)."
  }
}

variable "subnet_id" {
  description = "OCID of the existing subnet for the nodes' primary VNICs (the front-end network Ansible and the vLLM API use; RDMA traffic uses the cluster network)."
  type        = string

  validation {
    condition     = can(regex("^ocid1\\.subnet\\.[a-z0-9-]+\\.[a-z0-9.-]*\\.[a-z0-9]+$", var.subnet_id))
    error_message = "subnet_id must be a subnet OCID, e.g. ocid1.subnet.oc1.iad.aaaa..."
  }
}

variable "image_id" {
  description = "OCID of the boot image, e.g. an OCI GPU image (Ubuntu or Oracle Linux with the NVIDIA driver and the RDMA stack) for the region."
  type        = string

  validation {
    condition     = can(regex("^ocid1\\.image\\.[a-z0-9-]+\\.[a-z0-9.-]*\\.[a-z0-9]+$", var.image_id))
    error_message = "image_id must be an image OCID, e.g. ocid1.image.oc1.iad.aaaa..."
  }
}

variable "ssh_public_key" {
  description = "OpenSSH public key line authorised for ssh_user on every node."
  type        = string

  validation {
    condition     = can(regex("^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+={0,3}( .*)?$", trimspace(var.ssh_public_key)))
    error_message = "ssh_public_key must be one OpenSSH public key line (ssh-ed25519, ssh-rsa or ecdsa-sha2-nistp*)."
  }
}

variable "ssh_user" {
  description = "User the image creates for ssh_public_key: ubuntu on Ubuntu images, opc on Oracle Linux."
  type        = string
  default     = "ubuntu"

  validation {
    condition     = can(regex("^[a-z_][a-z0-9_-]{0,31}$", var.ssh_user))
    error_message = "ssh_user must be a POSIX user name, e.g. \"ubuntu\" or \"opc\"."
  }
}

variable "ssh_config" {
  description = "Absolute path of an ssh config that reaches the nodes (a ProxyJump through a bastion when they have no public IP), reported in the inventory; null to connect directly."
  type        = string
  default     = null

  validation {
    condition     = var.ssh_config == null || can(regex("^/", coalesce(var.ssh_config, "/")))
    error_message = "ssh_config must be an absolute path or null."
  }
}

variable "assign_public_ip" {
  description = "Give each node a public IP and report it as the address Ansible connects to. false: nodes are reached on their private IP (through a bastion or VPN)."
  type        = bool
  default     = false

  validation {
    condition     = var.assign_public_ip != null
    error_message = "assign_public_ip must be true or false."
  }
}

variable "capacity_reservation_id" {
  description = "OCID of the capacity reservation to launch the nodes under (bare-metal GPUs usually come from one), or null."
  type        = string
  default     = null

  validation {
    condition     = var.capacity_reservation_id == null || can(regex("^ocid1\\.capacityreservation\\.", coalesce(var.capacity_reservation_id, "x")))
    error_message = "capacity_reservation_id must be a capacity reservation OCID (ocid1.capacityreservation....) or null."
  }
}

variable "nsg_ids" {
  description = "OCIDs of network security groups for the nodes' primary VNICs."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for id in var.nsg_ids : can(regex("^ocid1\\.networksecuritygroup\\.", id))]) && length(var.nsg_ids) <= 5
    error_message = "nsg_ids must be at most 5 network security group OCIDs (ocid1.networksecuritygroup....)."
  }
}

variable "boot_volume_size_gbs" {
  description = "Boot volume size in GB (model weights can live here or on the shape's local NVMe)."
  type        = number
  default     = 512

  validation {
    condition     = var.boot_volume_size_gbs >= 50 && var.boot_volume_size_gbs <= 32768 && floor(var.boot_volume_size_gbs) == var.boot_volume_size_gbs
    error_message = "boot_volume_size_gbs must be a whole number from 50 to 32768."
  }
}

variable "user_data" {
  description = "cloud-init user data (plain text; the module base64-encodes it), or null."
  type        = string
  default     = null

  validation {
    condition     = var.user_data == null || length(coalesce(var.user_data, "x")) <= 32000
    error_message = "user_data must be at most 32,000 characters (OCI's metadata limit is 32 KB in total)."
  }
}

variable "freeform_tags" {
  description = "Free-form tags for the compute cluster and the nodes (vfleet-cluster is always added)."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for k, v in var.freeform_tags : length(k) >= 1 && length(k) <= 100 && length(v) <= 256])
    error_message = "freeform_tags keys must be 1-100 characters and values at most 256."
  }
}
