# Test hosts on this machine: `testbed up` on create, `testbed down` on destroy.
#
# One terraform_data stands for the whole testbed (testbed boots all N hosts at once).
# Everything that identifies the testbed is in triggers_replace, so changing the count,
# profile, shape or names takes it down and brings it up again; the destroy-time
# provisioner reads only self.input, which holds what it needs.

locals {
  # What each profile replays (tools/testbed/src/vfleet_testbed/profiles.py): GPUs per host and
  # the GPU's catalog name (`vfleet gpus`). tests/unit/terraform checks this table against the
  # controller's, so the two cannot drift apart unnoticed.
  profiles = {
    "h200-1gpu"      = { gpus = 1, gpu = "H200-SXM-141GB" }
    "h100-sxm-8gpu"  = { gpus = 8, gpu = "H100-SXM-80GB" }
    "l40s-pcie-8gpu" = { gpus = 8, gpu = "L40S" }
    "gb200-4gpu"     = { gpus = 4, gpu = "GB200" }
  }

  # The testbed's address plan (tools/testbed/src/vfleet_testbed/network.py): the i-th host
  # (0-based) is 10.213.0.(11 + i), reachable only through the testbed's ssh config. The
  # create provisioner compares what `testbed up` reports with this and fails on any
  # difference, so a wrong inventory never leaves this module.
  subnet     = "10.213.0.0/24"
  first_host = 11

  host_names  = length(var.host_names) > 0 ? var.host_names : [for i in range(var.host_count) : "h${i + 1}"]
  testbed_bin = var.testbed_bin != null ? var.testbed_bin : abspath("${path.module}/../../../.venv/bin/testbed")
  state_dir   = "${var.run_dir}/${var.name}"

  hosts = [
    for i, h in local.host_names : {
      name            = h
      address         = cidrhost(local.subnet, local.first_host + i)
      private_address = cidrhost(local.subnet, local.first_host + i)
      gpus            = local.profiles[var.profile].gpus
      gpu             = local.profiles[var.profile].gpu
    }
  ]

  inventory = {
    source         = "local_testbed"
    cluster        = var.name
    profile        = var.profile
    ssh_user       = "root"
    ssh_config     = "${local.state_dir}/ssh_config"
    inventory_path = "${local.state_dir}/inventory.yml"
    hosts          = local.hosts
  }

  # Run on create, with `testbed up --json` on stdin: the testbed came up as promised.
  check_script = <<-EOT
    import json, os, sys
    tb = json.load(sys.stdin)
    want = json.loads(os.environ["WANT"])
    got = {
        "hosts": {h["name"]: h["address"] for h in tb["hosts"]},
        "ssh_config": tb["ssh_config"],
        "inventory": tb["inventory"],
    }
    if got != want:
        sys.exit(f"testbed {tb['name']} came up as {got}, but local_testbed reports {want}; "
                 "update the address plan in terraform/modules/local_testbed/main.tf")
  EOT
}

resource "terraform_data" "testbed" {
  triggers_replace = {
    name    = var.name
    count   = var.host_count
    profile = var.profile
    shape   = var.shape
    hosts   = local.host_names
    run_dir = var.run_dir
  }

  input = {
    name        = var.name
    run_dir     = var.run_dir
    testbed_bin = local.testbed_bin
  }

  lifecycle {
    precondition {
      condition     = length(var.host_names) == 0 || length(var.host_names) == var.host_count
      error_message = "host_names lists ${length(var.host_names)} names for host_count = ${var.host_count}; give one name per host or none."
    }
    precondition {
      condition     = fileexists(local.testbed_bin)
      error_message = "No testbed executable at ${local.testbed_bin}: run `make setup`, or set testbed_bin."
    }
  }

  provisioner "local-exec" {
    command     = <<-EOT
      set -eu
      out="$(mktemp)"
      trap 'rm -f "$out"' EXIT
      set -- up "$COUNT" --profile "$PROFILE" --name "$NAME" --hosts "$HOSTS" --json
      if [ -n "$SHAPE" ]; then set -- "$@" --shape "$SHAPE"; fi
      "$TESTBED" "$@" > "$out"
      py="$(dirname "$TESTBED")/python"
      [ -x "$py" ] || py=python3
      if ! "$py" -c "$CHECK" < "$out"; then
        "$TESTBED" down --name "$NAME"
        exit 1
      fi
      echo "testbed $NAME: $COUNT x $PROFILE up; ssh -F $VFLEET_TESTBED_RUN/$NAME/ssh_config <host>"
    EOT
    interpreter = ["/bin/sh", "-c"]
    environment = {
      TESTBED            = local.testbed_bin
      VFLEET_TESTBED_RUN = var.run_dir
      NAME               = var.name
      COUNT              = tostring(var.host_count)
      PROFILE            = var.profile
      SHAPE              = var.shape == null ? "" : var.shape
      HOSTS              = join(",", local.host_names)
      CHECK              = local.check_script
      WANT = jsonencode({
        hosts      = { for h in local.hosts : h.name => h.address }
        ssh_config = local.inventory.ssh_config
        inventory  = local.inventory.inventory_path
      })
    }
  }

  provisioner "local-exec" {
    when        = destroy
    command     = "\"$TESTBED\" down --name \"$NAME\""
    interpreter = ["/bin/sh", "-c"]
    environment = {
      TESTBED            = self.input.testbed_bin
      VFLEET_TESTBED_RUN = self.input.run_dir
      NAME               = self.input.name
    }
  }
}
