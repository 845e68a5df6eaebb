"""`vfleet budget`: vLLM's KV cache per GPU for one model, GPU and layout.

Its flags are generated from vfleet.documents.requests.BudgetFlags (vfleet.cli.main).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from vfleet.cli.estimate_command import check_quantization
from vfleet.errors import UserError

if TYPE_CHECKING:
    from vfleet.budget.compute import Budget, BudgetRequest
    from vfleet.catalog.model_shape import ModelShape
    from vfleet.documents.requests import BudgetFlags


def _request(a: BudgetFlags) -> BudgetRequest:
    from vfleet.budget.compute import BudgetRequest
    from vfleet.budget.params import Layout
    from vfleet.catalog.gpus import resolve_gpu
    from vfleet.catalog.models import load_model
    from vfleet.catalog.releases import traits
    from vfleet.documents.flag_types import check_scheduler

    gpu = resolve_gpu(a.gpu)
    if a.gpu_memory_gib:
        gpu = gpu.with_memory_gib(a.gpu_memory_gib)
    spec = load_model(a.model)
    check_scheduler(a, spec)
    quantization = check_quantization(spec, a.quantization)
    _check_mean_context(a, spec)
    if a.enable_expert_parallel and not spec.is_moe:
        raise UserError(
            f"--enable-expert-parallel asks for EP but {spec.name} has no experts: drop it"
        )
    return BudgetRequest(
        spec=spec,
        gpu=gpu,
        traits=traits(a.vllm_version),
        layout=Layout(
            tp=a.tp, pp=a.pp, dp=a.dp, enable_expert_parallel=a.enable_expert_parallel, dcp=a.dcp
        ),
        gpu_memory_utilization=a.gpu_memory_utilization,
        max_model_len=a.max_model_len,
        max_num_batched_tokens=a.max_num_batched_tokens,
        max_num_seqs=a.max_num_seqs,
        kv_cache_dtype=a.kv_cache_dtype,
        dtype=a.dtype,
        quantization=quantization,
        block_size=a.block_size,
        enforce_eager=a.enforce_eager,
        kv_cache_memory_bytes=a.kv_cache_memory_bytes,
        cpu_offload_gb=a.cpu_offload_gb,
        mean_context_len=a.mean_context_len,
        speculative=a.speculative(spec),
    )


def _check_mean_context(a: BudgetFlags, spec: ModelShape) -> None:
    """A request holds at most max-model-len tokens, so its mean cannot be more."""
    longest = a.max_model_len or spec.max_position_embeddings
    if a.mean_context_len and a.mean_context_len > longest:
        bound = (
            f"--max-model-len {longest}"
            if a.max_model_len
            else f"{spec.name}'s context window of {longest} tokens (the default --max-model-len)"
        )
        raise UserError(
            f"--mean-context-len {a.mean_context_len} is above {bound}: lower "
            "--mean-context-len or raise --max-model-len"
        )


def _does_not_fit(req: BudgetRequest, budget: Budget) -> UserError:
    from vfleet.budget.compute import smallest_fitting_layout

    need = sum(s.weights_bytes for s in budget.stages) * budget.tensor_parallel_size / (1 << 30)
    better = smallest_fitting_layout(req)
    hint = (
        f"the smallest layout that fits is TP{better.tensor_parallel_size} "
        f"PP{better.pipeline_parallel_size}"
        if better
        else "no layout up to 64 GPUs fits: use a quantized checkpoint (e.g. FP8) or bigger GPUs"
    )
    return UserError(
        f"{budget.model} does not fit: weights need {need:.1f} GiB across "
        f"TP{budget.tensor_parallel_size} PP{budget.pipeline_parallel_size}, each "
        f"{budget.gpu} gives {budget.requested_gib:.1f} GiB at utilization "
        f"{budget.gpu_memory_utilization} and one {budget.max_model_len}-token request needs "
        f"more KV than is left; {hint} (or lower --max-model-len)"
    )


def run(args: argparse.Namespace) -> int:
    from vfleet.budget.compute import compute, fits
    from vfleet.cli.from_model import from_namespace
    from vfleet.documents.flag_types import sweep
    from vfleet.documents.requests import BudgetFlags
    from vfleet.present import budget_report

    a = from_namespace(BudgetFlags, args)
    req = _request(a)
    result = compute(req)
    if not fits(result):
        raise _does_not_fit(req, result)
    points = None
    if a.sweep_gpu_memory_utilization or a.plot:
        # spec.flags.sweep parsed and bounded the range; the default is the usual 0.6..0.95.
        utils = a.sweep_gpu_memory_utilization or sweep("0.6:0.95:0.05")
        points = budget_report.sweep(req, utils)
        if a.plot:
            try:
                budget_report.plot_sweep(points, a.plot)
            except OSError as exc:
                raise UserError(
                    f"cannot write the plot to {a.plot}: {exc.strerror or exc}"
                ) from None
    if a.as_json:
        out: dict[str, Any] = result.to_json()
        if points:
            out["sweep"] = [
                {
                    "gpu_memory_utilization": p.gpu_memory_utilization,
                    "available_kv_gib": p.available_kv_gib,
                    "kv_tokens": p.kv_tokens,
                    "max_concurrency": p.max_concurrency,
                }
                for p in points
            ]
        print(json.dumps(out, indent=2))
        return 0
    print(budget_report.worked_table(result))
    if points:
        print("\nConcurrency ceiling by gpu-memory-utilization:")
        print(budget_report.sweep_table(points))
    if a.plot:
        print(f"\nplot written to {a.plot}")
    return 0
