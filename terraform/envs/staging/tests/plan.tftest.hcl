# Plan-only, with the OCI provider mocked: no credentials, nothing rented. Offline,
# tests/unit/terraform/test_terraform.py runs this file on a copy of the env with the cloud
# module's stand-in (tests/unit/terraform/stubs).

mock_provider "oci" {}

variables {
  cloud = {
    region              = "us-ashburn-1"
    compartment_id      = "ocid1.compartment.oc1..aaaaaaaaexample"
    availability_domain = "Uocm:US-ASHBURN-AD-1"
    subnet_id           = "ocid1.subnet.oc1.iad.aaaaaaaaexample"
    image_id            = "ocid1.image.oc1.iad.aaaaaaaaexample"
    ssh_public_key      = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKeyExampleKeyExampleKeyExampleKey vfleet"
  }
}

run "one_h100_node_by_default" {
  command = plan

  assert {
    condition     = output.inventory.source == "baremetal_gpu_cloud" && output.inventory.profile == "BM.GPU.H100.8"
    error_message = "staging rents BM.GPU.H100.8 nodes through modules/baremetal_gpu_cloud"
  }
  assert {
    condition     = tolist([for h in output.inventory.hosts : h.name]) == tolist(["staging-1"])
    error_message = "one node, named staging-1"
  }
  assert {
    condition     = endswith(output.hosts_yml, "/artifacts/staging/hosts.yml")
    error_message = "the env writes only into <repo>/artifacts/staging/"
  }
}

run "rejects_bad_region" {
  command = plan
  variables {
    cloud = {
      region              = "Ashburn"
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
    artifacts_dir = "artifacts/staging"
  }
  expect_failures = [var.artifacts_dir]
}
