"""`vfleet doctor`: diagnose overload, tail latency, OOM and preemption from an engine's
metrics, its logs and its plan. Its flags are vfleet.documents.requests.DoctorFlags."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from vfleet.errors import UserError

if TYPE_CHECKING:
    from vfleet.documents.plan import Plan
    from vfleet.documents.requests import DoctorFlags
    from vfleet.observe.findings import EngineConfig

LOG_TAIL_BYTES = 32 << 20  # the start-up lines doctor looks for sit in the last restart


def config_from_plan(plan: Plan) -> EngineConfig:
    """The engine settings in a plan from `vfleet plan --out` (vfleet.documents.plan.load_plan
    checked their types and ranges)."""
    from vfleet.observe.findings import EngineConfig

    # Optional in a plan file: one that leaves it out says nothing of what the engine runs
    # with, so the start-up log's value (or none) stands.
    given = "enable_chunked_prefill" in plan.model_fields_set
    return EngineConfig(
        max_num_seqs=plan.max_num_seqs,
        max_num_batched_tokens=plan.max_num_batched_tokens,
        enable_chunked_prefill=plan.enable_chunked_prefill if given else None,
        gpu_memory_utilization=plan.gpu_memory_utilization,
        max_model_len=plan.max_model_len,
        source="the deployed plan",
    )


def _read_logs(args: DoctorFlags) -> str:
    import subprocess

    from vfleet.inputs.files import read_bytes

    # A FIFO or a device is refused before a byte is read; a big log keeps its last bytes.
    parts = [
        read_bytes(path, "log", max_bytes=LOG_TAIL_BYTES, tail=True).decode("utf-8", "replace")
        for path in args.log
    ]
    for unit in args.journal:
        try:
            out = subprocess.run(
                ["journalctl", "-u", unit, "--no-pager", "-o", "cat", "-n", "20000"],
                capture_output=True,
                text=True,
                errors="replace",
                check=False,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UserError(
                f"cannot read the journal of {unit} ({exc}): run doctor on the host itself, "
                "or pass the log with --log"
            ) from None
        if out.returncode != 0:
            raise UserError(f"journalctl -u {unit} failed: {out.stderr.strip()[:200]}")
        parts.append(out.stdout)
    return "\n".join(parts)


def _served_model(models: list[str], path: Path) -> str:
    """The one served model an endpoints.json names: with several, the user chooses."""
    models = list(dict.fromkeys(models))
    if len(models) > 1:
        raise UserError(
            f"{path} serves {len(models)} models ({', '.join(map(repr, models[:5]))}): pass "
            "the one to diagnose with --served-model-name"
        )
    return models[0]


def run(namespace: argparse.Namespace) -> int:
    from vfleet.cli.from_model import from_namespace
    from vfleet.documents.endpoints import load_endpoints, pool_urls
    from vfleet.documents.requests import DoctorFlags
    from vfleet.observe import doctor, findings, pool_findings, scrape, startup

    args = from_namespace(DoctorFlags, namespace)
    endpoints = list(args.endpoint)
    served = args.served_model_name
    if served is not None and not served.strip():
        raise UserError("--served-model-name is empty: give the name the engine serves")
    pools: dict[str, list[str]] = {}
    if args.endpoints:
        listed = load_endpoints(args.endpoints).endpoints
        endpoints += [e.base_url for e in listed]
        served = served or _served_model([e.model for e in listed], args.endpoints)
        pools = pool_urls(listed)
    endpoints = list(dict.fromkeys(endpoints))  # the same server once, however it was named
    if not endpoints and not args.log and not args.journal:
        raise UserError("give at least one --endpoint (or --log/--journal) to diagnose")
    log = _read_logs(args)
    cfg = findings.config_from_log(log)
    plan = None
    if args.plan:
        from vfleet.documents.plan import load_plan

        plan = load_plan(args.plan)
        cfg = findings.merge(cfg, config_from_plan(plan))
    if args.max_num_seqs:
        cfg.max_num_seqs, cfg.source = args.max_num_seqs, "--max-num-seqs"
    # A disaggregated deployment's pools are judged apart (their loads differ by design),
    # then side by side; any other set of endpoints is one pool.
    groups = pools if not args.endpoint else {}
    groups = groups or ({"all": endpoints} if endpoints else {})
    observed = scrape.observe_groups(groups, served, args.watch)
    found = startup.log_diagnoses(log, cfg)
    if "all" in observed or not observed:
        obs = observed.get("all")
        found += doctor.metric_diagnoses(obs, cfg) if obs else []
        if args.as_json:
            print(json.dumps(doctor.report_json(obs, cfg, found), indent=2))
        else:
            print(doctor.report_text(obs, cfg, found, endpoints))
        return 0
    configs = {name: pool_config(cfg, plan, name) for name in observed}
    per_pool = {name: doctor.metric_diagnoses(obs, configs[name]) for name, obs in observed.items()}
    between = found + pool_findings.pool_diagnoses(observed["prefill"], observed["decode"])
    if args.as_json:
        print(json.dumps(pool_findings.report_json(observed, configs, per_pool, between), indent=2))
    else:
        print(pool_findings.report_text(observed, configs, per_pool, between, groups))
    return 0


def pool_config(cfg: EngineConfig, plan: Plan | None, pool: str) -> EngineConfig:
    """The engine settings of one pool: the plan's pool values where a plan is given."""
    from dataclasses import replace

    split = plan.disaggregation if plan is not None else None
    if split is None or pool not in ("prefill", "decode"):
        return cfg
    planned = split.prefill if pool == "prefill" else split.decode
    if planned is None:
        return cfg
    return replace(
        cfg,
        max_num_seqs=planned.max_num_seqs,
        max_num_batched_tokens=planned.max_num_batched_tokens,
        source=f"the deployed plan's {pool} pool",
    )
