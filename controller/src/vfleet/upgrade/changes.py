"""What moves without an error when the same deployment runs on the target release: the
plan vfleet would make for it, the KV capacity of the very same flags, the defaults of the
flags the deployment leaves unset, and the estimator's numbers at the plan's operating
point."""

from __future__ import annotations

from collections.abc import Iterable

from vfleet.budget.compute import BudgetRequest, compute
from vfleet.budget.params import Layout
from vfleet.catalog.flag_registry import flag_defaults
from vfleet.catalog.gpus import Gpu
from vfleet.catalog.model_shape import ModelShape
from vfleet.catalog.releases import traits
from vfleet.documents.plan import Plan
from vfleet.upgrade.outcome import Finding
from vfleet.upgrade.rendered import RenderedEngine

# The plan's knobs, as the report names them.
KNOBS = (
    ("layout", "layout"),
    ("replicas", "replicas"),
    ("gpu_memory_utilization", "--gpu-memory-utilization"),
    ("max_num_seqs", "--max-num-seqs"),
    ("max_num_batched_tokens", "--max-num-batched-tokens"),
    ("max_model_len", "--max-model-len"),
    ("enable_chunked_prefill", "chunked prefill"),
    ("kv_cache_dtype", "--kv-cache-dtype"),
    ("block_size", "--block-size"),
    ("kv_tokens_per_engine", "KV tokens per engine"),
)
# Flags whose default moves capacity, batching or latency when a deployment leaves them
# unset (the registry holds every flag's printed default; these are the ones that matter
# to a serving engine's numbers). Async scheduling prints no default: the release traits
# say when it turned on.
WATCHED_DEFAULTS = (
    "--gpu-memory-utilization",
    "--max-num-batched-tokens",
    "--max-num-seqs",
    "--enable-chunked-prefill",
    "--enable-prefix-caching",
    "--attention-backend",
    "--block-size",
    "--kv-cache-dtype",
    "--swap-space",
    "--cuda-graph-sizes",
    "--max-cudagraph-capture-size",
)
# A capacity change smaller than this is rounding, not news.
CAPACITY_NOISE = 0.005


# The prefill pool's knobs of a prefill/decode plan (its top level is the decode pool).
PREFILL_KNOBS = (
    ("layout", "layout"),
    ("engines", "engines"),
    ("max_num_seqs", "--max-num-seqs"),
    ("max_num_batched_tokens", "--max-num-batched-tokens"),
    ("kv_tokens_per_engine", "KV tokens per engine"),
)


def _knob_changes(
    before: object, after: object, knobs: tuple[tuple[str, str], ...], pool: str, version: str
) -> list[Finding]:
    found = []
    for field, label in knobs:
        old, new = getattr(before, field), getattr(after, field)
        if old != new:
            old, new = (f"{v:,}" if isinstance(v, int) and v > 9999 else v for v in (old, new))
            found.append(
                Finding(
                    "changes",
                    "plan",
                    f"{pool}{label}",
                    "plan.json",
                    f"vfleet's plan for vLLM {version}: {old} -> {new}",
                )
            )
    return found


def plan_changes(before: Plan, after: Plan) -> list[Finding]:
    old_pool = before.served_prefill_pool
    new_pool = after.served_prefill_pool
    if old_pool is None and new_pool is None:
        return _knob_changes(before, after, KNOBS, "", after.vllm_version)
    found = _knob_changes(before, after, KNOBS, "decode pool: ", after.vllm_version)
    if old_pool is not None and new_pool is not None:
        found += _knob_changes(
            old_pool, new_pool, PREFILL_KNOBS, "prefill pool: ", after.vllm_version
        )
    return found


def capacity_changes(plan: Plan, spec: ModelShape, gpu: Gpu, to_version: str) -> list[Finding]:
    """KV tokens per engine and the max-num-seqs they hold, for the deployment's own flags
    on both releases (the budget engine follows each release's memory accounting)."""
    budgets = []
    for version in (plan.vllm_version, to_version):
        budgets.append(
            compute(
                BudgetRequest(
                    spec=spec,
                    gpu=gpu,
                    traits=traits(version),
                    layout=Layout(
                        tp=plan.tensor_parallel_size,
                        pp=plan.pipeline_parallel_size,
                        dp=plan.data_parallel_size,
                        enable_expert_parallel=plan.enable_expert_parallel,
                        dcp=plan.decode_context_parallel_size,
                    ),
                    gpu_memory_utilization=plan.gpu_memory_utilization,
                    max_model_len=plan.max_model_len,
                    max_num_batched_tokens=plan.max_num_batched_tokens,
                    max_num_seqs=plan.max_num_seqs,
                    kv_cache_dtype=plan.kv_cache_dtype,
                    block_size=plan.block_size,
                )
            )
        )
    old, new = budgets
    found = []
    if abs(new.kv_tokens - old.kv_tokens) > CAPACITY_NOISE * max(old.kv_tokens, 1):
        change = (new.kv_tokens - old.kv_tokens) / max(old.kv_tokens, 1)
        found.append(
            Finding(
                "changes",
                "capacity",
                "KV tokens per engine, same flags",
                "plan.json",
                f"{old.kv_tokens:,} -> {new.kv_tokens:,} ({change:+.1%}): vLLM {to_version} "
                f"counts memory differently (weights {old.weights_gib:.1f} -> "
                f"{new.weights_gib:.1f} GiB, CUDA graphs {old.cudagraph_gib:.2f} -> "
                f"{new.cudagraph_gib:.2f} GiB, other {old.non_torch_gib:.2f} -> "
                f"{new.non_torch_gib:.2f} GiB per GPU)",
            )
        )
    if new.recommended_max_num_seqs != old.recommended_max_num_seqs:
        found.append(
            Finding(
                "changes",
                "capacity",
                "max-num-seqs the KV budget allows, same flags",
                "plan.json",
                f"{old.recommended_max_num_seqs} -> {new.recommended_max_num_seqs} (the plan "
                f"runs {plan.max_num_seqs})",
            )
        )
    return found


def default_changes(
    engines: Iterable[RenderedEngine], from_version: str, to_version: str
) -> list[Finding]:
    """The watched flags no engine sets whose printed default differs between releases."""
    before, after = flag_defaults(from_version), flag_defaults(to_version)
    used: set[str] = set()
    for engine in engines:
        used.update(engine.options())
    found = []
    for flag in WATCHED_DEFAULTS:
        if flag in used or f"--no-{flag[2:]}" in used:
            continue
        if flag not in before or flag not in after:
            continue  # added or removed: the flag checks and the plan speak for it
        old, new = before[flag], after[flag]
        if old == new:
            continue
        found.append(
            Finding(
                "changes",
                "default",
                flag,
                "not set by the deployment",
                f"default {_shown(old)} in {from_version} -> {_shown(new)} in {to_version}",
            )
        )
    if traits(from_version).async_scheduling != traits(to_version).async_scheduling and not (
        {"--async-scheduling", "--no-async-scheduling"} & used
    ):
        on = traits(to_version).async_scheduling
        found.append(
            Finding(
                "changes",
                "default",
                "async scheduling",
                "not set by the deployment",
                f"{'on' if on else 'off'} by default in {to_version} (was "
                f"{'off' if on else 'on'}): the CPU work of a step "
                f"{'overlaps' if on else 'no longer overlaps'} the GPU's",
            )
        )
    return found


def _shown(value: str | None) -> str:
    return "decided at start-up" if value is None else value


def estimate_changes(before: Plan, after: Plan) -> list[Finding]:
    if before.predicted is None or after.predicted is None:
        return []
    old, new = before.predicted, after.predicted
    rows = (
        ("output tokens/s", old.tokens_per_s, new.tokens_per_s, "{:,.0f}"),
        ("TTFT p99 ms", old.ttft_ms, new.ttft_ms, "{:,.0f}"),
        ("TPOT ms", old.tpot_ms, new.tpot_ms, "{:.1f}"),
    )
    found = []
    for label, a, b, fmt in rows:
        if abs(b - a) <= 0.01 * max(abs(a), 1e-9):
            continue
        band = ""
        if label == "output tokens/s":
            band = (
                f" (p10-p90 {old.tokens_per_s_p10:,.0f}-{old.tokens_per_s_p90:,.0f} -> "
                f"{new.tokens_per_s_p10:,.0f}-{new.tokens_per_s_p90:,.0f})"
            )
        found.append(
            Finding(
                "changes",
                "estimate",
                label,
                "plan.json",
                f"{fmt.format(a)} -> {fmt.format(b)} ({(b - a) / a:+.0%}){band} at the "
                "workload's concurrency",
            )
        )
    return found
