# Both modes, with the OCI provider mocked: no credentials, nothing rented. The static mode
# is applied for real (it creates only terraform_data and the inventory files, here in a
# temporary directory). Offline, tests/unit/terraform/test_terraform.py runs this file on a copy
# of the env with the cloud module's stand-in (tests/unit/terraform/stubs).

mock_provider "oci" {}

variables {
  artifacts_dir = "/tmp/vfleet-tftest-prod"
  mode          = "static"
  static = {
    nodes = [
      { name = "gpu-a", address = "10.0.0.11", gpus = 8, gpu = "H200-SXM-141GB" },
      { name = "gpu-b", address = "10.0.0.12", gpus = 8, gpu = "H200-SXM-141GB" },
    ]
  }
}

run "static_mode" {
  command = apply

  assert {
    condition     = output.inventory.source == "static_inventory" && output.inventory.cluster == "prod"
    error_message = "mode = static uses modules/static_inventory"
  }
  assert {
    condition     = tolist([for h in output.inventory.hosts : "${h.name}=${h.address}"]) == tolist(["gpu-a=10.0.0.11", "gpu-b=10.0.0.12"])
    error_message = "the static nodes are the inventory's hosts"
  }
  assert {
    condition     = file(output.hosts_yml) == output.ansible_inventory
    error_message = "the rendered inventory is written to artifacts_dir/hosts.yml"
  }
  assert {
    condition     = yamldecode(output.ansible_inventory).all.children.gpu_hosts.hosts["gpu-b"].vfleet_gpus == 8
    error_message = "GPU facts reach the Ansible inventory"
  }
}

run "cloud_mode" {
  command = plan

  variables {
    mode   = "cloud"
    static = null
    cloud = {
      region              = "us-ashburn-1"
      compartment_id      = "ocid1.compartment.oc1..aaaaaaaaexample"
      availability_domain = "Uocm:US-ASHBURN-AD-1"
      subnet_id           = "ocid1.subnet.oc1.iad.aaaaaaaaexample"
      image_id            = "ocid1.image.oc1.iad.aaaaaaaaexample"
      ssh_public_key      = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKeyExampleKeyExampleKeyExampleKey vfleet"
    }
  }

  assert {
    condition     = output.inventory.source == "baremetal_gpu_cloud" && output.inventory.profile == "BM.GPU.H200.8"
    error_message = "mode = cloud rents BM.GPU.H200.8 nodes by default"
  }
  assert {
    condition     = tolist([for h in output.inventory.hosts : h.name]) == tolist(["prod-1", "prod-2"])
    error_message = "two nodes by default, named prod-1 and prod-2"
  }
  assert {
    condition     = alltrue([for h in output.inventory.hosts : h.gpus == 8 && h.gpu == "H200-SXM-141GB"])
    error_message = "8 x H200 per node"
  }
}

run "rejects_unknown_mode" {
  command = plan
  variables {
    mode = "hybrid"
  }
  expect_failures = [var.mode]
}

run "rejects_cloud_mode_without_cloud" {
  command = plan
  variables {
    mode   = "cloud"
    static = null
  }
  expect_failures = [terraform_data.mode]
}

run "rejects_static_mode_without_nodes" {
  command = plan
  variables {
    static = null
  }
  expect_failures = [terraform_data.mode]
}

run "rejects_settings_of_the_other_mode" {
  command = plan
  variables {
    mode = "cloud" # var.static is still set, from the file's variables
    cloud = {
      region              = "us-ashburn-1"
      compartment_id      = "ocid1.compartment.oc1..aaaaaaaaexample"
      availability_domain = "Uocm:US-ASHBURN-AD-1"
      subnet_id           = "ocid1.subnet.oc1.iad.aaaaaaaaexample"
      image_id            = "ocid1.image.oc1.iad.aaaaaaaaexample"
      ssh_public_key      = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKeyExampleKeyExampleKeyExampleKey vfleet"
    }
  }
  expect_failures = [terraform_data.mode]
}

run "rejects_empty_static_nodes" {
  command = plan
  variables {
    static = { nodes = [] }
  }
  expect_failures = [var.static]
}

run "rejects_bad_region" {
  command = plan
  variables {
    mode   = "cloud"
    static = null
    cloud = {
      region              = "ashburn"
      compartment_id      = "ocid1.compartment.oc1..aaaaaaaaexample"
      availability_domain = "Uocm:US-ASHBURN-AD-1"
      subnet_id           = "ocid1.subnet.oc1.iad.aaaaaaaaexample"
      image_id            = "ocid1.image.oc1.iad.aaaaaaaaexample"
      ssh_public_key      = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKeyExampleKeyExampleKeyExampleKey vfleet"
    }
  }
  expect_failures = [var.cloud]
}

run "rejects_relative_artifacts_dir" {
  command = plan
  variables {
    artifacts_dir = "artifacts/prod"
  }
  expect_failures = [var.artifacts_dir]
}
