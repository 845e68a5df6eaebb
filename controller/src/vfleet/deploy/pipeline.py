"""`make deploy`, `make probe`, `make plan`, `make restart`, `make destroy`: each journey is a
list of phases (name, action, when it runs), run in order by one loop.

A phase's failure stops the journey before anything that depends on it starts; the message
names the phase, each failed host and why, and the command that resumes (every phase is
idempotent, so resuming is re-running). Durations are printed at the end and written into
the report. Planning, rendering and the report run in process (vfleet.deploy.flow);
Terraform and Ansible run as commands (vfleet.terraform.runs, vfleet.environment.commands).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vfleet.deploy import flow
from vfleet.environment import pins
from vfleet.environment.commands import PhaseFailed, playbook
from vfleet.environment.context import Context, check_hosts, load_context
from vfleet.errors import UserError
from vfleet.health.probed import Probed, probed_cluster
from vfleet.plan.make import PlanResult
from vfleet.render.types import Rendered
from vfleet.terraform import runs as terraform

CACHE = Path(os.environ.get("VFLEET_CACHE", "/var/cache/vfleet"))
TESTBED_NAME = "local"  # terraform/envs/local's testbed_name default
INSTALL = "install: common, nvidia_driver, nccl, vllm"


@dataclass
class Run:
    """One journey's state: what earlier phases produced for later ones."""

    ctx: Context
    command: str
    allow_partial: bool = False
    allow_degraded: bool = False
    purge: bool = False
    target: str = "hosts"  # plan-env: "lws" writes Kubernetes manifests as well
    probed: Probed | None = None
    planned: PlanResult | None = None
    rendered: Rendered | None = None
    first_launch: bool = False
    endpoints: list[dict[str, Any]] = field(default_factory=list)

    @property
    def local(self) -> bool:
        return self.ctx.env == "local"


@dataclass(frozen=True)
class Phase:
    name: str
    action: Callable[[Run], None]
    when: Callable[[Run], bool] = lambda run: True


# ---- the phases ---------------------------------------------------------------------------
def _engine_ready(run: Run) -> None:
    venv = pins.vllm_venv(run.ctx.root)
    if not (venv / ".vfleet-ready").is_file():
        raise UserError(f"the vLLM CPU build is missing at {venv}: run `make engine`")


def _local_controller(run: Run) -> None:
    """The controller side of the air-gapped local site: the vLLM CPU build's wheelhouse,
    the tiny model, and an HTTP server for the wheelhouse inside the testbed's network
    (ansible/playbooks/local-controller.yml, which the molecule scenarios run too)."""
    port = run.ctx.var("vfleet_wheelhouse_port", 8080)
    playbook(
        run.ctx,
        "controller: wheelhouse, tiny model, server",
        "local-controller.yml",
        {
            "vfleet_controller_cache": str(CACHE),
            "vfleet_controller_venv": str(pins.vllm_venv(run.ctx.root)),
            "vfleet_controller_work": str(run.ctx.artifacts),
            "vfleet_controller_testbed": TESTBED_NAME,
            "vfleet_controller_serve_url": f"http://10.213.0.2:{port}",
            "vfleet_controller_extra_packages": controller_extra_packages(run.ctx),
        },
    )


def controller_extra_packages(ctx: Context) -> list[str]:
    """What the local wheelhouse holds beside the vLLM CPU build: a serving mode that may
    plan prefill/decode pools also needs NIXL (the vllm role installs it) and the router
    (the vllm_router role), at the versions pins.env names; aggregated serving needs neither."""
    if flow.serving_mode(ctx) == "aggregated":
        return []
    pinned = pins.pins(ctx.root)
    return [f"nixl=={pinned['NIXL_VERSION']}", f"vllm-router=={pinned['VLLM_ROUTER_VERSION']}"]


def _probe(run: Run) -> None:
    facts = run.ctx.artifacts / "facts"
    # Probe once; later deploys reuse the facts so that nothing re-measured can move the
    # plan and restart engines. `make probe` (or PROBE=1) measures again.
    if run.command == "probe" or os.environ.get("PROBE") == "1" or not any(facts.glob("*.json")):
        playbook(run.ctx, "probe the interconnect", "probe.yml")
    else:
        print(
            f"==> probe the interconnect\n    reusing {run.ctx.shown(facts)} "
            "(make probe to measure again)"
        )


def _plan(run: Run) -> None:
    # No earlier render: nothing of this deployment serves yet, so no replica has to keep
    # serving while another restarts, and every host starts at once.
    run.first_launch = not (run.ctx.artifacts / "launch" / "endpoints.json").is_file()
    run.probed = probed_cluster(run.ctx, run.command, run.allow_partial, run.allow_degraded)
    run.planned = flow.plan(run.ctx, run.probed.cluster)


def _render(run: Run) -> None:
    assert run.planned is not None and run.probed is not None
    run.rendered = flow.render(run.ctx, run.planned.plan, run.probed.cluster)
    run.endpoints = run.rendered.endpoints


def _kubernetes(run: Run) -> None:
    assert run.planned is not None and run.probed is not None
    flow.kubernetes(run.ctx, run.planned.plan, run.probed.cluster)


def _launch(run: Run) -> None:
    whole = any(len(e["hosts"]) > 1 for e in run.endpoints)
    name = "launch and verify (health + completion)"
    if run.first_launch:
        name += ": first launch, every host at once"
    serial = "100%" if whole or run.first_launch else 1
    playbook(run.ctx, name, "launch.yml", {"vfleet_launch_serial": serial})


def _report(run: Run) -> None:
    assert run.planned is not None
    assert run.probed is not None
    html = flow.write_report(run.ctx, run.planned, run.endpoints, run.probed.cluster, run.probed)
    print_summary(run.ctx, run.endpoints)
    print(f"\nReport: {html}")


def _teardown(run: Run) -> None:
    playbook(run.ctx, "stop and remove the engines", "teardown.yml")


# The environment's measured history, kept by destroy: the ledger is what `vfleet calibrate`
# fits on and the reports are what operators compare a new deployment with.
HISTORY = ("ledger.jsonl", "report")


def _forget(run: Run) -> None:
    artifacts, env = run.ctx.artifacts, run.ctx.env
    kept = [] if run.purge else [n for n in HISTORY if (artifacts / n).exists()]
    if not kept:
        shutil.rmtree(artifacts, ignore_errors=True)
    else:
        for entry in artifacts.iterdir():
            if entry.name in kept:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    if run.local and run.ctx.api_key_file:
        run.ctx.api_key_file.unlink(missing_ok=True)  # made by the first deploy; disposable
    if kept:
        print(
            f"destroyed {env}: hosts and inventory removed; kept the history in "
            f"artifacts/{env} ({', '.join(kept)}); `make destroy ENV={env} PURGE=1` removes it"
        )
    else:
        print(f"destroyed {env}: hosts, inventory and artifacts/{env} removed")


def _sweep(run: Run) -> None:
    """Every GPU host over SSH at once before anything is installed: reachable, its key as
    recorded, sudo (vfleet.health.ssh_sweep)."""
    from vfleet.health import preflight, ssh_sweep

    start = time.monotonic()
    print("==> preflight: SSH sweep", flush=True)
    model_dir, need = preflight.disk_need(run.ctx)
    rows = ssh_sweep.sweep(preflight.targets(run.ctx), timeout_s=15, disk_path=model_dir, need=need)
    print("    " + ssh_sweep.table(rows).replace("\n", "\n    "), flush=True)
    run.ctx.timings.append(("preflight", time.monotonic() - start))
    failed = {
        r.host: r.error or f"host key {r.host_key}, sudo {r.facts.get('sudo', '?')}"
        for r in rows
        if r.verdict == "fail"
    }
    if failed:
        raise PhaseFailed("preflight: SSH sweep", "a host failed the sweep", failed, "(above)", "")


def _check_hosts(run: Run) -> None:
    check_hosts(run.ctx)  # refuses a host missing from the inventory or known_hosts


def _local(run: Run) -> bool:
    return run.local


PROVISION = [
    Phase("engine", _engine_ready, _local),
    Phase("terraform", lambda run: terraform.apply(run.ctx)),
    Phase("hosts", _check_hosts),
    Phase("preflight", _sweep),
    Phase("local controller", _local_controller, _local),
    Phase(
        "stand-ins",
        lambda run: playbook(run.ctx, "stand-ins (no GPU here)", "standins-local.yml"),
        _local,
    ),
    Phase("install", lambda run: playbook(run.ctx, INSTALL, "site.yml")),
    Phase("probe", _probe),
]
PLAN = [Phase("plan", _plan), Phase("render", _render)]
JOURNEYS: dict[str, list[Phase]] = {
    "deploy": [
        *PROVISION,
        *PLAN,
        Phase("launch", _launch),
        Phase("load test", lambda run: playbook(run.ctx, "load test", "loadtest.yml")),
        Phase("report", _report),
    ],
    "probe": [*PROVISION, Phase("summary", lambda run: print_summary(run.ctx, []))],
    "plan-env": [
        Phase("engine", _engine_ready, _local),
        *PLAN,
        Phase("kubernetes", _kubernetes, lambda run: run.target == "lws"),
        Phase("summary", lambda run: _plan_only_summary(run)),
    ],
    "destroy": [
        # The local hosts go away whole; real ones keep running otherwise.
        Phase("teardown", _teardown, lambda run: not run.local),
        Phase("terraform", lambda run: terraform.destroy(run.ctx)),
        Phase("forget", _forget),
    ],
}
RESUME = {"deploy": "deploy", "probe": "probe", "plan-env": "plan", "destroy": "destroy"}


def _plan_only_summary(run: Run) -> None:
    art = run.ctx.artifacts
    where = (
        f"plan: {art / 'plan.json'}; health checks: {art / 'health.json'}; "
        f"launch files: {art / 'launch'}"
    )
    if run.target == "lws":
        where += f"; Kubernetes manifests: {art / 'lws'}"
    print(f"\n{where} (nothing was changed on the hosts)")
    print_summary(run.ctx, [])


def print_summary(ctx: Context, endpoints: list[dict[str, Any]]) -> None:
    print("\nPhases:")
    # Wide enough for the longest phase name, so the seconds line up in one column.
    width = max([len(phase) for phase, _ in ctx.timings] + [len("total")])
    for phase, seconds in ctx.timings:
        print(f"  {phase:<{width}} {seconds:8.1f} s")
    print(f"  {'total':<{width}} {sum(s for _, s in ctx.timings):8.1f} s")
    for ep in endpoints:
        print(f"\nEndpoint {ep['engine']}: {ep['url']}  (model {ep['model']})")


def resume_hint(run: Run) -> str:
    flags = " --allow-partial-facts" * run.allow_partial + " --allow-degraded" * run.allow_degraded
    if flags:
        return f"vfleet {run.command} --env {run.ctx.env}{flags}"
    return f"make {RESUME[run.command]} ENV={run.ctx.env}"


def run_journey(run: Run) -> int:
    run.ctx.artifacts.mkdir(parents=True, exist_ok=True)
    try:
        for phase in JOURNEYS[run.command]:
            if phase.when(run):
                phase.action(run)
    except PhaseFailed as exc:
        print(f"\nvfleet {run.command}: {exc.describe(resume_hint(run))}", file=sys.stderr)
        return 1
    return 0


def deploy(
    env: str,
    plan_only: bool = False,
    probe_only: bool = False,
    root: Path | str | None = None,
    allow_partial: bool = False,
    allow_degraded: bool = False,
    target: str = "hosts",
) -> int:
    command = "probe" if probe_only else "plan-env" if plan_only else "deploy"
    ctx = load_context(env, root, announce=command == "deploy")
    return run_journey(Run(ctx, command, allow_partial, allow_degraded, target=target))


def destroy(env: str, root: Path | str | None = None, purge: bool = False) -> int:
    """Remove the hosts and what deploys made; the ledger and reports stay unless `purge`."""
    return run_journey(Run(load_context(env, root), "destroy", purge=purge))


def restart(env: str, root: Path | str | None = None) -> int:
    """A rolling restart of every engine from the rendered files: one host at a time while
    the others keep serving (all hosts of an engine together when one spans several),
    each checked for /health and a completion before the next goes."""
    import json

    ctx = load_context(env, root)
    try:
        spans = json.loads((ctx.artifacts / "launch" / "endpoints.json").read_text())
    except FileNotFoundError:
        raise UserError(f"nothing is deployed in {env}: run make deploy ENV={env}") from None
    whole = any(len(e["hosts"]) > 1 for e in spans["endpoints"])
    extra = {"vfleet_launch_serial": "100%" if whole else 1, "vllm_launch_restart": True}
    try:
        playbook(ctx, "rolling restart (health + completion)", "launch.yml", extra)
    except PhaseFailed as exc:
        print(f"\nvfleet restart: {exc.describe(f'vfleet restart --env {env}')}", file=sys.stderr)
        return 1
    print_summary(ctx, spans["endpoints"])
    return 0
