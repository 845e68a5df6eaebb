"""The measured development set (vfleet's data/perf_cases/measured.json) as estimator inputs.

Each published run becomes the `vfleet estimate` call that describes it: the catalog model,
the GPU, a cluster of its nodes, the layout as launched, the release, the scheduler knobs it
states, and the client's workload. Runs vfleet does not model are kept with the reason
(another engine, disaggregated prefill and decode, no output throughput published, a model
or GPU outside the catalogs), so the bench can show them without scoring them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from vfleet.catalog.models import load_model
from vfleet.catalog.releases import traits
from vfleet.errors import UserError
from vfleet.perf.fit import Fit, default_fit
from vfleet.plan.candidate import Candidate
from vfleet.plan.estimate import EstimateRequest
from vfleet.topology.cluster import cluster_from_dict

# The measured runs stay package data of vfleet (controller/src/vfleet/data/perf_cases/).
CASES_FILE = files("vfleet") / "data" / "perf_cases" / "measured.json"
# ShareGPT's mean lengths in `vllm bench serve` (from the published runs that give request
# throughput: output = output tok/s / req/s, input = (total - output) tok/s / req/s).
SHAREGPT_MEAN_IN, SHAREGPT_MEAN_OUT = 217, 197
# A random-dataset run whose published output per request (output tok/s / req/s) falls this
# far below the asked length stopped at end-of-sequence (the client ran without
# --ignore-eos): it is replayed with the length it generated, not the one it asked for.
EOS_SHORTFALL = 0.03

MODELS = (
    ("DeepSeek-V3-AWQ", "deepseek-ai/DeepSeek-V3", "awq"),
    ("DeepSeek-V3.2-NVFP4", "", ""),
    ("DeepSeek-V3.2", "deepseek-ai/DeepSeek-V3.2", None),
    ("DeepSeek-R1-0528-NVFP4", "", ""),
    ("DeepSeek-R1", "deepseek-ai/DeepSeek-R1", None),
    ("DeepSeek-V3", "deepseek-ai/DeepSeek-V3", None),
    ("Qwen3-235B-A22B-Instruct-2507-FP8", "Qwen/Qwen3-235B-A22B-FP8", None),
    ("Qwen3-235B-A22B-Instruct-2507", "Qwen/Qwen3-235B-A22B", None),
    ("gpt-oss-120b", "openai/gpt-oss-120b", None),
    ("gpt-oss-20b", "openai/gpt-oss-20b", None),
    ("Qwen3-32B", "Qwen/Qwen3-32B", None),
    ("Llama-3.1-405B-FP8", "meta-llama/Llama-3.1-405B-Instruct", "fp8"),
    ("Llama-3.1-8B-Instruct-FP8", "meta-llama/Llama-3.1-8B-Instruct", "fp8"),
    ("Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct", None),
    ("Llama-3.1-70B", "meta-llama/Llama-3.1-70B-Instruct", None),
    ("Mixtral-8x7B", "mistralai/Mixtral-8x7B-Instruct-v0.1", None),
)
GPUS = (("H200", "H200-SXM-141GB"), ("H100", "H100-SXM-80GB"), ("H20", "H20-96GB"))
# A single HGX node: NVSwitch all-reduce bus bandwidth as NCCL measures it on H100/H200.
NVSWITCH_BUSBW = 450.0
# Two HGX nodes over 8 x 400 Gb/s InfiniBand or EFA (the published runs do not restate it).
SCALE_OUT_BUSBW = 45.0


@dataclass(frozen=True)
class Case:
    id: str
    group: str
    raw: dict[str, Any]
    request: EstimateRequest | None
    skip: str  # why it is shown but not scored
    measured_tok_s: float | None
    measured_tpot_ms: float | None  # median TPOT of a steady (fixed-concurrency) run
    layout_label: str


def _model(name: str) -> tuple[str, str | None] | None:
    for needle, model, quant in MODELS:
        if needle.lower() in name.lower():
            return (model, quant) if model else None
    return None


def _gpu(name: str) -> str | None:
    if "AMBIGUOUS" in name:
        return None
    for needle, gpu in GPUS:
        if needle in name:
            return gpu
    return None


def _version(text: str | None) -> str | None:
    match = re.search(r"v?(\d+\.\d+\.\d+)", text or "")
    if match:
        return match.group(1)
    match = re.search(r"v?(\d+\.\d+)\b", text or "")
    return f"{match.group(1)}.0" if match else None


def _int(value: Any) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def _unmodelled(raw: dict[str, Any], include_held_back: bool) -> str:
    """Why vfleet does not model this run before its model and lengths are read, or ""."""
    if raw.get("held_back") and not include_held_back:
        return f"held back: {raw['held_back']}"
    engine = str(raw.get("engine") or "")
    if not engine.startswith("vllm") or "ROCm" in engine:
        return f"engine {engine}: vfleet models vLLM on NVIDIA GPUs"
    layout = raw.get("layout") or {}
    if layout.get("disaggregated") or "Dynamo" in str(raw.get("engine_version")):
        return "disaggregated prefill/decode: not modelled"
    if not (raw.get("results") or {}).get("output_tokens_per_s"):
        return "no output tokens/s published"
    return ""


def published_lengths(raw: dict[str, Any]) -> tuple[str, int, int] | str:
    """(dataset, input length, output length) as the client sent them, or why not known."""
    results, workload = raw.get("results") or {}, raw.get("workload") or {}
    dataset = str(workload.get("dataset") or "random").lower()
    if "sharegpt" in dataset:
        measured = results["output_tokens_per_s"]
        req_s, total = results.get("request_throughput"), results.get("total_tokens_per_s")
        if req_s and total:
            return "sharegpt", round((total - measured) / req_s), round(measured / req_s)
        return "sharegpt", SHAREGPT_MEAN_IN, SHAREGPT_MEAN_OUT
    if dataset.startswith("random"):
        in_len, out_len = _int(workload.get("input_len")), _int(workload.get("output_len"))
        if not in_len or not out_len:
            return "lengths not published"
        return "random", in_len, _generated(results, out_len)
    return f"dataset {dataset}: not modelled"


def _generated(results: dict[str, Any], asked: int) -> int:
    """The mean output a random-dataset run generated: the asked length unless the published
    totals show requests that stopped early. gpt-oss-120b's 4k-prompt runs asked for 200
    tokens and generated 134-136 a request; measured output tok/s counts only those."""
    measured, req_s = results.get("output_tokens_per_s"), results.get("request_throughput")
    if not measured or not req_s:
        return asked
    per_request = float(measured) / float(req_s)
    if per_request < asked * (1 - EOS_SHORTFALL):
        return max(round(per_request), 1)
    return asked


def _layout(raw: dict[str, Any]) -> tuple[Candidate, int]:
    """The layout as launched and the number of independent replicas of it."""
    layout = raw.get("layout") or {}
    tp = _int(layout.get("tensor_parallel_size")) or 1
    pp = _int(layout.get("pipeline_parallel_size")) or 1
    dp = _int(layout.get("data_parallel_size")) or 1
    ep = bool(layout.get("enable_expert_parallel") or layout.get("expert_parallel_size"))
    replicas = 1
    label = str(raw.get("layout_label") or "")
    if "independent" in str(layout.get("note", "")) or "replicas" in label:
        replicas, dp = dp, 1
    return Candidate(tp, pp, dp, ep, 1), replicas


def _cluster(raw: dict[str, Any], gpu: str) -> dict[str, Any]:
    """The run's nodes as a cluster document (the published runs state no links)."""
    gpus, nodes = int(raw.get("num_gpus") or 1), int(raw.get("nodes") or 1)
    spec: dict[str, Any] = {
        "nodes": nodes,
        "gpus_per_node": max(gpus // nodes, 1),
        "gpu": gpu,
        "intra_node": {"link": "nvswitch", "busbw_GBps": NVSWITCH_BUSBW},
    }
    if nodes > 1:
        spec["inter_node"] = {"fabric": "infiniband", "busbw_GBps": SCALE_OUT_BUSBW}
    return spec


def _request(
    raw: dict[str, Any], model: tuple[str, str | None], gpu: str, fit: Fit
) -> EstimateRequest | str:
    """The `vfleet estimate` call that describes the run, or why vfleet cannot make it."""
    lengths = published_lengths(raw)
    if isinstance(lengths, str):
        return lengths
    dataset, in_len, out_len = lengths
    workload, sched = raw.get("workload") or {}, raw.get("scheduler") or {}
    concurrency = _int(workload.get("max_concurrency") or workload.get("concurrency"))
    rate = workload.get("request_rate")
    layout, replicas = _layout(raw)
    model_id, quant = model
    try:
        return EstimateRequest(
            spec=load_model(model_id),
            cluster=cluster_from_dict(_cluster(raw, gpu)),
            layout=layout,
            traits=traits(_version(str(raw.get("engine_version"))) or "0.11.0"),
            input_len=in_len,
            output_len=out_len,
            concurrency=concurrency,
            num_prompts=_int(workload.get("num_prompts")) or 10 * (concurrency or 50),
            request_rate=float(rate) if isinstance(rate, int | float) else None,
            dataset=dataset,
            replicas=replicas,
            quantization=quant,
            max_num_seqs=_int(sched.get("max_num_seqs")),
            max_num_batched_tokens=_int(sched.get("max_num_batched_tokens")),
            max_model_len=_int(sched.get("max_model_len")),
            enable_chunked_prefill=sched.get("chunked_prefill"),
            num_scheduler_steps=_int(sched.get("num_scheduler_steps")) or 1,
            all2all_backend=(raw.get("layout") or {}).get("all2all_backend"),
            fit=fit,
        )
    except UserError as exc:
        return str(exc)


def _case(raw: dict[str, Any], fit: Fit, include_held_back: bool = False) -> Case:
    results = raw.get("results") or {}
    workload = raw.get("workload") or {}
    measured = results.get("output_tokens_per_s")
    concurrency = _int(workload.get("max_concurrency") or workload.get("concurrency"))
    tpot = (results.get("tpot_ms") or {}).get("median") if concurrency else None
    base = {
        "id": raw["id"],
        "group": raw.get("comparison_group") or raw["id"],
        "raw": raw,
        "measured_tok_s": float(measured) if measured else None,
        "measured_tpot_ms": float(tpot) if tpot else None,
        "layout_label": str(raw.get("layout_label") or ""),
    }
    why = _unmodelled(raw, include_held_back)
    model, gpu = _model(str(raw.get("model"))), _gpu(str(raw.get("gpu")))
    if not why and (model is None or gpu is None):
        why = f"{raw.get('model')} on {raw.get('gpu')}: not in the catalogs"
    if why or model is None or gpu is None:
        return Case(request=None, skip=why, **base)
    request = _request(raw, model, gpu, fit)
    if isinstance(request, str):
        return Case(request=None, skip=request, **base)
    return Case(request=request, skip="", **base)


@cache
def _raw_cases() -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(CASES_FILE.read_text())["cases"])


def load_cases(fit: Fit | None = None, *, include_held_back: bool = False) -> list[Case]:
    """Every measured run; those marked `held_back` are skipped unless asked for."""
    return [_case(raw, fit or default_fit(), include_held_back) for raw in _raw_cases()]
