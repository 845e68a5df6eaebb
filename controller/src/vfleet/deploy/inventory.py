"""The inventories as Ansible reads them: ansible-core's InventoryManager (with its
DataLoader) over the files vfleet gives ansible-playbook, so hosts, groups (`children`,
nested, across files) and host and group variables resolve exactly as in the playbooks.

vfleet.deploy.envcheck reads each file through vfleet's own model first, so a bad file is one line
with its line number; what Ansible still refuses in a file vfleet accepted (a group that is
its own child) becomes one UserError line here. ansible-core is imported on first use: it
is slow to import and only validate and deploy need it.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass, field
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


def ansible_inventory(sources: list[str]) -> Any:
    """The inventories as ansible-playbook reads them (InventoryManager), one file at a time
    so a file Ansible refuses is named; Ansible says why in warnings, kept off the terminal:
    its yaml plugin's reason becomes the one line."""
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
