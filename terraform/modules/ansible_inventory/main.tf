# vfleet's inventory shape -> an Ansible YAML inventory, and optionally the files.
#
# Every host goes into the gpu_hosts group (the group `testbed up` writes too), with its
# GPU facts as host variables; connection settings are group variables. There is no
# `local` provider offline, so the files are written by a local-exec provisioner: the
# content travels in environment variables (no shell quoting), in chunks of 16,384
# characters because Linux caps one variable at 128 KiB (a 1,024-node inventory is larger),
# lands in a temporary file and is renamed into place. Changing the content replaces the
# resource, which removes the old files first; destroy removes them, and out_dir too when
# that leaves it empty.

locals {
  group_vars = merge(
    {
      ansible_user            = var.inventory.ssh_user
      vfleet_env              = var.env
      vfleet_cluster          = var.inventory.cluster
      vfleet_inventory_source = var.inventory.source
      vfleet_profile          = var.inventory.profile
    },
    var.inventory.ssh_config == null ? {} : {
      # ssh, scp and sftp all read the config: host keys, bastion, ProxyCommand, identity.
      ansible_ssh_common_args = "-F ${var.inventory.ssh_config}"
    },
    var.inventory.inventory_path == null ? {} : {
      vfleet_source_inventory = var.inventory.inventory_path
    },
  )

  document = {
    all = {
      vars = local.group_vars
      children = {
        gpu_hosts = {
          hosts = {
            for h in var.inventory.hosts : h.name => {
              ansible_host           = h.address
              vfleet_private_address = h.private_address
              vfleet_gpus            = h.gpus
              vfleet_gpu             = h.gpu
            }
          }
        }
      }
    }
  }

  yaml = join("", [
    "# Written by Terraform (env ${var.env}, module ${var.inventory.source}); do not edit:\n",
    "# it is rewritten on every apply and removed on destroy.\n",
    yamlencode(local.document),
  ])
  json = jsonencode(var.inventory)

  chunk = 16384
  chunks = merge(
    { for i in range(ceil(length(local.yaml) / local.chunk)) : "YAML_${i}" => substr(local.yaml, i * local.chunk, local.chunk) },
    { for i in range(ceil(length(local.json) / local.chunk)) : "JSON_${i}" => substr(local.json, i * local.chunk, local.chunk) },
  )

  hosts_yml  = var.out_dir == null ? null : "${var.out_dir}/hosts.yml"
  hosts_json = var.out_dir == null ? null : "${var.out_dir}/hosts.json"
}

resource "terraform_data" "files" {
  count = var.out_dir == null ? 0 : 1

  triggers_replace = {
    out_dir = var.out_dir
    yaml    = local.yaml
    json    = local.json
  }

  provisioner "local-exec" {
    command     = <<-EOT
      set -eu
      emit() { # print the chunks $1_0, $1_1, ... in order
        i=0
        while :; do
          eval "more=\$${$1_$i+x}"
          [ -n "$more" ] || break
          eval "printf '%s' \"\$$1_$i\""
          i=$((i + 1))
        done
      }
      mkdir -p "$OUT_DIR"
      emit YAML > "$OUT_DIR/hosts.yml.tmp"
      { emit JSON; echo; } > "$OUT_DIR/hosts.json.tmp"
      mv -f "$OUT_DIR/hosts.yml.tmp" "$OUT_DIR/hosts.yml"
      mv -f "$OUT_DIR/hosts.json.tmp" "$OUT_DIR/hosts.json"
    EOT
    interpreter = ["/bin/sh", "-c"]
    environment = merge(local.chunks, { OUT_DIR = var.out_dir })
  }

  provisioner "local-exec" {
    when        = destroy
    command     = "rm -f \"$OUT_DIR/hosts.yml\" \"$OUT_DIR/hosts.json\" && { rmdir \"$OUT_DIR\" 2>/dev/null || true; }"
    interpreter = ["/bin/sh", "-c"]
    environment = {
      OUT_DIR = self.triggers_replace.out_dir
    }
  }
}
