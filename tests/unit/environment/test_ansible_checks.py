"""Inventories and role variables are judged by ansible-core itself: hosts, groups and their
variables as InventoryManager resolves them (compared with `ansible-inventory`'s own
output), and role variables by ArgumentSpecValidator over the roles' argument specs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO
from vfleet.environment import argspecs, envcheck
from vfleet.errors import UserError
from vfleet.inputs.files import Vaulted

ROLE_GROUPS = "".join(
    f"    {g}:\n      children: {{gpu_hosts: {{}}}}\n" for g in envcheck.ROLE_GROUPS[1:]
)

# Static: gpu_hosts nests racks two levels deep (`children` of `children`); gpu-02 is also
# in `maintenance`. Ansible merges group vars shallow to deep: gpu_hosts is also a child of
# every role group, so it is deeper than maintenance and its ansible_port wins for gpu-02,
# while gpu-02's own vfleet_gpus wins over all's. Terraform's file adds gpu-03 to gpu_hosts.
STATIC = f"""all:
  vars: {{vfleet_gpus: 8, site: lab}}
  children:
    gpu_hosts:
      vars: {{ansible_port: 2222, site: dc1}}
      children:
        rack_a:
          children:
            rack_a1:
              hosts:
                gpu-01: {{ansible_host: 10.0.0.1}}
        rack_b:
          hosts:
            gpu-02: {{ansible_host: 10.0.0.2}}
    maintenance:
      vars: {{ansible_port: 2200}}
      hosts:
        gpu-02: {{vfleet_gpus: 4}}
{ROLE_GROUPS}"""
TERRAFORM = """all:
  children:
    gpu_hosts:
      hosts:
        gpu-03: {ansible_host: 10.0.0.3, ansible_port: 22}
"""


def _inventories(tmp_path: Path, static: str = STATIC) -> list[tuple[str, dict]]:
    paths = [tmp_path / "hosts.yml", tmp_path / "tf-hosts.yml"]
    paths[0].write_text(static)
    paths[1].write_text(TERRAFORM)
    return [(str(p), envcheck.read_inventory(p)) for p in paths]


def test_nested_groups_and_a_host_in_two_groups_resolve_as_ansible_does(tmp_path):
    docs = _inventories(tmp_path)
    hosts = {h.name: h for h in envcheck.check_inventories(docs, "prod", True)}

    one, two, three = hosts["gpu-01"], hosts["gpu-02"], hosts["gpu-03"]
    assert {"rack_a1", "rack_a", "gpu_hosts", "vllm", "loadtest"} <= one.groups
    assert {"rack_b", "maintenance", "gpu_hosts", "firewall"} <= two.groups
    assert "gpu_hosts" in three.groups and "vllm_launch" in three.groups  # nested by the other file
    assert (one.address, one.port, one.vars["site"], one.vars["vfleet_gpus"]) == (
        "10.0.0.1",
        2222,
        "dc1",
        8,
    )
    assert (two.port, two.vars["vfleet_gpus"], two.vars["site"]) == (2222, 4, "dc1")
    assert (three.port, three.source) == (22, docs[1][0])
    assert one.source == docs[0][0]

    # ansible-inventory, the CLI over the same sources, is the reference.
    cli = Path(sys.executable).parent / "ansible-inventory"
    argv = [str(cli), "-i", docs[0][0], "-i", docs[1][0], "--list", "--export"]
    listed = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    for name, host in hosts.items():
        argv = [str(cli), "-i", docs[0][0], "-i", docs[1][0], "--host", name]
        theirs = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
        assert host.vars == {k: v for k, v in theirs.items() if not k.startswith("inventory_")}
        in_groups = {g for g, body in listed.items() if name in body.get("hosts", [])}
        assert in_groups <= host.groups
    groups = [body for body in listed.values() if isinstance(body, dict)]
    assert set(hosts) == {h for body in groups for h in body.get("hosts", [])}


def test_addresses_from_group_vars_count_for_duplicates(tmp_path):
    # gpu-02 gets gpu-01's address from a group it is also in: the same machine twice.
    static = STATIC.replace("vars: {ansible_port: 2200}", "vars: {ansible_host: 10.0.0.1}")
    static = static.replace("gpu-02: {vfleet_gpus: 4}", "gpu-02: {ansible_host: 10.0.0.1}")
    docs = _inventories(tmp_path, static)
    with pytest.raises(UserError, match=r"hosts gpu-01 and gpu-02 are both 10\.0\.0\.1:2222"):
        envcheck.check_inventories(docs, "prod", True)


def test_what_ansible_refuses_in_an_accepted_inventory_is_one_line(tmp_path, capfd):
    loop = STATIC.replace(
        "            rack_a1:\n",
        "            rack_a1:\n              children: {gpu_hosts: {}}\n",
    )
    docs = _inventories(tmp_path, loop)  # vfleet's own model accepts the file
    with pytest.raises(UserError) as info:
        envcheck.check_inventories(docs, "prod", True)
    message = str(info.value)
    assert message.startswith(f"{docs[0][0]}: Ansible cannot read this inventory: ")
    assert "recursive dependency loop: fix it until `ansible-inventory -i" in message
    assert "\n" not in message
    assert capfd.readouterr().err == ""  # Ansible's warnings stay off the terminal


def test_a_vaulted_inventory_variable_stays_vaulted(tmp_path):
    vaulted = "!vault |\n          $ANSIBLE_VAULT;1.1;AES256\n          6162636465666768\n"
    static = STATIC.replace("vars: {ansible_port: 2200}", f"vars:\n        become: {vaulted}")
    hosts = {h.name: h for h in envcheck.hosts_of(_inventories(tmp_path, static))}
    assert hosts["gpu-02"].vars["become"] == Vaulted(
        "$ANSIBLE_VAULT;1.1;AES256\n6162636465666768\n"
    )
    assert "become" not in hosts["gpu-01"].vars


# ---- role variables ----------------------------------------------------------------------

SPEC = """argument_specs:
  main:
    options:
      demo_port: {type: int}
      demo_enabled: {type: bool}
      demo_packages: {type: list, elements: str}
      demo_ports: {type: list, elements: int}
      demo_mode: {type: str, choices: [fast, safe]}
      demo_name: {type: str}
  other:
    options:
      demo_only_elsewhere: {type: int}
"""


@pytest.fixture
def roles(tmp_path: Path) -> Path:
    (tmp_path / "demo" / "meta").mkdir(parents=True)
    (tmp_path / "demo" / "meta" / "argument_specs.yml").write_text(SPEC)
    return tmp_path


@pytest.mark.parametrize(
    ("name", "value", "needle"),
    [
        ("demo_port", "soon", "is of type str and we were unable to convert to int"),
        ("demo_port", 1.5, "is of type float and we were unable to convert to int"),
        ("demo_enabled", "maybe", "The value 'maybe' is not a valid boolean"),
        ("demo_packages", {"a": 1}, "is of type dict and we were unable to convert to list"),
        ("demo_packages", ["ok", ["nested"]], "Elements value for option 'demo_packages'"),
        ("demo_ports", [80, "http"], "Elements value for option 'demo_ports' is of type str"),
        ("demo_mode", "quick", "value of demo_mode must be one of: fast, safe, got: quick"),
        ("demo_name", ["a"], "unable to convert to str: a str is one value, not a list"),
    ],
)
def test_a_role_variable_of_the_wrong_type_is_refused(roles, name, value, needle):
    with pytest.raises(UserError) as info:
        argspecs.check_role_vars({name: value}, roles, "all.yml")
    message = str(info.value)
    assert message.startswith(f"all.yml: {name}: ")
    assert needle in message
    assert message.endswith("(role demo): see ansible/roles/demo/README.md")


@pytest.mark.parametrize(
    "values",
    [
        {"demo_port": "12", "demo_enabled": "yes", "demo_packages": "a,b", "demo_name": 580},
        {"demo_ports": [80, "443"], "demo_mode": "safe"},
        {"demo_port": "{{ port }}", "demo_ports": [80, "{{ more }}"]},  # templated: run time
        {"demo_enabled": Vaulted("$ANSIBLE_VAULT;1.1;AES256\n61")},
        {"group_vars_hold_other_things": object(), "demo_only_elsewhere": "x"},  # not `main`
    ],
)
def test_what_ansible_accepts_or_resolves_later_passes(roles, values):
    argspecs.check_role_vars(values, roles, "all.yml")


def test_the_shipped_roles_choices_are_checked():
    roles = REPO / "ansible" / "roles"
    with pytest.raises(UserError, match="must be one of: open, proprietary, got: closed"):
        argspecs.check_role_vars({"nvidia_driver_kernel_modules": "closed"}, roles, "all.yml")
    argspecs.check_role_vars({"nvidia_driver_kernel_modules": "open"}, roles, "all.yml")
