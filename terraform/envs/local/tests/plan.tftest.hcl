# Plan-only: boots nothing and writes nothing. tests/unit/terraform/test_terraform.py applies
# this env for real (marker testbed) with its state and files in a temporary directory.

run "defaults" {
  command = plan

  assert {
    condition     = length(output.inventory.hosts) == 2 && output.inventory.profile == "h200-1gpu"
    error_message = "the local env defaults to 2 x h200-1gpu test hosts (one engine per host)"
  }
  assert {
    condition     = output.inventory.source == "local_testbed" && output.inventory.cluster == "local"
    error_message = "the local env uses the local_testbed module, testbed name local"
  }
  assert {
    condition     = yamldecode(output.ansible_inventory).all.vars.vfleet_env == "local"
    error_message = "the Ansible inventory belongs to env local"
  }
  assert {
    condition     = endswith(output.hosts_yml, "/artifacts/local/hosts.yml") && endswith(output.hosts_json, "/artifacts/local/hosts.json")
    error_message = "the env writes only into <repo>/artifacts/local/"
  }
}

run "variables_reach_the_module" {
  command = plan

  variables {
    testbed_name  = "tf-env"
    host_count    = 3
    profile       = "l40s-pcie-8gpu"
    shape         = "none"
    artifacts_dir = "/tmp/vfleet-artifacts-local"
  }

  assert {
    condition     = length(output.inventory.hosts) == 3 && output.inventory.hosts[2].gpu == "L40S" && output.inventory.cluster == "tf-env"
    error_message = "host_count, profile and testbed_name reach local_testbed"
  }
  assert {
    condition     = output.hosts_yml == "/tmp/vfleet-artifacts-local/hosts.yml"
    error_message = "artifacts_dir overrides where the inventory is written"
  }
}

run "rejects_relative_artifacts_dir" {
  command = plan
  variables {
    artifacts_dir = "artifacts/local"
  }
  expect_failures = [var.artifacts_dir]
}
