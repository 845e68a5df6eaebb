"""What a model's config.json must satisfy before vfleet computes anything from it.

Two passes. `check_config` looks at the raw numbers, lists and mappings: each is of its type
and within bounds far above any released model (a config with 10**7 layers would otherwise
hang the per-layer loops, and a string where a number belongs would be a traceback).
`check_semantics` looks at the shape built from them as vLLM's model loader does: heads that
group, experts that can be picked, widths above zero (a shape that passes the bounds but
makes no model would otherwise print NaN or a plan no engine can start).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vfleet.errors import UserError

if TYPE_CHECKING:
    from vfleet.catalog.model_shape import ModelShape

DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "bf16": 2,
    "half": 2,
}


# What each number spec_from_config reads may be: (lowest, highest), whole numbers only. The
# ceilings sit far above any released model and far below what would stall a loop.
_LAYERS, _WIDTH, _HEADS, _DIM = (1, 1024), (0, 10_000_000), (1, 4096), (0, 1_000_000)
_TEXT_BOUNDS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers"), _LAYERS),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model"), (1, 1_000_000)),
    **dict.fromkeys(("num_attention_heads", "n_head"), _HEADS),
    **dict.fromkeys(("num_key_value_heads", "n_head_kv", "num_kv_heads"), _HEADS),
    "head_dim": (0, 65_536),
    "vocab_size": (1, 10_000_000),
    **dict.fromkeys(("n_routed_experts", "num_local_experts", "num_experts"), (0, 4096)),
    **dict.fromkeys(("n_shared_experts", "num_shared_experts"), (0, 4096)),
    **dict.fromkeys(("num_experts_per_tok", "experts_per_token"), (0, 4096)),
    **dict.fromkeys(
        (
            "intermediate_size",
            "n_inner",
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "intermediate_size_mlp",
        ),
        _WIDTH,
    ),
    **dict.fromkeys(
        ("max_position_embeddings", "n_positions", "max_sequence_length"), (1, 100_000_000)
    ),
    **dict.fromkeys(
        (
            "kv_lora_rank",
            "q_lora_rank",
            "qk_rope_head_dim",
            "qk_nope_head_dim",
            "v_head_dim",
            "index_head_dim",
            "o_lora_rank",
        ),
        _DIM,
    ),
    **dict.fromkeys(("index_n_heads", "o_groups", "hc_mult"), (0, 4096)),
    **dict.fromkeys(("index_topk", "sliding_window", "attention_chunk_size"), (0, 100_000_000)),
    "num_nextn_predict_layers": (0, 1024),
    **dict.fromkeys(("first_k_dense_replace", "max_window_layers"), (0, 1_000_000)),
    **dict.fromkeys(
        (
            "moe_layer_freq",
            "decoder_sparse_step",
            "interleave_moe_layer_step",
            "sliding_window_pattern",
            "no_rope_layer_interval",
        ),
        (0, 1024),
    ),
}
_VISION_BOUNDS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("hidden_size", "embed_dim", "width"), (0, 1_000_000)),
    **dict.fromkeys(("num_hidden_layers", "depth", "layers"), (0, 1024)),
    "intermediate_size": _WIDTH,
    "patch_size": (0, 4096),
    **dict.fromkeys(("num_channels", "in_channels"), (0, 64)),
}
# Lists of whole numbers, lists of names, and mappings the shape code walks.
_INT_LISTS = ("compress_ratios", "mlp_only_layers", "no_rope_layers")
_STR_LISTS = ("architectures", "layer_types")
_MAPPINGS = ("quantization_config", "compress_rates")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _whole(value: Any, low: int, high: int) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        return False
    return low <= value <= high


_Problem = tuple[str, str, Any]  # key, what it must be, the value found


def _check_section(cfg: Mapping[str, Any], where: str, prefix: str, text: bool) -> None:
    """Refuse the first field of one config section the shape code cannot use."""
    problem = _out_of_bounds(cfg, _TEXT_BOUNDS if text else _VISION_BOUNDS)
    if problem is None and text:  # the lists and mappings are text-model fields only
        problem = _misshapen(cfg) or _bad_compress_rate(cfg)
    if problem is not None:
        key, what, value = problem
        raise UserError(f"{where}: {prefix}{key}: {what}, got {_shown(value)}: fix config.json")


def _out_of_bounds(
    cfg: Mapping[str, Any], bounds: Mapping[str, tuple[int, int]]
) -> _Problem | None:
    for key, (low, high) in bounds.items():
        value = cfg.get(key)
        if value is not None and not _whole(value, low, high):
            return key, f"must be a whole number from {low:,} to {high:,}", value
    return None


def _misshapen(cfg: Mapping[str, Any]) -> _Problem | None:
    """The first list of numbers, list of names or mapping that is something else."""
    for key in _INT_LISTS:
        value = cfg.get(key)
        if value is not None and not (
            isinstance(value, list) and all(_whole(v, 0, 1_000_000) for v in value)
        ):
            return key, "must be a list of whole numbers", value
    for key in _STR_LISTS:
        value = cfg.get(key)
        if value is not None and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            return key, "must be a list of names", value
    for key in _MAPPINGS:
        value = cfg.get(key)
        if value is not None and not isinstance(value, Mapping):
            return key, "must be a JSON object", value
    return None


def _bad_compress_rate(cfg: Mapping[str, Any]) -> _Problem | None:
    # Runs after _misshapen, so compress_rates is a mapping (or absent) by now.
    for rate in (cfg.get("compress_rates") or {}).values():
        if not _whole(rate, 0, 1_000_000):
            return "compress_rates", "must map layer types to whole numbers", rate
    return None


def where_of(name: str) -> str:
    if not name.endswith(".json") and Path(name).is_dir():
        return f"model config {Path(name) / 'config.json'}"
    return f"model config {name}"


def check_config(raw: Mapping[str, Any], name: str) -> None:
    """Refuse a config whose numbers the shape code cannot use, before any loop runs."""
    where = where_of(name)
    _check_section(raw, where, "", text=True)
    for key in ("text_config", "llm_config", "language_config"):
        if isinstance(raw.get(key), Mapping):
            _check_section(raw[key], where, f"{key}.", text=True)
    if isinstance(raw.get("vision_config"), Mapping):
        _check_section(raw["vision_config"], where, "vision_config.", text=False)


def norm_dtype(raw: Any, where: str) -> str:
    """The checkpoint's dtype; one vLLM cannot load (e.g. "int1") is refused, not guessed."""
    if raw is None or raw == "auto":
        return "bfloat16"
    dtype = str(raw).replace("torch.", "")
    if dtype not in DTYPE_BYTES:
        raise UserError(
            f"{where}: torch_dtype must be one of {', '.join(sorted(DTYPE_BYTES))}, "
            f"got {_shown(raw)}: fix config.json"
        )
    return dtype


def _refuse(where: str, key: str, what: str, value: Any) -> UserError:
    return UserError(f"{where}: {key}: {what}, got {_shown(value)}: fix config.json")


def _check_attention(spec: ModelShape, where: str) -> None:
    """The head arithmetic vLLM's attention layers assume (GQA groups, a positive width)."""
    if spec.head_dim <= 0:
        raise _refuse(where, "head_dim", "must be above 0 (or hidden_size / heads)", spec.head_dim)
    if spec.is_mla:
        for key in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            if getattr(spec, key) <= 0:
                raise _refuse(where, key, "must be above 0 for latent attention", 0)
        return
    if spec.num_kv_heads < 1 or spec.num_kv_heads > spec.num_attention_heads:
        raise _refuse(
            where,
            "num_key_value_heads",
            f"must be from 1 to num_attention_heads ({spec.num_attention_heads})",
            spec.num_kv_heads,
        )
    if spec.num_attention_heads % spec.num_kv_heads:
        raise _refuse(
            where,
            "num_key_value_heads",
            f"must divide num_attention_heads ({spec.num_attention_heads})",
            spec.num_kv_heads,
        )


def _check_mlp(spec: ModelShape, where: str) -> None:
    """Experts and MLP widths as vLLM's MoE and MLP layers need them."""
    if spec.is_moe:
        if not 1 <= spec.experts_per_token <= spec.num_experts:
            raise _refuse(
                where,
                "num_experts_per_tok",
                f"must be from 1 to the number of experts ({spec.num_experts})",
                spec.experts_per_token,
            )
        if spec.moe_intermediate_size <= 0:
            raise _refuse(
                where, "moe_intermediate_size", "must be above 0", spec.moe_intermediate_size
            )
    if spec.intermediate_size <= 0:
        raise _refuse(where, "intermediate_size", "must be above 0", spec.intermediate_size)


def _check_rope_scaling(cfg: Mapping[str, Any], where: str) -> None:
    rope = cfg.get("rope_scaling")
    if rope is None:
        return
    if not isinstance(rope, Mapping):
        raise _refuse(where, "rope_scaling", "must be a JSON object or null", rope)
    kind = rope.get("rope_type", rope.get("type"))
    if kind is not None and not isinstance(kind, str):
        raise _refuse(where, "rope_scaling.rope_type", "must be a name", kind)
    factor = rope.get("factor")
    if factor is not None and not (
        isinstance(factor, int | float)
        and not isinstance(factor, bool)
        and math.isfinite(factor)
        and 0 < factor <= 1_000_000
    ):
        raise _refuse(where, "rope_scaling.factor", "must be a number above 0", factor)


def _check_quantization(quant: Mapping[str, Any], where: str) -> None:
    method = quant.get("quant_method")
    if method is not None and not isinstance(method, str):
        raise _refuse(where, "quantization_config.quant_method", "must be a name", method)
    block = quant.get("weight_block_size")
    if block is not None and not (
        isinstance(block, list) and len(block) == 2 and all(_whole(b, 1, 65_536) for b in block)
    ):
        raise _refuse(
            where,
            "quantization_config.weight_block_size",
            "must be two whole numbers above 0, e.g. [128, 128]",
            block,
        )


def check_semantics(spec: ModelShape, cfg: Mapping[str, Any], where: str) -> None:
    """What vLLM refuses at load time, refused here before any cost is computed: a shape
    that passes the range checks but makes no model (no experts picked, KV heads that do
    not group the heads) would otherwise print NaN or a plan no engine can start."""
    _check_attention(spec, where)
    if not spec.is_moe and cfg.get("intermediate_size") == 0:  # a dense MLP of width 0
        raise _refuse(where, "intermediate_size", "must be above 0", 0)
    _check_mlp(spec, where)
    _check_rope_scaling(cfg, where)
    _check_quantization(spec.quantization, where)
