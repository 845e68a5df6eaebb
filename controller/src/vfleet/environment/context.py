"""One environment of one bundle: its checked group_vars, its paths and its secrets.

Loading the context checks the environment's group_vars and inventories (exit 2 on bad
input, before any host is touched), so every phase after it can trust them.
"""

from __future__ import annotations

import os
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vfleet.environment import envcheck, known_hosts
from vfleet.environment.bundle import bundle_root
from vfleet.environment.inventory import Host
from vfleet.environment.ssh_options import print_warnings
from vfleet.errors import UserError

ENVS = ("local", "staging", "prod")


@dataclass
class Context:
    env: str
    root: Path
    group_vars: dict[str, Any] = field(default_factory=dict)
    api_key_file: Path | None = None
    timings: list[tuple[str, float]] = field(default_factory=list)
    """(phase, seconds) in the order they ran; printed at the end and in the report"""
    venv_bin: Path = field(default_factory=lambda: Path(sys.executable).parent)
    """where ansible-playbook and terraform of this controller's venv are"""

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts" / self.env

    @property
    def inventory(self) -> Path:
        return self.root / "inventories" / self.env

    def var(self, name: str, default: Any = None) -> Any:
        return self.group_vars.get(name, default)

    def shown(self, path: Path) -> str:
        """A path as the operator reads it: relative to the bundle when inside it."""
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)


def load_context(env: str, root: Path | str | None = None, announce: bool = False) -> Context:
    """The checked environment. `announce`: print the SSH options that
    vfleet_allow_ssh_commands allowed (the deploy does, once, before it connects)."""
    if env not in ENVS:
        raise UserError(f"ENV={env} is not one of {', '.join(ENVS)}: e.g. make deploy ENV=prod")
    ctx = Context(env, bundle_root(root))
    checked = envcheck.check_environment(
        env, ctx.inventory, ctx.root / "ansible" / "roles", [ctx.artifacts / "hosts.yml"], False
    )
    ctx.group_vars = checked.group_vars
    if announce:
        print_warnings(checked.warnings)
    ctx.api_key_file = api_key_file(ctx)
    return ctx


def api_key_file(ctx: Context) -> Path | None:
    """The API key on the controller (vfleet_api_key_file, mode 0600). The local default
    makes a random one on first use; elsewhere the operator provides it."""
    name = ctx.var("vfleet_api_key_file")
    if not name:
        return None
    path = Path(name) if Path(name).is_absolute() else ctx.root / name
    if ctx.env == "local" and not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
    envcheck.check_secret_file(path, "API key file (vfleet_api_key_file)")
    return path


def inventory_docs(ctx: Context) -> list[tuple[str, dict[str, Any]]]:
    """The static inventory, then Terraform's when it has written one."""
    paths = [ctx.inventory / "hosts.yml", ctx.artifacts / "hosts.yml"]
    return [(str(p), envcheck.read_inventory(p)) for p in paths if p == paths[0] or p.is_file()]


def known_hosts_file(ctx: Context) -> Path:
    name = str(ctx.var("vfleet_known_hosts_file") or f"inventories/{ctx.env}/known_hosts")
    return Path(name) if Path(name).is_absolute() else ctx.root / name


def check_hosts(ctx: Context) -> list[Host]:
    """After Terraform: the full inventory has hosts, and outside the local testbed every
    one of them is in the managed known_hosts file."""
    hosts = envcheck.check_inventories(inventory_docs(ctx), ctx.env, provisioned=True)
    if ctx.env != "local":
        gpu_hosts = [h for h in hosts if "gpu_hosts" in h.groups]
        known_hosts.check(
            known_hosts_file(ctx), gpu_hosts, ctx.env, str(ctx.var("ansible_ssh_common_args", ""))
        )
    return hosts
