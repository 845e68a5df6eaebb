"""The cluster an environment's probe saw, read once: the facts of every host, the failed
probes and the health gate's verdicts, and the hosts left out of the plan with why. The
deploy, plan-env, preflight and calibrate all start from it, so they judge the same
hosts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from vfleet.environment import envcheck
from vfleet.environment.context import Context, inventory_docs
from vfleet.errors import UserError
from vfleet.health import gate
from vfleet.health.gate import HostVerdict
from vfleet.probe.to_cluster import cluster_from_facts, load_facts_dir
from vfleet.topology.cluster import Cluster


@dataclass
class Probed:
    hosts: list[dict[str, Any]]
    """the normalised facts of the hosts planned on (a failed host's left out with
    --allow-partial-facts, a sick one by the health gate)"""
    cluster: Cluster
    left_out: list[str]
    why: dict[str, str] = field(default_factory=dict)
    """host -> why the plan left it out"""
    verdicts: list[HostVerdict] = field(default_factory=list)
    """the health gate's checks of every probed host"""


def probed_cluster(
    ctx: Context, command: str, allow_partial: bool, allow_degraded: bool = False
) -> Probed:
    """The cluster from artifacts/<env>/facts, read once. A failed probe stops the plan with
    one line naming the host; with allow_partial the plan goes ahead on what the probes
    collected, leaving out the hosts whose probe saw no GPU. The health gate
    (vfleet.health) then leaves out each host a check fails, unless allow_degraded."""
    facts = load_facts_dir(ctx.artifacts / "facts")
    failed = [f for f in facts if f.get("probe_failed")]
    if failed and not allow_partial:
        listing = "; ".join(
            f"{f['host']} ({' '.join('; '.join(f.get('errors') or []).split()) or 'no reason'})"
            for f in failed
        )
        raise UserError(
            f"the probe failed on {listing}: fix the host and re-run `make probe ENV={ctx.env}`, "
            f"or plan without it: vfleet {command} --env {ctx.env} --allow-partial-facts"
        )
    why = {f["host"]: "its probe saw no GPU" for f in failed if not f.get("gpu_count")}
    seen = [f for f in facts if f["host"] not in why]
    verdicts = _health_gate(ctx, seen, allow_degraded, why)
    kept = [f for f in seen if f["host"] not in why]
    _write_health(ctx, verdicts, why)
    if not kept:
        raise UserError(
            f"no host is fit to plan on ({'; '.join(f'{h}: {w}' for h, w in why.items())}): "
            f"fix the hosts and re-run make probe ENV={ctx.env}"
        )
    if why:
        print("==> hosts left out of the plan")
        for host, reason in why.items():
            print(f"    planning without {host}: {reason}")
    degraded = {h: w for h, w in gate.degraded_links(verdicts).items() if h not in why}
    cluster = cluster_from_facts(kept, allow_partial=allow_partial, degraded=degraded)
    # A host that lost a GPU is named before anything is planned around it.
    envcheck.check_probed_hardware(
        [(n.name, n.gpu.name, n.gpus) for n in cluster.nodes],
        ctx.var("vfleet_expect_gpu"),
        ctx.var("vfleet_expect_gpus_per_host"),
        envcheck.hosts_of(inventory_docs(ctx)),
    )
    return Probed(kept, cluster, list(why), why, verdicts)


def _health_gate(
    ctx: Context, facts: list[dict[str, Any]], allow_degraded: bool, why: dict[str, str]
) -> list[HostVerdict]:
    """Check every host; record in `why` each one a check fails (unless allow_degraded)."""
    verdicts = gate.assess(facts, expected_gpus(ctx))
    sick = [v for v in verdicts if v.failed]
    print("==> health gate", flush=True)
    print("    " + gate.table(verdicts).replace("\n", "\n    "))
    if sick and allow_degraded:
        print(
            f"    WARNING: planning on {len(sick)} host(s) that failed a check "
            "(--allow-degraded): " + ", ".join(v.host for v in sick)
        )
    elif sick:
        why.update({v.host: f"failed the health gate ({v.reason()})" for v in sick})
    return verdicts


def _write_health(ctx: Context, verdicts: list[HostVerdict], why: dict[str, str]) -> None:
    """artifacts/<env>/health.json: every host's checks and the hosts left out, for scripts
    and for the operator who planned without deploying."""
    doc = {
        "schema": "vfleet.health/1",
        "hosts": [v.to_json() for v in verdicts],
        "left_out": why,
    }
    ctx.artifacts.mkdir(parents=True, exist_ok=True)
    (ctx.artifacts / "health.json").write_text(json.dumps(doc, indent=2) + "\n")


def expected_gpus(ctx: Context) -> dict[str, int | None]:
    default = ctx.var("vfleet_expect_gpus_per_host")
    out = {}
    for host in envcheck.hosts_of(inventory_docs(ctx)):
        want = host.vars.get("vfleet_gpus") or default
        out[host.name] = int(want) if want else None
    return out
