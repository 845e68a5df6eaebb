variables {
  env = "local"
  inventory = {
    source         = "local_testbed"
    cluster        = "local"
    profile        = "h100-sxm-8gpu"
    ssh_user       = "root"
    ssh_config     = "/run/vfleet-testbed/local/ssh_config"
    inventory_path = "/run/vfleet-testbed/local/inventory.yml"
    hosts = [
      { name = "h1", address = "10.213.0.11", private_address = "10.213.0.11", gpus = 8, gpu = "H100-SXM-80GB" },
      { name = "h2", address = "10.213.0.12", private_address = "10.213.0.12", gpus = 8, gpu = "H100-SXM-80GB" },
    ]
  }
}

run "renders_without_writing" {
  command = apply

  assert {
    condition     = yamldecode(output.yaml).all.children.gpu_hosts.hosts.h1.ansible_host == "10.213.0.11"
    error_message = "each host is in gpu_hosts with ansible_host = address"
  }
  assert {
    condition     = yamldecode(output.yaml).all.children.gpu_hosts.hosts.h2.vfleet_gpus == 8 && yamldecode(output.yaml).all.children.gpu_hosts.hosts.h2.vfleet_gpu == "H100-SXM-80GB"
    error_message = "GPU facts are host variables"
  }
  assert {
    condition     = yamldecode(output.yaml).all.vars.ansible_ssh_common_args == "-F /run/vfleet-testbed/local/ssh_config"
    error_message = "an ssh config becomes -F for ssh, scp and sftp"
  }
  assert {
    condition     = yamldecode(output.yaml).all.vars.ansible_user == "root" && yamldecode(output.yaml).all.vars.vfleet_env == "local"
    error_message = "connection user and env are group variables"
  }
  assert {
    condition     = yamldecode(output.yaml).all.vars.vfleet_source_inventory == "/run/vfleet-testbed/local/inventory.yml"
    error_message = "the source's own inventory file is recorded"
  }
  assert {
    condition     = startswith(output.yaml, "# Written by Terraform (env local, module local_testbed)")
    error_message = "the file says where it came from"
  }
  assert {
    condition     = output.hosts_yml == null && output.hosts_json == null && length(terraform_data.files) == 0
    error_message = "out_dir = null writes nothing"
  }
}

run "no_ssh_config_no_source_inventory" {
  command = apply

  variables {
    env = "prod"
    inventory = {
      source         = "static_inventory"
      cluster        = "prod"
      profile        = "static"
      ssh_user       = "ubuntu"
      ssh_config     = null
      inventory_path = null
      hosts          = [{ name = "gpu-a", address = "192.0.2.11", private_address = "10.0.0.11", gpus = 8, gpu = "H200-SXM-141GB" }]
    }
  }

  assert {
    condition     = !contains(keys(yamldecode(output.yaml).all.vars), "ansible_ssh_common_args") && !contains(keys(yamldecode(output.yaml).all.vars), "vfleet_source_inventory")
    error_message = "no ssh config, no -F; no source inventory, no variable"
  }
  assert {
    condition     = yamldecode(output.yaml).all.children.gpu_hosts.hosts["gpu-a"].vfleet_private_address == "10.0.0.11"
    error_message = "the private address is a host variable"
  }
}

run "writes_files" {
  command = apply

  variables {
    out_dir = "/tmp/vfleet-tftest-ansible-inventory"
  }

  assert {
    condition     = output.hosts_yml == "/tmp/vfleet-tftest-ansible-inventory/hosts.yml"
    error_message = "hosts.yml goes into out_dir"
  }
  assert {
    condition     = file(output.hosts_yml) == output.yaml
    error_message = "the file holds exactly the rendered inventory"
  }
  assert {
    condition     = jsondecode(file(output.hosts_json)).hosts[1].name == "h2"
    error_message = "hosts.json holds the inventory shape"
  }
}

run "rejects_unknown_source" {
  command = plan
  variables {
    inventory = {
      source         = "aws"
      cluster        = "x"
      profile        = "x"
      ssh_user       = "root"
      ssh_config     = null
      inventory_path = null
      hosts          = [{ name = "a", address = "10.0.0.1", private_address = "10.0.0.1", gpus = 8, gpu = "H100-SXM-80GB" }]
    }
  }
  expect_failures = [var.inventory]
}

run "rejects_no_hosts" {
  command = plan
  variables {
    inventory = {
      source         = "static_inventory"
      cluster        = "x"
      profile        = "x"
      ssh_user       = "root"
      ssh_config     = null
      inventory_path = null
      hosts          = []
    }
  }
  expect_failures = [var.inventory]
}

run "rejects_repeated_host" {
  command = plan
  variables {
    inventory = {
      source         = "static_inventory"
      cluster        = "x"
      profile        = "x"
      ssh_user       = "root"
      ssh_config     = null
      inventory_path = null
      hosts = [
        { name = "a", address = "10.0.0.1", private_address = "10.0.0.1", gpus = 8, gpu = "H100-SXM-80GB" },
        { name = "a", address = "10.0.0.2", private_address = "10.0.0.2", gpus = 8, gpu = "H100-SXM-80GB" },
      ]
    }
  }
  expect_failures = [var.inventory]
}

run "rejects_bad_env" {
  command = plan
  variables {
    env = "Prod"
  }
  expect_failures = [var.env]
}

run "rejects_relative_out_dir" {
  command = plan
  variables {
    out_dir = "artifacts/local"
  }
  expect_failures = [var.out_dir]
}
