"""Real vLLM start-up records (tests/data/kv_cases) turned into budget requests.

The records describe what a user ran in words ("NVIDIA GeForce RTX 3090 24GB", "fp8
(compressed-tensors, fp8-dynamic)"); this module maps those words onto BudgetRequest fields
so the bench and the accuracy test score every usable case the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vfleet.budget.compute import BudgetRequest
from vfleet.budget.params import Layout
from vfleet.catalog.gpus import Gpu, resolve_gpu
from vfleet.catalog.model_shape import spec_from_config
from vfleet.catalog.releases import traits


@dataclass(frozen=True)
class CaseRun:
    case_id: str
    request: BudgetRequest
    observed_tokens: int
    observed_available_gib: float | None


def match_gpu(description: str) -> Gpu:
    """The catalog GPU a case's words name; remarks in parentheses ("(WSL2)") aside."""
    return resolve_gpu(re.sub(r"\(.*?\)", "", description).strip())


def _quantization(text: str | None) -> str | None:
    t = (text or "none").lower()
    if t.startswith("none"):
        return "none"  # the shared config may be a quantized repack of the same model
    if "deepseek_v4" in t:
        return None  # the checkpoint's own FP8/FP4 format
    for word, scheme in (
        ("awq", "awq"),
        ("w4a16", "w4a16"),
        ("gptq", "w4a16"),
        ("nvfp4", "nvfp4"),
        ("mxfp4", "mxfp4"),
        ("w8a8", "int8"),
        ("int8", "int8"),
        ("fp8", "fp8"),
    ):
        if word in t:
            return scheme
    return None


def _dtype(text: str | None) -> str:
    t = (text or "auto").lower()
    for name in ("bfloat16", "float16", "float32"):
        if t.startswith(name):
            return name
    return "auto"


def _version(case: dict[str, Any]) -> str | None:
    raw = str(case.get("vllm_version") or "")
    match = re.match(r"(\d+\.\d+(?:\.\d+)?)", raw)
    if match:
        return match.group(1)
    return "0.6.4" if case.get("engine") == "V0" else None


def configs_by_case_model(models: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for key, entry in models.items():
        if not entry.get("config"):
            continue
        for name in entry.get("applies_to_case_models") or [key]:
            out[name] = entry["config"]
    return out


def usable(case: dict[str, Any], configs: dict[str, dict[str, Any]]) -> bool:
    """A case with a config and a complete record (the acceptance set)."""
    return bool(
        case.get("complete_core") and case["model"] in configs and case["observed"].get("kv_tokens")
    )


def to_run(case: dict[str, Any], configs: dict[str, dict[str, Any]]) -> CaseRun:
    gpu = match_gpu(case["gpu"])
    reported = case.get("gpu_memory_total_gib_reported")
    if reported:
        gpu = gpu.with_memory_gib(float(reported))
    flags = case.get("other_flags") or {}
    kv_dtype = str(case.get("kv_cache_dtype") or "auto").split()[0]
    request = BudgetRequest(
        spec=spec_from_config(configs[case["model"]], name=case["model"]),
        gpu=gpu,
        traits=traits(_version(case)),
        layout=Layout(
            tp=case.get("tensor_parallel_size") or 1,
            pp=case.get("pipeline_parallel_size") or 1,
            dp=case.get("data_parallel_size") or 1,
            enable_expert_parallel=bool(case.get("enable_expert_parallel")),
        ),
        gpu_memory_utilization=case.get("gpu_memory_utilization"),
        max_model_len=case.get("max_model_len"),
        max_num_batched_tokens=case.get("max_num_batched_tokens"),
        max_num_seqs=case.get("max_num_seqs"),
        kv_cache_dtype=kv_dtype,
        dtype=_dtype(case.get("dtype")),
        quantization=_quantization(case.get("quantization")),
        block_size=case.get("block_size"),
        enforce_eager=bool(case.get("enforce_eager")),
        cpu_offload_gb=float(flags.get("cpu_offload_gb") or 0.0),
    )
    observed = case["observed"]
    return CaseRun(
        case["id"], request, int(observed["kv_tokens"]), observed.get("available_kv_gib")
    )
