variable "testbed_name" {
  description = "Name of the testbed the env brings up (`testbed status --name`)."
  type        = string
  default     = "local"
}

variable "host_count" {
  description = "How many test hosts to boot."
  type        = number
  default     = 2
}

variable "profile" {
  description = "Recorded GPU host the test hosts replay: h200-1gpu, h100-sxm-8gpu, l40s-pcie-8gpu or gb200-4gpu. The default replays the real H200 capture: one GPU per host, so the plan puts one engine on each host, which is what the vLLM CPU build can run there."
  type        = string
  default     = "h200-1gpu"
}

variable "shape" {
  description = "Link shape between the hosts (ethernet, infiniband, none); null keeps the profile's default."
  type        = string
  default     = null
}

variable "testbed_bin" {
  description = "Path of the `testbed` executable; null: the repository's .venv/bin/testbed."
  type        = string
  default     = null
}

variable "run_dir" {
  description = "Where testbed keeps its state, ssh config and inventory (VFLEET_TESTBED_RUN)."
  type        = string
  default     = "/run/vfleet-testbed"
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
