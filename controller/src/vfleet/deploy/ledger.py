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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfleet.catalog.releases import traits
from vfleet.errors import UserError
from vfleet.observe.metrics import parse
from vfleet.plan.candidate import Candidate
from vfleet.plan.cluster import ClusterSpec
from vfleet.plan.estimate import Estimate, EstimateRequest, estimate
from vfleet.plan.make import PlanResult

SCHEMA = "vfleet.ledger/1"
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
    try:
        snap = parse([page.read_text(errors="replace")], [str(page)], model_name=model)
    except FileNotFoundError:
        return Scrape(None, None, None, f"no /metrics page recorded ({page.name})")
    except (OSError, UserError) as exc:
        return Scrape(None, None, None, f"/metrics not read: {exc}")
    blocks = snap.cache_config.get("num_gpu_blocks")
    size = snap.cache_config.get("block_size")
    return Scrape(
        int(blocks) if blocks and blocks.isdigit() else None,
        int(size) if size and size.isdigit() else None,
        snap.values.get("preemptions"),
    )


def _lengths(result: dict[str, Any]) -> tuple[int, int] | None:
    done = result.get("completed") or 0
    if not done:
        return None
    return (
        max(1, round(result.get("total_input_tokens", 0) / done)),
        max(1, round(result.get("total_output_tokens", 0) / done)),
    )


def predicted(plan: PlanResult, cluster: ClusterSpec, result: dict[str, Any]) -> dict[str, Any]:
    """The plan's KV for one engine and the estimator's figures at the load test's settings."""
    doc, winner = plan.document, plan.winner
    assert winner.budget is not None
    out: dict[str, Any] = {
        "kv_tokens": doc["kv_tokens_per_engine"],
        "kv_blocks": winner.budget.num_blocks,
        "block_size": doc["block_size"],
        "max_concurrency": doc["predicted"]["max_concurrency"] // max(doc["replicas"], 1),
    }
    lengths = _lengths(result)
    if lengths is None:
        return out
    try:
        est = _estimate_at(plan, cluster, result, lengths, winner.candidate)
    except UserError as exc:  # the run's settings are outside what the estimator takes
        out["note"] = f"no estimate at the load test's settings: {exc}"
        return out
    out.update(
        output_tokens_per_s=round(est.output_tokens_per_s, 1),
        ttft_ms_median=est.ttft_ms["median"],
        tpot_ms_median=est.tpot_ms["median"],
        preemptions=est.preemptions,
    )
    return out


def _estimate_at(
    plan: PlanResult,
    cluster: ClusterSpec,
    result: dict[str, Any],
    lengths: tuple[int, int],
    layout: Candidate,
) -> Estimate:
    doc = plan.document
    return estimate(
        EstimateRequest(
            spec=plan.inputs.spec,
            cluster=cluster,
            layout=layout,
            traits=traits(doc["vllm_version"]),
            input_len=lengths[0],
            output_len=lengths[1],
            concurrency=int(result.get("max_concurrency") or 0) or None,
            num_prompts=int(result.get("num_prompts") or result.get("completed") or 0) or None,
            replicas=1,
            kv_cache_dtype=doc["kv_cache_dtype"],
            max_num_seqs=doc["max_num_seqs"],
            max_num_batched_tokens=doc["max_num_batched_tokens"],
            max_model_len=doc["max_model_len"],
            gpu_memory_utilization=doc["gpu_memory_utilization"],
            enable_chunked_prefill=doc["enable_chunked_prefill"],
        )
    )


def measured(result: dict[str, Any], metrics: Scrape) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kv_blocks": metrics.kv_blocks,
        "block_size": metrics.block_size,
        "kv_tokens": metrics.kv_blocks * metrics.block_size
        if metrics.kv_blocks and metrics.block_size
        else None,
        "preemptions": metrics.preemptions,
        "completed": result.get("completed"),
        "output_tokens_per_s": result.get("output_throughput"),
        "ttft_ms_median": result.get("median_ttft_ms"),
        "tpot_ms_median": result.get("median_tpot_ms"),
    }
    return out


def entries(
    env: str,
    plan: PlanResult,
    cluster: ClusterSpec,
    endpoints: list[dict[str, Any]],
    run: Path | None,
    stand_in: bool,
) -> list[dict[str, Any]]:
    """One entry per engine the load test measured in `run` (its results folder)."""
    results = results_in(run) if run is not None else {}
    at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    out = []
    for ep in endpoints:
        result = results.get(ep["engine"])
        if result is None:
            continue
        assert run is not None
        metrics = recorded_metrics(run / f"{ep['engine']}.prom", ep["model"])
        want = predicted(plan, cluster, result)
        notes = [n for n in (want.pop("note", ""), metrics.note) if n]
        out.append(
            {
                "schema": SCHEMA,
                "env": env,
                "at": at,
                "run": (result.get("metadata") or {}).get("vfleet_run_id")
                or result.get("vfleet_run_id"),
                "engine": ep["engine"],
                "model": plan.document["model"],
                "gpu": plan.document["gpu"],
                "vllm_version": plan.document["vllm_version"],
                "layout": plan.document["layout"],
                "comparable": not stand_in,
                "why_not": STAND_IN if stand_in else None,
                "predicted": want,
                "measured": measured(result, metrics),
                "notes": notes,
            }
        )
    return out


def append(path: Path, new: list[dict[str, Any]]) -> None:
    """Add this deploy's entries; earlier deploys' lines stay as they were."""
    with path.open("a") as out:
        for entry in new:
            out.write(json.dumps(entry, sort_keys=True) + "\n")


def latest_run(loadtest_dir: Path) -> Path | None:
    """The newest load test run's folder (the one last written)."""
    runs = [p for p in loadtest_dir.glob("*") if p.is_dir()]
    return max(runs, key=lambda p: p.stat().st_mtime) if runs else None


def results_in(run: Path) -> dict[str, dict[str, Any]]:
    """engine -> its `vllm bench serve` result in one run's folder."""
    found = {}
    for path in sorted(run.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and "completed" in data:
            found[path.stem] = data
    return found
