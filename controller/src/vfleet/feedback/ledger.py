"""The ledger: what the plan predicted next to what each engine measured, one JSON line per
engine and deploy in artifacts/<env>/ledger.jsonl, kept across deploys.

Predicted: the KV cache from the planner's budget, and throughput and latency from the
estimator (vfleet.plan.estimate) at the load test's own lengths, concurrency and prompt
count, for one engine of the planned layout. Measured: the same engine's `vllm bench serve`
result and the /metrics page the load test saved after it (cache_config_info for the KV
blocks it allocated, the preemption counter). Where the engines stand in for the GPUs the
plan is for (the local default's CPU build), an entry says so and is not comparable: the
ledger never passes a stand-in's numbers off as a check of the model.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vfleet.calibrate.points import (
    LEDGER_SCHEMA,
    MAX_LEDGER_BYTES,
    MAX_NAME,
    OperatingPoint,
    decode_line,
    first_problem,
)
from vfleet.documents.flag_types import MAX_REQUESTS
from vfleet.errors import UserError
from vfleet.inputs.files import read_bytes, read_text
from vfleet.observe.metrics import parse
from vfleet.plan.estimate import estimate
from vfleet.plan.make import PlanResult
from vfleet.topology.cluster import Cluster

SCHEMA = LEDGER_SCHEMA
# A sweep level's files: <engine>.sweep-c<concurrency>.json (and .prom), next to the main
# run's <engine>.json (ansible/roles/loadtest/tasks/sweep_level.yml).
SWEEP_NAME = re.compile(r"^(?P<engine>.+)\.sweep-c(?P<level>[0-9]+)$")
STAND_IN = (
    "the engines are the vLLM CPU build standing in for the GPUs the plan is for: its "
    "predictions are the GPU's, its measurements the CPU's"
)


@dataclass(frozen=True)
class Scrape:
    kv_blocks: int | None
    block_size: int | None
    preemptions: float | None
    note: str = ""


def recorded_metrics(page: Path, model: str) -> Scrape:
    """The /metrics page the load test saved right after the engine's run (the load host
    reaches the engines; the controller may not); a missing or unreadable page is a note."""
    if not page.exists():
        return Scrape(None, None, None, f"no /metrics page recorded ({page.name})")
    try:
        snap = parse([read_text(page, "/metrics page")], [str(page)], model_name=model)
    except UserError as exc:
        return Scrape(None, None, None, f"/metrics not read: {exc}")
    blocks = snap.cache_config.get("num_gpu_blocks")
    size = snap.cache_config.get("block_size")
    return Scrape(
        int(blocks) if blocks and blocks.isascii() and blocks.isdigit() else None,
        int(size) if size and size.isascii() and size.isdigit() else None,
        _number(snap.values.get("preemptions")),
    )


def _number(value: Any) -> float | None:
    """A finite, non-negative number from a `vllm bench serve` result or a /metrics page,
    else None: what the ledger records of a value missing or in a form no run measures."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _count(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number == int(number) else None


def _text(value: Any) -> str | None:
    ok = isinstance(value, str) and 0 < len(value) <= MAX_NAME and value.isprintable()
    return value if ok else None


def _lengths(result: dict[str, Any]) -> tuple[int, int] | None:
    done = _count(result.get("completed"))
    if not done:
        return None
    return (
        max(1, round((_number(result.get("total_input_tokens")) or 0) / done)),
        max(1, round((_number(result.get("total_output_tokens")) or 0) / done)),
    )


def operating_point(
    planned: PlanResult, result: dict[str, Any], lengths: tuple[int, int]
) -> OperatingPoint:
    """The run as the estimator's question: one engine of the planned layout under the load
    test's lengths, concurrency and prompt count. Calibration asks it again later."""
    plan, c = planned.plan, planned.winner.candidate
    return OperatingPoint(
        model=plan.model,
        vllm_version=plan.vllm_version,
        tp=c.tp,
        pp=c.pp,
        dp=c.dp,
        ep=c.ep,
        dcp=c.dcp,
        input_len=lengths[0],
        output_len=lengths[1],
        concurrency=_count(result.get("max_concurrency")) or None,
        num_prompts=_count(result.get("num_prompts")) or _count(result.get("completed")) or 1,
        kv_cache_dtype=plan.kv_cache_dtype,
        max_num_seqs=plan.max_num_seqs,
        max_num_batched_tokens=plan.max_num_batched_tokens,
        max_model_len=plan.max_model_len,
        gpu_memory_utilization=plan.gpu_memory_utilization,
        enable_chunked_prefill=plan.enable_chunked_prefill,
    )


def predicted(planned: PlanResult, cluster: Cluster, result: dict[str, Any]) -> dict[str, Any]:
    """The plan's KV for one engine and the estimator's figures at the load test's settings."""
    plan, winner = planned.plan, planned.winner
    assert winner.budget is not None and plan.predicted is not None
    out: dict[str, Any] = {
        "kv_tokens": plan.kv_tokens_per_engine,
        "kv_blocks": winner.budget.num_blocks,
        "block_size": plan.block_size,
        "max_concurrency": plan.predicted.max_concurrency // max(plan.replicas or 1, 1),
    }
    lengths = _lengths(result)
    if lengths is None:
        return out
    try:
        point = operating_point(planned, result, lengths)
    except ValidationError as exc:  # past what calibrate reads back (e.g. 10**6 prompts)
        out["note"] = f"no operating point recorded: {first_problem(exc)}"
        return out
    out["operating_point"] = point.model_dump()
    try:
        est = estimate(point.request(cluster, planned.inputs.fit, planned.inputs.spec))
    except UserError as exc:  # the run's settings are outside what the estimator takes
        out["note"] = f"no estimate at the load test's settings: {exc}"
        return out
    out.update(
        output_tokens_per_s=round(est.output_tokens_per_s, 1),
        ttft_ms_median=est.ttft_ms["median"],
        tpot_ms_median=est.tpot_ms["median"],
        tpot_ms_p99=est.tpot_ms.get("p99"),
        preemptions=est.preemptions,
        kv_cap_seqs=est.kv_cap_seqs,
    )
    return out


def measured(result: dict[str, Any], metrics: Scrape, before: float | None) -> dict[str, Any]:
    """The run's own numbers; preemptions are the counter's growth since the engine's run
    before this one (`before`), the counter itself counting since the engine started."""
    grew = (
        metrics.preemptions - before
        if metrics.preemptions is not None and before is not None
        else metrics.preemptions
    )
    return {
        "kv_blocks": metrics.kv_blocks,
        "block_size": metrics.block_size,
        "kv_tokens": metrics.kv_blocks * metrics.block_size
        if metrics.kv_blocks and metrics.block_size
        else None,
        "preemptions": grew,
        "preemptions_total": metrics.preemptions,
        "completed": _count(result.get("completed")),
        "output_tokens_per_s": _number(result.get("output_throughput")),
        "ttft_ms_median": _number(result.get("median_ttft_ms")),
        "tpot_ms_median": _number(result.get("median_tpot_ms")),
        "tpot_ms_p99": _number(result.get("p99_tpot_ms")),
    }


@dataclass(frozen=True)
class Run:
    """One `vllm bench serve` run of one engine in a load test's folder."""

    engine: str
    result: dict[str, Any]
    page: Path  # the /metrics page saved after it
    sweep_level: int | None  # the concurrency of a sweep run; None: the main run


def entries(
    env: str,
    planned: PlanResult,
    cluster: Cluster,
    endpoints: list[dict[str, Any]],
    run: Path | None,
    stand_in: bool,
) -> list[dict[str, Any]]:
    """One entry per engine and run the load test made in `run` (its results folder): the
    main run, then each sweep level from the lowest concurrency up, as the role ran them."""
    runs = runs_in(run) if run is not None else []
    at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    out = []
    for ep in endpoints:
        counter: float | None = None
        for one in [r for r in runs if r.engine == ep["engine"]]:
            metrics = recorded_metrics(one.page, ep["model"])
            want = predicted(planned, cluster, one.result)
            point = want.pop("operating_point", None)
            notes = [n for n in (want.pop("note", ""), metrics.note) if n]
            out.append(
                {
                    "schema": SCHEMA,
                    "env": env,
                    "at": at,
                    "run": _run_id(one.result),
                    "engine": ep["engine"],
                    "sweep_level": one.sweep_level,
                    "measured_at": _text(one.result.get("date")),
                    "model": planned.plan.model,
                    "gpu": planned.plan.gpu,
                    "vllm_version": planned.plan.vllm_version,
                    "layout": planned.plan.layout,
                    "comparable": not stand_in,
                    "why_not": STAND_IN if stand_in else None,
                    "operating_point": point,
                    "predicted": want,
                    "measured": measured(one.result, metrics, counter),
                    "notes": notes,
                }
            )
            if metrics.preemptions is not None:
                counter = metrics.preemptions
    return out


def _run_id(result: dict[str, Any]) -> str | None:
    metadata = result.get("metadata")
    found = metadata.get("vfleet_run_id") if isinstance(metadata, dict) else None
    return _text(found) or _text(result.get("vfleet_run_id"))


def _measurement(entry: dict[str, Any]) -> tuple[Any, ...] | None:
    """What names one run of one engine: `vllm bench serve`'s own start time with the run,
    engine and level. None where the result carried no time (it is then always added)."""
    if not entry.get("measured_at"):
        return None
    return (entry.get("env"), entry.get("run"), entry["engine"], entry.get("sweep_level"),
            entry["measured_at"])  # fmt: skip


def append(path: Path, new: list[dict[str, Any]]) -> None:
    """Add this deploy's entries, earlier deploys' lines staying as they were. A run already
    recorded is not added again: a deploy whose load test found its results on the hosts
    (the role does not rerun a run id it has results for) reads the same runs, and
    calibration would count them twice."""
    seen = set()
    if path.exists():  # a special file is refused here, before the append could block on it
        # The newest lines are the ones a rerun repeats: past the cap only they are read.
        raw = read_bytes(path, "ledger", max_bytes=MAX_LEDGER_BYTES, tail=True)
        for number, chunk in enumerate(raw.split(b"\n"), 1):
            try:
                key = _measurement(decode_line(chunk, f"{path}:{number}"))
                if key is not None:
                    seen.add(key)
            except (UserError, KeyError, TypeError, AttributeError):
                continue  # a line calibrate will name; here it only cannot be a duplicate
    with path.open("a") as out:
        for entry in new:
            if _measurement(entry) not in seen:  # None (no time recorded) is never seen
                out.write(json.dumps(entry, sort_keys=True) + "\n")


def latest_run(loadtest_dir: Path) -> Path | None:
    """The newest load test run's folder (the one last written)."""
    runs = [p for p in loadtest_dir.glob("*") if p.is_dir()]
    return max(runs, key=lambda p: p.stat().st_mtime) if runs else None


def runs_in(run: Path) -> list[Run]:
    """Every `vllm bench serve` result in one run's folder: per engine its main run first,
    then its sweep levels by concurrency."""
    found = []
    for path in sorted(run.glob("*.json")):
        try:
            data = json.loads(read_text(path, "load test result"))
        except (UserError, ValueError, RecursionError):
            continue
        if not isinstance(data, dict) or "completed" not in data:
            continue
        match = SWEEP_NAME.match(path.stem)
        engine = match["engine"] if match else path.stem
        level = int(match["level"]) if match else None
        if level is not None and not 1 <= level <= MAX_REQUESTS:
            continue  # no concurrency a load test runs at (nor one the ledger records)
        found.append(Run(engine, data, path.with_suffix(".prom"), level))
    return sorted(found, key=lambda r: (r.engine, r.sweep_level is not None, r.sweep_level or 0))


def is_sweep_result(path: Path) -> bool:
    return SWEEP_NAME.match(path.stem) is not None
