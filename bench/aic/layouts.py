"""Layouts between vLLM's words and AIC's search candidates."""

from __future__ import annotations

from typing import Any


def aic_parallel(plan: dict[str, Any], is_moe: bool) -> dict[str, list[int]]:
    """vfleet's layout as AIC search candidates. vLLM: with --enable-expert-parallel
    moe_ep = tp x dp, else moe_tp = tp x dp; -dp is attention DP for MoE models."""
    return candidates(
        plan["tensor_parallel_size"],
        plan["pipeline_parallel_size"],
        plan["data_parallel_size"],
        bool(plan["enable_expert_parallel"]),
        is_moe,
    )


def candidates(tp: int, pp: int, dp: int, ep: bool, is_moe: bool) -> dict[str, list[int]]:
    width = tp * dp
    ep = ep and is_moe
    return {
        "agg_num_gpu_candidates": [tp * pp * dp],
        "agg_tp_candidates": [tp],
        "agg_pp_candidates": [pp],
        "agg_dp_candidates": [dp],
        "agg_moe_tp_candidates": [1 if ep or not is_moe else width],
        "agg_moe_ep_candidates": [width if ep else 1],
    }


def row_candidates(row: dict[str, Any]) -> dict[str, list[int]]:
    """An AIC result row's own parallel tuple as single-candidate lists."""
    return {
        "agg_num_gpu_candidates": [row["num_total_gpus"]],
        **{f"agg_{k}_candidates": [row[k]] for k in ("tp", "pp", "dp", "moe_tp", "moe_ep")},
    }


def vllm_layout(tp: int, pp: int, dp: int, moe_tp: int, moe_ep: int) -> tuple[str, bool]:
    """An AIC parallel tuple in vLLM words; False when vLLM has no flags for it."""
    text = f"TP{tp}" + (f" PP{pp}" if pp > 1 else "") + (f" DP{dp}" if dp > 1 else "")
    if moe_ep > 1 and moe_tp == 1:
        return text + " EP", True
    if moe_ep > 1:
        return text + f" (MoE TP{moe_tp} EP{moe_ep})", False
    return text, True


def aic_label(row: dict[str, Any]) -> str:
    """An AIC agg row in vLLM terms (the same words as vfleet's labels)."""
    text, _ = vllm_layout(*(row[k] for k in ("tp", "pp", "dp", "moe_tp", "moe_ep")))
    return f"{text} x{row['replicas']}"


def disagg_label(row: dict[str, Any]) -> str:
    parts = []
    for tag, role in (("P", row["prefill"]), ("D", row["decode"])):
        text, _ = vllm_layout(*(role[k] for k in ("tp", "pp", "dp", "moe_tp", "moe_ep")))
        parts.append(f"{tag} {text} x{role['workers']}")
    reps = f" (x{row['replicas']})" if row["replicas"] > 1 else ""
    return " + ".join(parts) + reps
