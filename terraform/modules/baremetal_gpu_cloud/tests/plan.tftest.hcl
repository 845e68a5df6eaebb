# Plan-only, with the OCI provider mocked: no credentials, nothing rented. Online, `terraform
# init` still installs oracle/oci for its schema. Offline, tests/unit/terraform/test_terraform.py
# runs this file against a stand-in main.tf/outputs.tf/versions.tf (tests/unit/terraform/stubs)
# with this module's real variables.tf, so assertions here stay on variables and outputs.

mock_provider "oci" {}

variables {
  cluster_name        = "tf-unit"
  node_count          = 2
  compartment_id      = "ocid1.compartment.oc1..aaaaaaaaexample"
  availability_domain = "Uocm:US-ASHBURN-AD-1"
  subnet_id           = "ocid1.subnet.oc1.iad.aaaaaaaaexample"
  image_id            = "ocid1.image.oc1.iad.aaaaaaaaexample"
  ssh_public_key      = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKeyExampleKeyExampleKeyExampleKey vfleet"
}

run "two_h100_nodes" {
  command = plan

  assert {
    condition     = tolist([for h in output.inventory.hosts : h.name]) == tolist(["tf-unit-1", "tf-unit-2"])
    error_message = "nodes are named <cluster_name>-1..N"
  }
  assert {
    condition     = alltrue([for h in output.inventory.hosts : h.gpus == 8 && h.gpu == "H100-SXM-80GB"])
    error_message = "BM.GPU.H100.8 nodes carry 8 x H100-SXM-80GB"
  }
  assert {
    condition     = output.inventory.source == "baremetal_gpu_cloud" && output.inventory.profile == "BM.GPU.H100.8" && output.inventory.ssh_user == "ubuntu"
    error_message = "source, profile (the shape) and ssh user"
  }
  assert {
    condition     = output.inventory.inventory_path == null && output.inventory.ssh_config == null
    error_message = "no inventory file beforehand, no ssh config unless given"
  }
}

run "h200_shape" {
  command = plan

  variables {
    shape      = "BM.GPU.H200.8"
    node_count = 4
    ssh_user   = "opc"
    ssh_config = "/etc/ssh/ssh_config"
  }

  assert {
    condition     = length(output.inventory.hosts) == 4 && output.inventory.hosts[3].gpu == "H200-SXM-141GB"
    error_message = "BM.GPU.H200.8 nodes carry H200-SXM-141GB"
  }
  assert {
    condition     = output.inventory.ssh_user == "opc" && output.inventory.ssh_config == "/etc/ssh/ssh_config"
    error_message = "ssh_user and ssh_config pass through"
  }
}

run "rejects_unknown_shape" {
  command = plan
  variables {
    shape = "BM.GPU.H100.4"
  }
  expect_failures = [var.shape]
}

run "rejects_zero_nodes" {
  command = plan
  variables {
    node_count = 0
  }
  expect_failures = [var.node_count]
}

run "rejects_bad_cluster_name" {
  command = plan
  variables {
    cluster_name = "GPU_cluster"
  }
  expect_failures = [var.cluster_name]
}

run "rejects_non_compartment_ocid" {
  command = plan
  variables {
    compartment_id = "ocid1.subnet.oc1.iad.aaaaaaaaexample"
  }
  expect_failures = [var.compartment_id]
}

run "rejects_short_availability_domain" {
  command = plan
  variables {
    availability_domain = "AD-1"
  }
  expect_failures = [var.availability_domain]
}

run "rejects_bad_subnet" {
  command = plan
  variables {
    subnet_id = "subnet-123"
  }
  expect_failures = [var.subnet_id]
}

run "rejects_bad_image" {
  command = plan
  variables {
    image_id = "ubuntu-22.04"
  }
  expect_failures = [var.image_id]
}

run "rejects_private_key_as_public_key" {
  command = plan
  variables {
    ssh_public_key = "-----BEGIN OPENSSH PRIVATE KEY-----"
  }
  expect_failures = [var.ssh_public_key]
}

run "rejects_bad_ssh_user" {
  command = plan
  variables {
    ssh_user = "Ubuntu User"
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

run "rejects_bad_capacity_reservation" {
  command = plan
  variables {
    capacity_reservation_id = "ocid1.instance.oc1.iad.aaaa"
  }
  expect_failures = [var.capacity_reservation_id]
}

run "rejects_bad_nsg" {
  command = plan
  variables {
    nsg_ids = ["sg-123"]
  }
  expect_failures = [var.nsg_ids]
}

run "rejects_tiny_boot_volume" {
  command = plan
  variables {
    boot_volume_size_gbs = 20
  }
  expect_failures = [var.boot_volume_size_gbs]
}

run "rejects_oversized_user_data" {
  command = plan
  variables {
    user_data = join("", [for i in range(1000) : "0123456789abcdefghijklmnopqrstuvwxyz"]) # 36,000 characters
  }
  expect_failures = [var.user_data]
}

run "rejects_null_public_ip_choice" {
  command = plan
  variables {
    assign_public_ip = null
  }
  expect_failures = [var.assign_public_ip]
}

run "rejects_empty_tag_key" {
  command = plan
  variables {
    freeform_tags = { "" = "x" }
  }
  expect_failures = [var.freeform_tags]
}
