"""`vfleet preflight --env ENV`: the inventory's hosts swept over SSH, then, where the
environment has been probed, the health gate on the facts (the same checks the deploy runs
before it plans)."""

from __future__ import annotations

import time
from pathlib import Path

from vfleet.environment import envcheck
from vfleet.environment.context import ENVS, Context, inventory_docs, known_hosts_file, load_context
from vfleet.errors import UserError
from vfleet.health import gate, ssh_sweep
from vfleet.health.gate import HostVerdict


def targets(ctx: Context) -> list[ssh_sweep.Target]:
    """The GPU hosts as Ansible reaches them; host keys against the managed known_hosts
    (outside the local testbed, whose ssh config turns checking off)."""
    known = known_hosts_file(ctx) if ctx.env != "local" else None
    out = []
    for host in envcheck.hosts_of(inventory_docs(ctx)):
        if "gpu_hosts" not in host.groups:
            continue
        hostvars = {**ctx.group_vars, **host.vars}
        out.append(ssh_sweep.target_for(host.name, host.address, host.port, hostvars, known))
    return out


def disk_need(ctx: Context) -> tuple[str, int | None]:
    """Where the model goes on the hosts, and the KiB it needs there (its checkpoint and a
    margin). None when the model cannot be read yet: the local default makes its tiny model
    after the sweep, on the first deploy."""
    from vfleet.budget.params import checkpoint_bytes
    from vfleet.catalog.models import load_model

    model_dir = str(ctx.var("vfleet_model_dir_on_hosts") or "/srv")
    try:
        spec = load_model(str(ctx.var("vfleet_model")))
    except UserError:
        return model_dir, None
    return model_dir, ssh_sweep.need_kb(checkpoint_bytes(spec))


def run(
    env: str, root: Path | None, timeout_s: float
) -> tuple[list[ssh_sweep.Reach], list[HostVerdict] | None]:
    from vfleet.health.probed import expected_gpus
    from vfleet.probe.to_cluster import load_facts_dir

    if env not in ENVS:
        raise UserError(f"ENV={env} is not one of {', '.join(ENVS)}")
    ctx = load_context(env, root)
    hosts = targets(ctx)
    if not hosts:
        raise UserError(
            f"the {env} inventory lists no GPU host: provision first (make probe ENV={env})"
        )
    model_dir, need = disk_need(ctx)
    start = time.monotonic()
    swept = ssh_sweep.sweep(hosts, timeout_s, disk_path=model_dir, need=need)
    print(f"==> SSH sweep: {len(swept)} host(s) in {time.monotonic() - start:.1f} s", flush=True)
    facts_dir = ctx.artifacts / "facts"
    if not any(facts_dir.glob("*.json")):
        return swept, None
    return swept, gate.assess(load_facts_dir(facts_dir), expected_gpus(ctx))


def show(
    swept: list[ssh_sweep.Reach], verdicts: list[HostVerdict] | None, everything: bool
) -> None:
    print(ssh_sweep.table(swept))
    if verdicts is None:
        print("\n==> health checks: no probe facts yet (make probe ENV=...): the sweep only")
        return
    print("\n==> health checks on the probed facts")
    for v in verdicts:
        print(f"{v.host}: {v.verdict}")
    print(gate.table(verdicts, everything=everything))
