"""Bytes per weight by quantization scheme and weight kind.

A checkpoint's quantization_config (or a runtime --quantization) decides which weights are
stored narrow. Embeddings, the LM head, routers and norms stay in the model dtype in every
scheme vLLM ships; so does whatever a config lists under modules_to_not_convert / ignore.
Scale tensors are counted: fp8 block scales (fp32 per 128x128), int4 group scales and zeros,
MXFP4 (one e8m0 byte per 32 values) and NVFP4 (one fp8 byte per 16 values).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vfleet.errors import UserError

LINEAR_KINDS = ("attention", "dense_mlp", "routed_experts", "shared_experts", "indexer", "mtp")

# Runtime or checkpoint scheme names users pass, normalised to one of ours.
_ALIASES = {
    "fp8": "fp8",
    "fp8_block": "fp8",
    "fbgemm_fp8": "fp8",
    "modelopt": "fp8",
    "deepseek_v4_fp8": "dsv4",
    "w8a8": "int8",
    "int8": "int8",
    "w8a8_int8": "int8",
    "awq": "int4",
    "awq_marlin": "int4",
    "gptq": "int4",
    "gptq_marlin": "int4",
    "w4a16": "int4",
    "int4": "int4",
    "bitsandbytes": "int4",
    "mxfp4": "mxfp4",
    "nvfp4": "nvfp4",
    "modelopt_fp4": "nvfp4",
    "fp4": "nvfp4",
    "none": "none",
    "bf16": "none",
    "fp16": "none",
}

SCHEMES = ("none", "fp8", "int8", "int4", "mxfp4", "nvfp4", "dsv4")


@dataclass(frozen=True)
class WeightFormat:
    """How many bytes each kind of weight takes once loaded on the GPU."""

    scheme: str
    dtype_bytes: int
    group_size: int = 128
    experts_only: bool = False  # MXFP4 in gpt-oss quantizes only the experts

    @property
    def pads_experts(self) -> bool:
        """vLLM's MXFP4 MoE kernels pad expert matrices to multiples of 256."""
        return self.scheme == "mxfp4"

    def bytes_per_param(self, kind: str) -> float:
        if self.scheme == "none" or kind not in LINEAR_KINDS:
            return float(self.dtype_bytes)
        if self.experts_only and kind not in ("routed_experts",):
            return float(self.dtype_bytes)
        if self.scheme == "fp8":
            return 1.0 + 4.0 / (128 * 128)
        if self.scheme == "int8":
            return 1.0 + 4.0 / 4096  # per-channel fp32 scales, amortised over a row
        if self.scheme == "int4":
            # packed 4-bit values + fp16 scale and packed 4-bit zero per group
            return 0.5 + 2.5 / self.group_size
        if self.scheme == "mxfp4":
            return 0.5 + 1.0 / 32
        if self.scheme == "nvfp4":
            return 0.5 + 1.0 / 16
        if self.scheme == "dsv4":
            # DeepSeek V4 checkpoints: FP4 (MXFP4-style) experts, FP8 block weights elsewhere.
            if kind == "routed_experts":
                return 0.5 + 1.0 / 32
            return 1.0 + 4.0 / (128 * 128)
        raise AssertionError(self.scheme)


def normalise_scheme(name: str) -> str:
    key = name.strip().lower().replace("-", "_")
    if key not in _ALIASES:
        raise UserError(
            f"unknown quantization {name!r}: use one of fp8, int8/w8a8, awq, gptq, w4a16, "
            "mxfp4, nvfp4, deepseek_v4_fp8 or none"
        )
    return _ALIASES[key]


def scheme_from_config(qcfg: dict[str, Any], model_type: str) -> tuple[str, int, bool]:
    """(scheme, group size, experts_only) from a checkpoint's quantization_config."""
    if model_type == "deepseek_v4" or qcfg.get("expert_dtype") in ("fp4", "mxfp4"):
        return "dsv4", 32, False  # V4 ships only as FP4 experts + FP8 elsewhere
    if not qcfg:
        return "none", 128, False
    method = str(qcfg.get("quant_method") or qcfg.get("quant_algo") or "").lower()
    if method == "compressed-tensors":
        return _compressed_tensors_scheme(qcfg)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = int(qcfg.get("bits") or 4)
        return ("int4" if bits == 4 else "int8"), int(qcfg.get("group_size") or 128), False
    if method == "mxfp4":
        return "mxfp4", 32, True  # gpt-oss keeps attention, router and embeddings in bf16
    if method in ("fp8", "fbgemm_fp8", "modelopt"):
        return "fp8", 128, False
    if "fp4" in method:
        return "nvfp4", 16, False
    return normalise_scheme(method), 128, False


def _compressed_tensors_scheme(qcfg: dict[str, Any]) -> tuple[str, int, bool]:
    for group in (qcfg.get("config_groups") or {}).values():
        weights = group.get("weights") or {}
        bits = int(weights.get("num_bits") or 8)
        kind = str(weights.get("type") or "int")
        if bits == 4:
            if kind == "float":
                return "nvfp4", 16, False
            return "int4", int(weights.get("group_size") or 128), False
        return ("fp8" if kind == "float" else "int8"), 128, False
    return "int8", 128, False


def weight_format(
    qcfg: dict[str, Any], model_type: str, dtype_bytes: int, override: str | None = None
) -> WeightFormat:
    """The format the loaded weights take: checkpoint config, or a runtime override."""
    if override:
        scheme = normalise_scheme(override)
        return WeightFormat(scheme=scheme, dtype_bytes=dtype_bytes, experts_only=scheme == "mxfp4")
    scheme, group, experts_only = scheme_from_config(qcfg, model_type)
    return WeightFormat(
        scheme=scheme, dtype_bytes=dtype_bytes, group_size=group, experts_only=experts_only
    )
