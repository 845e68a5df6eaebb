"""Everything `vfleet deploy` reads from an environment, checked before a host is touched:
group_vars (deploy variables by the models in vfleet.documents.deploy, role variables by the
roles' own argument specs through Ansible's validator, vfleet.environment.argspecs), the inventories
(static and Terraform's), the model named by vfleet_model, the secrets (by name and by
value), the SSH host keys, the SSH options that would run commands on this machine
(vfleet.environment.ssh_options) and the values the deploy hands `vfleet render`, by render's own
model and rules (vfleet.documents.render), so validate refuses what render would.

Each inventory is read by vfleet's model first (one line with file and line on a bad one),
then by ansible-core's InventoryManager over the same files ansible-playbook gets
(vfleet.environment.inventory), so hosts, groups (`children`, nesting across files) and their
variables
are Ansible's own; vfleet's checks (role groups present, one machine per address) run on
that. The pipeline and `vfleet validate` call `check_environment` first: bad input ends in
exit code 2 and one line.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vfleet.documents import deploy as spec
from vfleet.environment import argspecs, pins, ssh_findings, ssh_options
from vfleet.environment.bundle import bundle_root
from vfleet.environment.inventory import Host, ansible_hosts, ansible_inventory, playbook_vars
from vfleet.errors import UserError
from vfleet.inputs.files import Vaulted, load_yaml

# The role-named groups the playbooks run on; an inventory without one would skip a stage.
ROLE_GROUPS = (
    "gpu_hosts",
    "common",
    "nvidia_driver",
    "nccl",
    "vllm",
    "topology_probe",
    "firewall",
    "vllm_launch",
    "loadtest",
)
# Variables that hold secrets: allowed only vaulted, templated (from a file) or empty.
SECRET_VARS = ("vllm_hf_token", "vllm_launch_api_key", "loadtest_api_key")
WORKLOAD_PRESETS = spec.WORKLOAD_PRESETS


@dataclass
class Environment:
    """What an environment says, once checked."""

    name: str
    inventory_dir: Path
    group_vars: dict[str, Any]
    hosts: list[Host]
    vaulted: bool
    warnings: list[str] = field(default_factory=list)
    """SSH options allowed by vfleet_allow_ssh_commands, for the commands that announce
    them (validate, and deploy before it connects); the others stay quiet."""


# ---- group_vars ---------------------------------------------------------------------------


def read_group_vars(inventory_dir: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """Merge group_vars/all.yml and group_vars/all/*.yml; also name each variable's file.
    Each file's deploy variables are checked here, where its lines are known."""
    gv = inventory_dir / "group_vars"
    files = [gv / "all.yml"] if (gv / "all.yml").is_file() else []
    files += sorted((gv / "all").glob("*.yml")) if (gv / "all").is_dir() else []
    if not files:
        raise UserError(f"{gv}/all.yml is missing: every environment needs its group_vars")
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    bundle = inventory_dir.parents[1] if inventory_dir.parent.name == "inventories" else None
    root = bundle or bundle_root()
    for path in files:
        document = load_yaml(path, "group_vars")
        doc = document.data
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise UserError(f"{path}: must be a mapping of variable: value")
        spec.check_deploy_vars(document)
        spec.check_no_plain_secrets(document)
        for key, value in doc.items():
            # "{{ vfleet_pins.KEY }}" as Ansible renders it (the deploy passes vfleet_pins).
            merged[str(key)] = pins.resolve(value, root)
            origin[str(key)] = str(path)
    return merged, origin


def check_group_vars(values: dict[str, Any], origin: dict[str, str], roles_dir: Path) -> None:
    source = _source(origin, values)
    if not values.get("vfleet_model"):
        raise UserError(f"{source}: vfleet_model is not set: name the model to deploy")
    if not values.get("vfleet_model_dir_on_hosts"):
        raise UserError(
            f"{source}: vfleet_model_dir_on_hosts is not set: give the model folder's absolute "
            "path on the GPU hosts (e.g. /srv/models/DeepSeek-V3)"
        )
    by_file: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        by_file.setdefault(origin.get(key, source), {})[key] = value
    for path, subset in by_file.items():
        argspecs.check_role_vars(subset, roles_dir, path)
    _check_version(values, origin)
    spec.check_render_values(values, origin)
    _check_workload(values, origin)
    if values.get("vfleet_expect_gpu"):
        from vfleet.catalog.gpus import resolve_gpu

        try:
            resolve_gpu(str(values["vfleet_expect_gpu"]))
        except UserError as exc:
            raise UserError(f"{origin['vfleet_expect_gpu']}: vfleet_expect_gpu: {exc}") from None
    for name in SECRET_VARS:
        value = values.get(name)
        if isinstance(value, str) and value and "{{" not in value:
            raise UserError(
                f"{origin.get(name, source)}: {name} is in clear text: encrypt it "
                f"(ansible-vault encrypt_string --name {name}) or read it from a 0600 file"
            )


def _source(origin: dict[str, str], values: dict[str, Any]) -> str:
    return origin.get("vfleet_model") or next(iter(origin.values()), "group_vars")


def _check_version(values: dict[str, Any], origin: dict[str, str]) -> None:
    version = values.get("vfleet_vllm_version")
    if version is None:
        return
    from vfleet.catalog.flag_registry import flag_set
    from vfleet.catalog.releases import parse_version

    where = origin.get("vfleet_vllm_version", "group_vars")
    try:
        parse_version(str(version))
        flag_set(str(version))
    except UserError as exc:
        raise UserError(f"{where}: vfleet_vllm_version: {exc}") from None


def _check_workload(values: dict[str, Any], origin: dict[str, str]) -> None:
    workload = values.get("vfleet_workload")
    if workload is None or workload in WORKLOAD_PRESETS:
        return
    where = Path(origin["vfleet_workload"])
    candidate = Path(workload) if Path(workload).is_absolute() else where.parent / workload
    if not candidate.is_file():
        raise UserError(
            f"{where}: vfleet_workload {workload!r} is neither a preset "
            f"({', '.join(WORKLOAD_PRESETS)}) nor a file next to it"
        )


# ---- inventories --------------------------------------------------------------------------


def read_inventory(path: Path) -> dict[str, Any]:
    """One inventory by vfleet's model first: a bad file is one line with its line number."""
    document = load_yaml(path, "inventory")
    spec.check_inventory(document)
    spec.check_no_plain_secrets(document)
    inventory: dict[str, Any] = document.data  # check_inventory refuses anything but a mapping
    return inventory


def hosts_of(docs: list[tuple[str, Any]]) -> list[Host]:
    """Every host the inventories name, with its groups and variables as Ansible resolves
    them. `docs`: (path, document) from read_inventory; Ansible reads the paths again."""
    return ansible_hosts(ansible_inventory([source for source, _ in docs]))


def check_inventories(
    docs: list[tuple[str, Any]], env: str, provisioned: bool, warnings: list[str] | None = None
) -> list[Host]:
    """Structure, groups, duplicates, GPU names and SSH options; `provisioned`: Terraform has
    run (or the environment is static), so gpu_hosts must not be empty. SSH options that
    vfleet_allow_ssh_commands allowed go to `warnings` when given; the caller decides
    whether to print them."""
    static = docs[0][0] if docs else f"inventories/{env}/hosts.yml"
    inventory = ansible_inventory([source for source, _ in docs])
    missing = [g for g in ROLE_GROUPS if g not in inventory.groups]
    if missing:
        raise UserError(
            f"{static}: group {missing[0]} is missing: keep the role-named groups of "
            "inventories/local/hosts.yml (each a child group of gpu_hosts)"
        )
    hosts = ansible_hosts(inventory)
    seen: dict[tuple[str, int], str] = {}
    private_seen: dict[str, str] = {}
    for host in hosts:
        key = (host.address, host.port)
        if key in seen:
            raise UserError(
                f"{host.source}: hosts {seen[key]} and {host.name} are both "
                f"{host.address}:{host.port}: list each machine once"
            )
        private = host.vars.get("vfleet_private_address")
        if private and not spec.is_templated(private):
            if private in private_seen:
                raise UserError(
                    f"{host.source}: hosts {private_seen[private]} and {host.name} both have "
                    f"vfleet_private_address {private}: give each host its own"
                )
            private_seen[private] = host.name
        seen[key] = host.name
        if host.vars.get("vfleet_gpu"):
            from vfleet.catalog.gpus import resolve_gpu

            try:
                resolve_gpu(str(host.vars["vfleet_gpu"]))
            except UserError as exc:
                raise UserError(f"{host.source}: host {host.name}: {exc}") from None
    found = check_ssh_hosts(docs, env)
    gpu_hosts = [h for h in hosts if "gpu_hosts" in h.groups]
    if provisioned and not gpu_hosts:
        raise UserError(
            f"{static}: no hosts in gpu_hosts: list your GPU nodes there (static) or "
            f"provision them (make provision ENV={env})"
        )
    if warnings is not None:
        warnings += found
    return hosts


# ---- SSH options that run commands on this machine ---------------------------------------


def _bundle_of(inventory_dir: Path) -> Path:
    return inventory_dir.parents[1] if inventory_dir.parent.name == "inventories" else bundle_root()


def ansible_site(env: str, root: Path) -> ssh_options.Site:
    """Where the deploy runs ansible-playbook, and the extra vars it passes
    (vfleet.environment.commands.playbook)."""
    extra = {
        "vfleet_env": env,
        "vfleet_root": str(root),
        "vfleet_artifacts": str(root / "artifacts" / env),
        "vfleet_api_key_path": "",
        "vfleet_pins": pins.pins(root) if (root / "pins.env").is_file() else {},
    }
    return ssh_options.Site(root / "ansible", extra)


def check_ssh_hosts(docs: list[tuple[str, Any]], env: str) -> list[str]:
    """Every host's SSH options as ansible-playbook resolves them: `-i` over the static
    inventory's folder (each inventory file in it, group_vars/ and host_vars/), then
    Terraform's inventory, with the playbooks' own group_vars/ and host_vars/."""
    if not docs:
        return []
    folder = Path(docs[0][0]).parent
    root = _bundle_of(folder)
    sources = [str(folder), *(source for source, _ in docs[1:])]
    hosts = playbook_vars(sources, root / "ansible" / "playbooks")
    return ssh_options.check_hosts(hosts, ansible_site(env, root))


def check_ssh_config(
    env: str, root: Path, values: dict[str, Any], origin: dict[str, str], no_hosts: bool
) -> list[str]:
    """ansible.cfg's SSH settings (the file the deploy hands ansible-playbook: ANSIBLE_CONFIG,
    else the bundle's), and, while no inventory lists a host yet, group_vars' SSH variables
    (with hosts, check_ssh_hosts sees them as each host gets them)."""
    site = ansible_site(env, root)
    allowed = ssh_options.allow_flag(origin.get(ssh_findings.ALLOW, "group_vars"), values)
    config = Path(os.environ.get("ANSIBLE_CONFIG") or root / "ansible" / "ansible.cfg")
    config = config / "ansible.cfg" if config.is_dir() else config
    warnings = ssh_options.check_ansible_cfg(config, site, allowed)
    for name in ssh_options.VARIABLES if no_hosts else ():
        if name in values:
            warnings += ssh_options.check_place(origin[name], values, site, allowed, (name,))
    return warnings


# ---- secrets ------------------------------------------------------------------------------


def check_secret_file(path: Path, what: str) -> None:
    """A secret on the controller: a regular file, only its owner may read it, not empty."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise UserError(f"{what} {path} does not exist: create it with mode 0600") from None
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"{what} {path} is not a regular file: point at the file itself")
    if info.st_mode & 0o077:
        raise UserError(
            f"{what} {path} is readable by others (mode {stat.S_IMODE(info.st_mode):04o}): "
            f"chmod 600 {path}"
        )
    if not path.read_text().strip():
        raise UserError(f"{what} {path} is empty: write the secret into it")


def check_vault_password(vaulted: bool) -> None:
    """Vaulted values need a password source Ansible can read unattended."""
    if not vaulted:
        return
    password = os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE")
    if not password:
        raise UserError(
            "group_vars hold Ansible Vault values but no password is configured: "
            "export ANSIBLE_VAULT_PASSWORD_FILE=/path/to/password-file (mode 0600)"
        )
    path = Path(password)
    if path.is_file() and os.access(path, os.X_OK):
        return  # a script that prints the password (e.g. from a secret manager)
    check_secret_file(path, "vault password file")


def has_vaulted(value: Any) -> bool:
    if isinstance(value, Vaulted):
        return True
    if isinstance(value, dict):
        return any(has_vaulted(v) for v in value.values())
    if isinstance(value, list):
        return any(has_vaulted(v) for v in value)
    return False


# ---- what deploy reads on the controller -------------------------------------------------


def check_model(env: str, values: dict[str, Any], origin: dict[str, str]) -> None:
    """vfleet_model resolves as `vfleet plan --model` will resolve it, so an unknown id stops
    here and not after Terraform. The local default's tiny model is made by the deploy."""
    from vfleet.catalog.models import load_model

    model = values.get("vfleet_model")
    if not isinstance(model, str) or spec.is_templated(model):
        return
    path = Path(model).expanduser()
    if env == "local" and path.is_absolute() and not path.exists():
        return
    try:
        load_model(model)
    except UserError as exc:
        raise UserError(
            f"{origin.get('vfleet_model', 'group_vars')}: vfleet_model: {exc}"
        ) from None


def check_api_key_file(
    env: str, values: dict[str, Any], origin: dict[str, str], root: Path
) -> None:
    """The API key file's mode, as deploy checks it; the local default makes it on first
    use, so a missing one is fine there."""
    name = values.get("vfleet_api_key_file")
    if not isinstance(name, str) or not name or spec.is_templated(name):
        return
    if values.get("vfleet_serving_mode") == "disaggregated":
        from vfleet.render.disaggregated import refuse_keyed_pools

        refuse_keyed_pools(
            f"{origin['vfleet_api_key_file']}: vfleet_api_key_file",
            "remove vfleet_api_key_file (and keep the engines on a private network)",
        )
    path = Path(name) if Path(name).is_absolute() else root / name
    if env == "local" and not path.exists():
        return
    check_secret_file(
        path, f"API key file (vfleet_api_key_file in {origin['vfleet_api_key_file']})"
    )


# ---- the whole environment ----------------------------------------------------------------


def check_environment(
    env: str,
    inventory_dir: Path,
    roles_dir: Path,
    extra_inventories: list[Path] | None = None,
    provisioned: bool = True,
) -> Environment:
    """Read and check group_vars and inventories; raise UserError on the first problem."""
    if not inventory_dir.is_dir():
        raise UserError(
            f"{inventory_dir} {_not_a_folder(inventory_dir)}: every environment needs an "
            "inventory folder (e.g. inventories/prod)"
        )
    values, origin = read_group_vars(inventory_dir)
    check_group_vars(values, origin, roles_dir)
    vaulted = has_vaulted(values)
    check_vault_password(vaulted)
    root = _bundle_of(inventory_dir)
    check_model(env, values, origin)
    check_api_key_file(env, values, origin, root)
    static = inventory_dir / "hosts.yml"
    docs = [(str(static), read_inventory(static))]
    docs += [(str(p), read_inventory(p)) for p in extra_inventories or [] if p.is_file()]
    warnings: list[str] = []
    hosts = check_inventories(docs, env, provisioned, warnings)
    warnings += check_ssh_config(env, root, values, origin, no_hosts=not hosts)
    return Environment(env, inventory_dir, values, hosts, vaulted, warnings)


def _not_a_folder(path: Path) -> str:
    """What stands where a folder should be (stat opens nothing: a pipe cannot block)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "does not exist"
    if stat.S_ISFIFO(mode):
        return "is a named pipe (FIFO), not a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a folder"
    return "is a file, not a folder"


# ---- what the probe found against what the operator expects -------------------------------


def check_probed_hardware(
    nodes: list[tuple[str, str, int]],
    expect_gpu: str | None,
    expect_count: int | None,
    hosts: list[Host],
) -> None:
    """nodes: (host, GPU catalog name, GPU count) from the facts. A host with fewer GPUs
    than expected (one fell off the bus) or another model must not be planned silently."""
    from vfleet.catalog.gpus import resolve_gpu

    declared = {h.name: h.vars for h in hosts}
    for name, gpu, count in nodes:
        hostvars = declared.get(name, {})
        want_gpu = hostvars.get("vfleet_gpu") or expect_gpu
        want_count = hostvars.get("vfleet_gpus") or expect_count
        if want_count and count != int(want_count):
            raise UserError(
                f"host {name}: the probe found {count} GPUs, the inventory expects {want_count}: "
                "check nvidia-smi there (a GPU off the bus?), then `make probe`"
            )
        if want_gpu and resolve_gpu(str(want_gpu)).name != gpu:
            raise UserError(
                f"host {name}: the probe found {gpu}, the inventory expects {want_gpu}: "
                "fix vfleet_gpu / vfleet_expect_gpu or the host list"
            )
