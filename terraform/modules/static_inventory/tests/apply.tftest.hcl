# Applies for real: the module creates nothing but one terraform_data in the test's state.

variables {
  cluster_name = "prod-h200"
  nodes = [
    { name = "gpu-a", address = "192.0.2.11", gpus = 8, gpu = "H200-SXM-141GB", private_address = "10.0.0.11" },
    { name = "gpu-b", address = "gpu-b.example.net", gpus = 8, gpu = "NVIDIA H200" },
  ]
}

run "two_nodes" {
  command = apply

  assert {
    condition     = output.inventory.source == "static_inventory" && output.inventory.cluster == "prod-h200"
    error_message = "the inventory names its source module and the cluster"
  }
  assert {
    condition     = tolist([for h in output.inventory.hosts : h.name]) == tolist(["gpu-a", "gpu-b"])
    error_message = "hosts keep the order of var.nodes"
  }
  assert {
    condition     = output.inventory.hosts[0].address == "192.0.2.11" && output.inventory.hosts[0].private_address == "10.0.0.11"
    error_message = "address and private_address are taken as given"
  }
  assert {
    condition     = output.inventory.hosts[1].private_address == "gpu-b.example.net"
    error_message = "private_address defaults to address"
  }
  assert {
    condition     = alltrue([for h in output.inventory.hosts : h.gpus == 8])
    error_message = "gpus per host are taken as given"
  }
  assert {
    condition     = output.inventory.profile == "static" && output.inventory.ssh_user == "root"
    error_message = "profile defaults to \"static\", ssh_user to root"
  }
  assert {
    condition     = output.inventory.ssh_config == null && output.inventory.inventory_path == null
    error_message = "no ssh config unless given, and no inventory file beforehand"
  }
  assert {
    condition     = length(terraform_data.nodes.output) == 2
    error_message = "the state records the nodes"
  }
}

run "with_ssh_config_and_profile" {
  command = apply

  variables {
    ssh_config = abspath("main.tf") # any file that exists
    ssh_user   = "ubuntu"
    profile    = "hgx-h200-8gpu"
  }

  assert {
    condition     = output.inventory.ssh_config == abspath("main.tf") && output.inventory.ssh_user == "ubuntu" && output.inventory.profile == "hgx-h200-8gpu"
    error_message = "ssh_config, ssh_user and profile pass through"
  }
}

run "rejects_no_nodes" {
  command = plan
  variables {
    nodes = []
  }
  expect_failures = [var.nodes]
}

run "rejects_repeated_name" {
  command = plan
  variables {
    nodes = [
      { name = "gpu-a", address = "10.0.0.1", gpus = 8, gpu = "H100-SXM-80GB" },
      { name = "gpu-a", address = "10.0.0.2", gpus = 8, gpu = "H100-SXM-80GB" },
    ]
  }
  expect_failures = [var.nodes]
}

run "rejects_repeated_address" {
  command = plan
  variables {
    nodes = [
      { name = "gpu-a", address = "10.0.0.1", gpus = 8, gpu = "H100-SXM-80GB" },
      { name = "gpu-b", address = "10.0.0.1", gpus = 8, gpu = "H100-SXM-80GB" },
    ]
  }
  expect_failures = [var.nodes]
}

run "rejects_bad_ipv4" {
  command = plan
  variables {
    nodes = [{ name = "gpu-a", address = "10.0.0.300", gpus = 8, gpu = "H100-SXM-80GB" }]
  }
  expect_failures = [var.nodes]
}

run "rejects_bad_host_name" {
  command = plan
  variables {
    nodes = [{ name = "gpu_a", address = "10.0.0.1", gpus = 8, gpu = "H100-SXM-80GB" }]
  }
  expect_failures = [var.nodes]
}

run "rejects_zero_gpus" {
  command = plan
  variables {
    nodes = [{ name = "gpu-a", address = "10.0.0.1", gpus = 0, gpu = "H100-SXM-80GB" }]
  }
  expect_failures = [var.nodes]
}

run "rejects_blank_gpu" {
  command = plan
  variables {
    nodes = [{ name = "gpu-a", address = "10.0.0.1", gpus = 8, gpu = " " }]
  }
  expect_failures = [var.nodes]
}

run "rejects_bad_cluster_name" {
  command = plan
  variables {
    cluster_name = "Prod"
  }
  expect_failures = [var.cluster_name]
}

run "rejects_bad_ssh_user" {
  command = plan
  variables {
    ssh_user = "Root User"
  }
  expect_failures = [var.ssh_user]
}

run "rejects_relative_ssh_config" {
  command = plan
  variables {
    ssh_config = "ssh_config"
  }
  expect_failures = [var.ssh_config]
}

run "rejects_bad_profile" {
  command = plan
  variables {
    profile = "hgx h200"
  }
  expect_failures = [var.profile]
}

run "rejects_missing_ssh_config" {
  command = plan
  variables {
    ssh_config = "/nonexistent/ssh_config"
  }
  expect_failures = [terraform_data.nodes]
}

run "rejects_shared_private_address" {
  command = plan
  variables {
    nodes = [
      { name = "gpu-a", address = "192.0.2.1", gpus = 8, gpu = "H100-SXM-80GB", private_address = "10.0.0.1" },
      { name = "gpu-b", address = "192.0.2.2", gpus = 8, gpu = "H100-SXM-80GB", private_address = "10.0.0.1" },
    ]
  }
  expect_failures = [terraform_data.nodes]
}
