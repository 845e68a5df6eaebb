# Plan-only: no test host boots. tests/unit/terraform/test_terraform.py applies the local env for
# real (marker testbed).

run "defaults_two_h100_hosts" {
  command = plan

  assert {
    condition     = output.inventory.source == "local_testbed" && output.inventory.cluster == "local"
    error_message = "the inventory must name its source module and the testbed"
  }
  assert {
    condition     = tolist([for h in output.inventory.hosts : h.name]) == tolist(["h1", "h2"])
    error_message = "default host names must be h1..hN"
  }
  assert {
    condition     = tolist([for h in output.inventory.hosts : h.address]) == tolist(["10.213.0.11", "10.213.0.12"])
    error_message = "host i must be at 10.213.0.(11 + i), the testbed's address plan"
  }
  assert {
    condition     = alltrue([for h in output.inventory.hosts : h.gpus == 8 && h.gpu == "H100-SXM-80GB" && h.private_address == h.address])
    error_message = "h100-sxm-8gpu hosts carry 8 x H100-SXM-80GB"
  }
  assert {
    condition     = output.inventory.profile == "h100-sxm-8gpu" && output.inventory.ssh_user == "root"
    error_message = "profile and ssh user"
  }
  assert {
    condition     = output.inventory.ssh_config == "/run/vfleet-testbed/local/ssh_config" && output.inventory.inventory_path == "/run/vfleet-testbed/local/inventory.yml"
    error_message = "ssh config and inventory are the files `testbed up` writes under run_dir/name"
  }
  assert {
    condition     = terraform_data.testbed.triggers_replace.count == 2 && terraform_data.testbed.triggers_replace.profile == "h100-sxm-8gpu"
    error_message = "the testbed's identity must be in triggers_replace, so changing it re-creates the testbed"
  }
  assert {
    condition     = terraform_data.testbed.input.name == "local" && terraform_data.testbed.input.run_dir == "/run/vfleet-testbed"
    error_message = "the destroy-time provisioner reads the name and run_dir from self.input"
  }
}

run "named_hosts_other_profile_and_run_dir" {
  command = plan

  variables {
    name       = "tf-unit"
    host_count = 3
    host_names = ["gpu-a", "gpu-b", "gpu-c"]
    profile    = "gb200-4gpu"
    shape      = "ethernet"
    run_dir    = "/tmp/vfleet-testbed"
  }

  assert {
    condition     = tolist([for h in output.inventory.hosts : "${h.name}=${h.address}"]) == tolist(["gpu-a=10.213.0.11", "gpu-b=10.213.0.12", "gpu-c=10.213.0.13"])
    error_message = "named hosts keep their order and the address plan"
  }
  assert {
    condition     = alltrue([for h in output.inventory.hosts : h.gpus == 4 && h.gpu == "GB200"])
    error_message = "gb200-4gpu hosts carry 4 x GB200"
  }
  assert {
    condition     = output.inventory.ssh_config == "/tmp/vfleet-testbed/tf-unit/ssh_config"
    error_message = "paths follow run_dir and name"
  }
  assert {
    condition     = terraform_data.testbed.triggers_replace.shape == "ethernet" && terraform_data.testbed.triggers_replace.hosts == tolist(["gpu-a", "gpu-b", "gpu-c"])
    error_message = "shape and host names are part of the testbed's identity"
  }
}

run "one_h200_host" {
  command = plan

  variables {
    host_count = 1
    profile    = "h200-1gpu"
  }

  assert {
    condition     = length(output.inventory.hosts) == 1 && output.inventory.hosts[0].gpus == 1 && output.inventory.hosts[0].gpu == "H200-SXM-141GB"
    error_message = "h200-1gpu is one host with one H200"
  }
}

run "rejects_unknown_profile" {
  command = plan
  variables {
    profile = "h100-pcie-2gpu"
  }
  expect_failures = [var.profile]
}

run "rejects_zero_hosts" {
  command = plan
  variables {
    host_count = 0
  }
  expect_failures = [var.host_count]
}

run "rejects_fractional_hosts" {
  command = plan
  variables {
    host_count = 1.5
  }
  expect_failures = [var.host_count]
}

run "rejects_bad_testbed_name" {
  command = plan
  variables {
    name = "Bad.Name"
  }
  expect_failures = [var.name]
}

run "rejects_reserved_host_name" {
  command = plan
  variables {
    host_count = 2
    host_names = ["h1", "hub"]
  }
  expect_failures = [var.host_names]
}

run "rejects_repeated_host_name" {
  command = plan
  variables {
    host_count = 2
    host_names = ["h1", "h1"]
  }
  expect_failures = [var.host_names]
}

run "rejects_unknown_shape" {
  command = plan
  variables {
    shape = "nvlink"
  }
  expect_failures = [var.shape]
}

run "rejects_relative_run_dir" {
  command = plan
  variables {
    run_dir = "run/vfleet-testbed"
  }
  expect_failures = [var.run_dir]
}

run "rejects_relative_testbed_bin" {
  command = plan
  variables {
    testbed_bin = ".venv/bin/testbed"
  }
  expect_failures = [var.testbed_bin]
}

run "rejects_host_names_not_matching_count" {
  command = plan
  variables {
    host_count = 3
    host_names = ["a", "b"]
  }
  expect_failures = [terraform_data.testbed]
}

run "rejects_missing_testbed_executable" {
  command = plan
  variables {
    testbed_bin = "/nonexistent/bin/testbed"
  }
  expect_failures = [terraform_data.testbed]
}
