"""The inventories as Ansible reads them: ansible-core's InventoryManager (with its
DataLoader) over the files vfleet gives ansible-playbook, so hosts, groups (`children`,
nested, across files) and host and group variables resolve exactly as in the playbooks.

vfleet.environment.envcheck reads each file through vfleet's own model first, so a bad file is one
line
with its line number; what Ansible still refuses in a file vfleet accepted (a group that is
its own child) becomes one UserError line here. ansible-core is imported on first use: it
is slow to import and only validate and deploy need it.

`playbook_vars` resolves each host's variables as ansible-playbook will (group_vars and
host_vars files included), for the checks that must see what the connection will use.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vfleet.errors import UserError
from vfleet.inputs.files import Vaulted

_REFUSED = re.compile(r"Failed to parse inventory with 'yaml' plugin: (.*)")


@dataclass(frozen=True)
class Host:
    """One inventory host: where to reach it, the file that first names it, its groups."""

    name: str
    address: str
    port: int
    source: str
    groups: frozenset[str]
    vars: dict[str, Any] = field(default_factory=dict)


def _ansible_configured() -> None:
    """Ansible reads its config (ANSIBLE_CONFIG, else ./ansible.cfg, ...) when first
    imported; one it refuses is the operator's to fix: one line, not an internal error."""
    from ansible.errors import AnsibleError

    try:
        import ansible.constants  # noqa: F401
    except AnsibleError as exc:
        raise UserError(
            f"Ansible cannot read its config ({_first_line(exc)}): fix the ansible.cfg that "
            "ANSIBLE_CONFIG names, or unset ANSIBLE_CONFIG to use the bundle's"
        ) from None


def ansible_inventory(sources: list[str]) -> Any:
    """The inventories as ansible-playbook reads them (InventoryManager), one file at a time
    so a file Ansible refuses is named; Ansible says why in warnings, kept off the terminal:
    its yaml plugin's reason becomes the one line."""
    _ansible_configured()
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    inventory = InventoryManager(loader=DataLoader(), parse=False)
    for source in sources:
        said = io.StringIO()
        with contextlib.redirect_stderr(said):
            parsed = inventory.parse_source(source)
        if not parsed:
            found = _REFUSED.search(said.getvalue())
            reason = found.group(1).strip().rstrip(".") if found else "no plugin accepts it"
            raise UserError(
                f"{source}: Ansible cannot read this inventory: {reason}: fix it until "
                f"`ansible-inventory -i {source} --graph` reads it"
            )
    inventory.reconcile_inventory()
    return inventory


def _plain(value: Any) -> Any:
    """A value from Ansible's loader as plain Python: its strings and numbers carry tags,
    and a vaulted one becomes Vaulted, as vfleet's own loader reads it."""
    from ansible.parsing.vault import VaultHelper

    ciphertext = VaultHelper.get_ciphertext(value, with_tags=False)
    if ciphertext is not None:
        return Vaulted(ciphertext)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def ansible_hosts(inventory: Any) -> list[Host]:
    """Each host of `inventory` with its groups (ancestors too) and its variables: the
    inventories' group vars, then its own over them, as Ansible merges them."""
    from ansible.inventory.helpers import get_group_vars
    from ansible.utils.vars import combine_vars

    hosts = []
    for host in inventory.hosts.values():
        groups = host.get_groups()  # with every ancestor group, as Ansible nests them
        own = host.get_vars()
        magic = {"inventory_file", "inventory_dir", *host.get_magic_vars()}
        merged = combine_vars(get_group_vars(groups), own)  # group vars under host vars
        hostvars = {str(k): _plain(v) for k, v in merged.items() if k not in magic}
        address = str(hostvars.get("ansible_host", host.name))
        port = int(hostvars.get("ansible_port", 22))
        source = str(own.get("inventory_file", ""))  # the first file that names the host
        names = frozenset(str(g.name) for g in groups)
        hosts.append(Host(str(host.name), address, port, source, names, hostvars))
    return hosts


class PlainVars(Mapping[str, Any]):
    """A host's variables from Ansible's VariableManager, each made plain when read (most
    are never read: converting them all would cost a copy of every group list per host)."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self._raw = raw

    def __getitem__(self, name: str) -> Any:
        return _plain(self._raw[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


def playbook_vars(sources: list[str], playbook_dir: Path) -> Iterator[tuple[str, PlainVars]]:
    """Each host with its variables as ansible-playbook resolves them for `-i` over these
    sources (a folder: every inventory file in it) and a playbook in `playbook_dir`: the
    inventories' own variables, then group_vars/ and host_vars/ beside each source and
    beside the playbook, by Ansible's precedence."""
    _ansible_configured()
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    folders = [Path(s) if Path(s).is_dir() else Path(s).parent for s in sources]
    for folder in folders:
        refuse_special_files(folder, whole=folder == Path(sources[0]))
    refuse_special_files(playbook_dir, whole=False)
    inventory = _quiet_inventory(sources)
    loader = DataLoader()
    loader.set_basedir(str(playbook_dir))
    manager = VariableManager(loader=loader, inventory=inventory)
    for host in inventory.hosts.values():
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                raw = manager.get_vars(host=host, include_hostvars=False)
        except AnsibleError as exc:
            raise UserError(
                f"host {host.name}: Ansible cannot read its variables ({_first_line(exc)}): "
                f"`ansible-inventory -i {sources[0]} --host {host.name}` names the file to fix"
            ) from None
        yield str(host.name), PlainVars(raw)


def refuse_special_files(folder: Path, whole: bool) -> None:
    """Ansible reads every file of an inventory folder (`whole`) and of group_vars/ and
    host_vars/ beside it with a blocking open: a FIFO or a device there would hang the
    deploy, so each is refused first (hidden names aside: Ansible skips them)."""
    tops = [folder] if whole else [folder / "group_vars", folder / "host_vars"]
    seen: set[str] = set()
    for top in tops:
        for parent, dirs, files in os.walk(top, followlinks=True):
            real = os.path.realpath(parent)
            if real in seen:
                dirs.clear()  # a link back up the tree: walked already
                continue
            seen.add(real)
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in files:
                _refuse_special(Path(parent) / name)


def _refuse_special(path: Path) -> None:
    if path.name.startswith("."):
        return
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # a dangling link: Ansible skips it too
    if not stat.S_ISREG(mode):
        raise UserError(
            f"{path} is not a regular file (a pipe, device or socket) where Ansible reads "
            "inventories and variables: remove it"
        )


def _quiet_inventory(sources: list[str]) -> Any:
    """The inventory ansible-playbook reads from `sources`, its warnings kept off the
    terminal (a file in the folder that no plugin reads, such as known_hosts, is skipped
    with a warning there too)."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return InventoryManager(loader=DataLoader(), sources=sources)
    except AnsibleError as exc:
        raise UserError(
            f"{sources[0]}: Ansible cannot read these inventories ({_first_line(exc)}): fix "
            f"them until `ansible-inventory -i {sources[0]} --graph` reads them"
        ) from None


def _first_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    line = lines[0][:200] if lines else type(exc).__name__
    return line if line.isprintable() else repr(line)
