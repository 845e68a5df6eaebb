variable "name" {
  description = "Testbed name (`testbed up --name`). Its state, ssh config and inventory live in <run_dir>/<name>/; two testbeds with different names can run side by side."
  type        = string
  default     = "local"

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9_-]{0,31}$", var.name))
    error_message = "name must be 1-32 characters of a-z, 0-9, _ and -, starting with a letter or digit (testbed's own rule), e.g. \"local\"."
  }
}

variable "host_count" {
  description = "How many test hosts to boot (`testbed up N`)."
  type        = number
  default     = 2

  validation {
    condition     = var.host_count >= 1 && var.host_count <= 200 && floor(var.host_count) == var.host_count
    error_message = "host_count must be a whole number from 1 to 200 (the testbed's /24 holds 200 hosts)."
  }
}

variable "profile" {
  description = "Recorded GPU host the test hosts replay through their nvidia-smi stand-in: h200-1gpu, h100-sxm-8gpu, l40s-pcie-8gpu or gb200-4gpu (`testbed up --help` lists them)."
  type        = string
  default     = "h100-sxm-8gpu"

  validation {
    condition     = contains(["h200-1gpu", "h100-sxm-8gpu", "l40s-pcie-8gpu", "gb200-4gpu"], var.profile)
    error_message = "profile must be one of h200-1gpu, h100-sxm-8gpu, l40s-pcie-8gpu, gb200-4gpu."
  }
}

variable "shape" {
  description = "Link shape between the hosts: ethernet (25 GbE at 1:100), infiniband (200G HDR at 1:100) or none (unshaped). null keeps the profile's default."
  type        = string
  default     = null

  validation {
    condition     = var.shape == null || contains(["ethernet", "infiniband", "none"], coalesce(var.shape, "none"))
    error_message = "shape must be null, \"ethernet\", \"infiniband\" or \"none\"."
  }
}

variable "host_names" {
  description = "Host names, one per host (`testbed up --hosts`). Empty: h1..hN."
  type        = list(string)
  default     = []

  validation {
    condition = alltrue([
      for h in var.host_names : can(regex("^[a-z][a-z0-9-]{0,12}$", h)) && !contains(["hub", "ctl"], h)
    ])
    error_message = "Each host name must be 1-13 characters of a-z, 0-9 and -, start with a letter, and not be \"hub\" or \"ctl\" (reserved by the testbed)."
  }

  validation {
    condition     = length(distinct(var.host_names)) == length(var.host_names)
    error_message = "host_names repeats a name; every host needs its own."
  }
}

variable "testbed_bin" {
  description = "Path of the `testbed` executable. null: the repository's venv, .venv/bin/testbed (run `make setup` first)."
  type        = string
  default     = null

  validation {
    condition     = var.testbed_bin == null || can(regex("^/", coalesce(var.testbed_bin, "/")))
    error_message = "testbed_bin must be an absolute path (or null for the repository's .venv/bin/testbed)."
  }
}

variable "run_dir" {
  description = "Where testbed keeps each testbed's state, ssh config and inventory (VFLEET_TESTBED_RUN). The module passes it to every testbed command it runs."
  type        = string
  default     = "/run/vfleet-testbed"

  validation {
    condition     = can(regex("^/[^\\s]*[^/\\s]$", var.run_dir))
    error_message = "run_dir must be an absolute path without spaces or a trailing slash, e.g. /run/vfleet-testbed."
  }
}
