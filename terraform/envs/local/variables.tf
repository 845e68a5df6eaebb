variable "testbed_name" {
  description = "Name of the testbed the env brings up (`testbed status --name`)."
  type        = string
  default     = "local"

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9_-]{0,31}$", var.testbed_name))
    error_message = "testbed_name must be 1-32 characters of a-z, 0-9, _ and -, starting with a letter or digit."
  }
}

variable "host_count" {
  description = "How many test hosts to boot."
  type        = number
  default     = 2

  validation {
    condition     = var.host_count >= 1 && var.host_count <= 200 && floor(var.host_count) == var.host_count
    error_message = "host_count must be a whole number from 1 to 200."
  }
}

variable "profile" {
  description = "Recorded GPU host the test hosts replay: h200-1gpu, h100-sxm-8gpu, l40s-pcie-8gpu or gb200-4gpu. The default replays the real H200 capture: one GPU per host, so the plan puts one engine on each host, which is what the vLLM CPU build can run there."
  type        = string
  default     = "h200-1gpu"

  validation {
    condition     = contains(["h200-1gpu", "h100-sxm-8gpu", "l40s-pcie-8gpu", "gb200-4gpu"], var.profile)
    error_message = "profile must be one of h200-1gpu, h100-sxm-8gpu, l40s-pcie-8gpu, gb200-4gpu."
  }
}

variable "shape" {
  description = "Link shape between the hosts (ethernet, infiniband, none); null keeps the profile's default."
  type        = string
  default     = null

  validation {
    condition     = var.shape == null || contains(["ethernet", "infiniband", "none"], coalesce(var.shape, "none"))
    error_message = "shape must be null, \"ethernet\", \"infiniband\" or \"none\"."
  }
}

variable "testbed_bin" {
  description = "Path of the `testbed` executable; null: the repository's .venv/bin/testbed."
  type        = string
  default     = null

  validation {
    condition     = var.testbed_bin == null || can(regex("^/", coalesce(var.testbed_bin, "/")))
    error_message = "testbed_bin must be an absolute path or null."
  }
}

variable "run_dir" {
  description = "Where testbed keeps its state, ssh config and inventory (VFLEET_TESTBED_RUN)."
  type        = string
  default     = "/run/vfleet-testbed"

  validation {
    condition     = can(regex("^/[^\\s]*[^/\\s]$", var.run_dir))
    error_message = "run_dir must be an absolute path without spaces or a trailing slash."
  }
}

variable "artifacts_dir" {
  description = "Directory for hosts.yml and hosts.json (the rendered inventory); null: <repo>/artifacts/local. Terraform writes nothing else outside its state."
  type        = string
  default     = null

  validation {
    condition     = var.artifacts_dir == null || can(regex("^/[^\\s]*[^/\\s]$", coalesce(var.artifacts_dir, "/x")))
    error_message = "artifacts_dir must be an absolute path without spaces or a trailing slash, or null."
  }
}
