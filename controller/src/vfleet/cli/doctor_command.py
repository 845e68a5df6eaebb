"""`vfleet doctor`: diagnose overload, tail latency, OOM and preemption from an engine's
metrics, its logs and its plan. Its flags are vfleet.documents.requests.DoctorFlags."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from vfleet.errors import UserError

if TYPE_CHECKING:
    from vfleet.documents.plan import Plan
    from vfleet.documents.requests import DoctorFlags
    from vfleet.observe.doctor import Observation
    from vfleet.observe.findings import EngineConfig

LOG_TAIL_BYTES = 32 << 20  # the start-up lines doctor looks for sit in the last restart
# One endpoint's /metrics: a vLLM server's is tens of KiB and comes in well under a second.
FETCH_DEADLINE_S = 15.0
FETCH_MAX_BYTES = 16 << 20
_CHUNK_BYTES = 64 << 10


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


def _fetch_metrics(endpoint: str) -> str:
    url = endpoint.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UserError(f"--endpoint {endpoint!r} is not a URL: write it like http://HOST:8000")
    text = _fetch_in_time(f"{url}/metrics").decode("utf-8", "replace")
    if not text.strip():
        raise UserError(
            f"{url}/metrics is empty: the server is not exporting metrics yet; "
            "retry once it has started"
        )
    return text


def _fetch_in_time(url: str) -> bytes:
    """The body at `url`, or a UserError once FETCH_DEADLINE_S have passed. A socket timeout
    bounds each read, not the fetch (a server sending a byte a second never trips it), and
    nothing bounds a slow name lookup: the fetch runs in a worker thread that the caller
    stops waiting for at the deadline; the worker ends itself at its next chunk."""
    import threading
    import time

    deadline = time.monotonic() + FETCH_DEADLINE_S
    outcome: list[bytes | BaseException] = []
    worker = threading.Thread(
        target=_fetch_into, args=(url, deadline, outcome), name=f"fetch {url}", daemon=True
    )
    worker.start()
    worker.join(FETCH_DEADLINE_S)
    if not outcome:
        raise _too_slow(url)
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


def _fetch_into(url: str, deadline: float, outcome: list[bytes | BaseException]) -> None:
    try:
        outcome.append(_fetch_capped(url, deadline))
    except BaseException as exc:  # handed to the waiting thread, which raises it
        outcome.append(exc)


def _fetch_capped(url: str, deadline: float) -> bytes:
    import time
    import urllib.error
    import urllib.request

    try:
        left = max(0.001, deadline - time.monotonic())  # 0 would mean non-blocking
        with urllib.request.urlopen(url, timeout=left) as reply:
            return _read_body(reply, url, deadline)
    except urllib.error.HTTPError as exc:
        raise UserError(
            f"{url} answered HTTP {exc.code}: is this a vLLM API "
            "server? point --endpoint at its base URL"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:  # ValueError: a bad URL
        reason = getattr(exc, "reason", exc)
        raise UserError(
            f"cannot reach {url} ({reason}): check the address, the port "
            "and that the vLLM service is running"
        ) from None


class _Body(Protocol):
    def read1(self, size: int = ..., /) -> bytes: ...


def _read_body(reply: _Body, url: str, deadline: float) -> bytes:
    """The reply's body in chunks (read1: one socket read each, so a trickle returns),
    refused past FETCH_MAX_BYTES or the deadline."""
    import time

    chunks: list[bytes] = []
    size = 0
    while chunk := reply.read1(_CHUNK_BYTES):
        size += len(chunk)
        if size > FETCH_MAX_BYTES:
            raise UserError(
                f"{url} sent more than {FETCH_MAX_BYTES / 2**20:g} MiB, far more than a vLLM "
                "server's metrics: point --endpoint at a vLLM API server (http://HOST:PORT)"
            )
        if time.monotonic() > deadline:
            raise _too_slow(url)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_slow(url: str) -> UserError:
    return UserError(
        f"{url} did not finish sending in {FETCH_DEADLINE_S:g} s: check that it is a vLLM "
        "API server and that the host and network are not overloaded, then retry"
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
    from vfleet.documents.endpoints import load_endpoints
    from vfleet.documents.requests import DoctorFlags
    from vfleet.observe import doctor, findings, pool_findings, startup

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
        for endpoint in listed:
            if endpoint.pool is not None:
                pools.setdefault(endpoint.pool, []).append(endpoint.base_url)
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
    groups = pools if set(pools) == {"prefill", "decode"} and not args.endpoint else {}
    groups = groups or ({"all": endpoints} if endpoints else {})
    observed = _watch(groups, served, args.watch)
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


def _watch(
    groups: dict[str, list[str]], served: str | None, watch: float
) -> dict[str, Observation]:
    """Scrape every group's endpoints once, or every step of a --watch window; reduce each
    group's scrapes to one observation."""
    import time

    from vfleet.observe import doctor, metrics

    def scrape(urls: list[str]) -> tuple[float, metrics.Snapshot]:
        texts = [_fetch_metrics(e) for e in urls]
        return time.monotonic(), metrics.parse(texts, [e.rstrip("/") for e in urls], served)

    if not groups:
        return {}
    samples = {name: [scrape(urls)] for name, urls in groups.items()}
    if watch > 0:
        step = max(0.5, watch / 10)
        deadline = time.monotonic() + watch
        while time.monotonic() < deadline:
            time.sleep(min(step, max(0.0, deadline - time.monotonic())))
            for name, urls in groups.items():
                samples[name].append(scrape(urls))
    return {name: doctor.observe(taken) for name, taken in samples.items()}


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
