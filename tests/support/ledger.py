"""Ledger lines for the calibrate and feedback tests: published runs written as the deploy
writes them, and a deploy's report step run on a load test's saved result."""

from __future__ import annotations

import json
import shutil
from typing import Any

from support.paths import DATA
from vfleet.calibrate.points import OperatingPoint
from vfleet.deploy import flow
from vfleet.feedback.ledger import STAND_IN
from vfleet.health import probed as health_probed
from vfleet.plan.estimate import estimate
from vfleet_devtools.perfcases import load_cases

GROUP = "gpustack-gpt-oss-120b-vllm-"  # one author, one node, two layouts
METRICS = DATA / "metrics" / "v0-0.5.4-kubeai-llama31-8b-fp8.prom"
SERVED = "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8"  # the model that page serves
RESULT = {
    "completed": 40,
    "num_prompts": 40,
    "max_concurrency": 8,
    "total_input_tokens": 40 * 512,
    "total_output_tokens": 40 * 128,
    "output_throughput": 1234.5,
    "median_ttft_ms": 80.0,
    "median_tpot_ms": 9.5,
    "vfleet_run_id": "20261201T000000Z",
    "date": "20261201-000010",  # when vllm bench serve started, as it writes it
}


def deploy_report(ctx: Any, page: str, **changes: object) -> tuple[list[dict], str]:
    """The report step of a deploy whose load test saved RESULT (and, for page "with-page",
    the engine's /metrics page): the ledger's entries and report.md."""
    probed = health_probed.probed_cluster(ctx, "deploy", allow_partial=False)
    result = flow.plan(ctx, probed.cluster)
    rendered = flow.render(ctx, result.plan, probed.cluster)
    endpoints = [{**rendered.endpoints[0], "model": SERVED}]
    run = ctx.artifacts / "report" / "loadtest" / RESULT["vfleet_run_id"]
    run.mkdir(parents=True, exist_ok=True)
    engine = endpoints[0]["engine"]
    (run / f"{engine}.json").write_text(json.dumps({**RESULT, **changes}))
    if page == "with-page":  # the load test saved the engine's /metrics after its run
        shutil.copyfile(METRICS, run / f"{engine}.prom")
    flow.write_report(ctx, result, endpoints, probed.cluster)
    lines = (ctx.artifacts / "ledger.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines], (
        ctx.artifacts / "report" / "report.md"
    ).read_text()


def published_runs() -> list[Any]:
    """One author's published gpt-oss-120b runs at TP1 and TP2 (tests/unit/calibrate)."""
    return [
        c
        for c in load_cases()
        if c.id.startswith(GROUP + "tp1-dp1-") or c.id.startswith(GROUP + "tp2-dp1-")
        if c.request is not None
        and c.request.request_rate is None
        # A cluster's own load tests, not the long-prompt stress runs of the same page (those
        # are the estimator's accuracy set, bench/perf_accuracy.py).
        and c.request.input_len <= 2048
    ]


def ledger_line(case: Any, comparable: bool = True) -> dict[str, Any]:
    """A published run as a ledger line: the operating point resolved as the deploy does."""
    r = case.request
    est = estimate(r)
    point = OperatingPoint(
        model=r.spec.name,
        vllm_version=r.traits.label,
        tp=r.layout.tp,
        pp=r.layout.pp,
        dp=r.layout.dp,
        ep=r.layout.ep,
        dcp=r.layout.dcp,
        input_len=r.input_len,
        output_len=r.output_len,
        concurrency=r.concurrency,
        num_prompts=r.num_prompts,
        dataset=r.dataset,
        quantization=r.quantization,
        kv_cache_dtype=est.budget.kv_cache_dtype,
        max_num_seqs=est.max_num_seqs,
        max_num_batched_tokens=est.max_num_batched_tokens,
        max_model_len=est.budget.max_model_len,
        gpu_memory_utilization=est.budget.gpu_memory_utilization,
        enable_chunked_prefill=est.chunked_prefill,
    )
    return {
        "engine": case.id.removeprefix(GROUP),
        "gpu": r.cluster.gpu.name,
        "comparable": comparable,
        "why_not": None if comparable else STAND_IN,
        "operating_point": point.model_dump(),
        "predicted": {},
        "measured": {
            "output_tokens_per_s": case.measured_tok_s,
            "tpot_ms_median": case.measured_tpot_ms,
        },
    }
