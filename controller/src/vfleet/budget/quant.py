"""Bytes per weight by quantization scheme and weight kind.

A checkpoint's quantization_config (or a runtime --quantization) decides which weights are
stored narrow. Embeddings, the LM head, routers and norms stay in the model dtype in every
scheme vLLM ships; so does whatever a config lists under modules_to_not_convert / ignore.
Scale tensors are counted: fp8 block scales (fp32 per 128x128), int4 group scales and zeros,
MXFP4 (one e8m0 byte per 32 values) and NVFP4 (one fp8 byte per 16 values).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vfleet.catalog.releases import NEWEST_KNOWN
from vfleet.errors import UserError

if TYPE_CHECKING:
    from vfleet.catalog.gpus import Gpu

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
class Mxfp4Layout:
    """How one vLLM MXFP4 MoE backend stores the experts of one rank on the GPU.

    Per expert vLLM allocates w13 [2*I, H] and w2 [H, I] as packed fp4 (two values a byte),
    one e8m0 scale byte per 32 values along the contraction dimension, and the w13/w2 biases.
    H and the per-rank I are first rounded up to `hidden_align` / `inter_align`; the kernel
    layout may then pad the packed values and the scales again (the *_align fields, in rows,
    fp4 values and scale groups); `scales_kept` means the checkpoint-layout scales stay
    allocated next to their swizzled copy.
    """

    backend: str  # marlin | triton | flashinfer_trtllm | rocm
    hidden_align: int = 1
    inter_align: int = 1
    value_rows_align: int = 1
    value_k_align: int = 1
    scale_rows_align: int = 1
    scale_groups_align: int = 1
    scales_kept: bool = False
    bias_bytes: int = 2


@dataclass(frozen=True)
class WeightFormat:
    """How many bytes each kind of weight takes once loaded on the GPU."""

    scheme: str
    dtype_bytes: int
    group_size: int = 128
    experts_only: bool = False  # MXFP4 in gpt-oss quantizes only the experts
    mxfp4: Mxfp4Layout | None = None  # set for scheme "mxfp4": the MoE backend's layout

    @property
    def pads_experts(self) -> bool:
        """The routed experts take the MXFP4 MoE backend's padded layout (see Mxfp4Layout)."""
        return self.mxfp4 is not None

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
    qcfg: dict[str, Any],
    model_type: str,
    dtype_bytes: int,
    override: str | None = None,
    *,
    version: tuple[int, int, int] = NEWEST_KNOWN,
    gpu: Gpu | None = None,
    triton_kernels: bool = False,
    flashinfer: bool = True,
) -> WeightFormat:
    """The format the loaded weights take: checkpoint config, or a runtime override.

    For MXFP4 the expert layout follows the MoE backend vLLM `version` picks on `gpu`
    (Hopper when none is given); `triton_kernels` / `flashinfer` say whether those optional
    packages are importable in releases that do not ship them (see mxfp4_moe_layout).
    """
    if override:
        scheme = normalise_scheme(override)
        group, experts_only = 128, scheme == "mxfp4"
    else:
        scheme, group, experts_only = scheme_from_config(qcfg, model_type)
    mxfp4 = None
    if scheme == "mxfp4":
        mxfp4 = mxfp4_moe_layout(
            version,
            gpu_capability(gpu.name, gpu.arch) if gpu else (9, 0),
            triton_kernels=triton_kernels,
            flashinfer=flashinfer,
        )
    return WeightFormat(
        scheme=scheme,
        dtype_bytes=dtype_bytes,
        group_size=group,
        experts_only=experts_only,
        mxfp4=mxfp4,
    )


# --- MXFP4 MoE backends, per vLLM release and GPU --------------------------------------------
# Read from the vLLM sources at each release tag (https://github.com/vllm-project/vllm, paths
# below; line numbers are those of the tag). Up to v0.18.0 the backend choice and the padding
# live in vllm/model_executor/layers/quantization/mxfp4.py (get_mxfp4_backend, create_weights);
# from v0.19.0 in vllm/model_executor/layers/fused_moe/oracle/mxfp4.py
# (select_mxfp4_moe_backend, mxfp4_round_up_hidden_size_and_intermediate_size).
# Tags cited, with their commits: v0.10.2 26b999c71, v0.11.0 f71952c1c, v0.11.1 439368496,
# v0.11.2 275de3417, v0.12.0 4fd9d6a85, v0.13.0 72506c983, v0.24.0 ee0da84ab, v0.25.0
# dd10e03f9, v0.26.0 ffd46bfab, v0.27.0 4bdc8a788, v0.32.0 5df63a720, v0.33.0 4ba787ec9.
#
# - Marlin (GPUs below SM90, and SM90/SM120 without Triton): hidden -> 256, per-rank
#   intermediate -> 128 (v0.10.2 mxfp4.py L184-195; v0.33.0 oracle/mxfp4.py L865-870); bf16
#   biases; the repacked weights and scales keep their size.
# - OpenAI triton_kernels matmul_ogs ("Triton"; SM90, and SM100/103 without FlashInfer):
#   intermediate -> 64, hidden unpadded (v0.10.2 mxfp4.py L216-218; v0.33.0 oracle/mxfp4.py
#   L915-916); fp32 biases (v0.10.2 mxfp4.py L573-574). It is chosen on SM90 when the
#   triton_kernels package imports (v0.10.2 mxfp4.py L89-97); the wheels up to v0.11.2 do not
#   depend on it, v0.12.0 vendors it as vllm/third_party/triton_kernels. _swizzle_mxfp4
#   (vllm/model_executor/layers/quantization/utils/mxfp4_utils.py) keeps the checkpoint
#   layout on SM90 under torch < 2.8.1 (v0.10.2 L24-32, v0.11.0 L28-36: torch 2.8.0 there);
#   v0.11.1 requires torch 2.9.0, so SM90 gets HopperMX{Value,Scale}Layout from then on:
#   values padded to 16 rows x 64 fp4, scale rows to 2*num_warps*2*8 = 256 (num_warps 8) and
#   scale groups to 2 (vllm/third_party/triton_kernels/tensor_details/layout_details/
#   hopper_value.py L130-134, hopper_scale.py L25-29, v0.33.0); from v0.26.0 scale groups are
#   first padded to 4 on SM90 (mxfp4_utils.py L94, v0.26.0). Blackwell layouts pad the packed
#   values' contiguous dimension to 128 bytes and scales to 8 groups x 128 rows
#   (blackwell_value.py L20, blackwell_scale.py L19-20). Until v0.24.0 only the unswizzled
#   values are freed and the checkpoint-layout scales stay allocated (v0.11.0 mxfp4.py
#   L613-614; v0.24.0 oracle/mxfp4.py L1147-1148); v0.25.0 frees them too (L1153-1156).
# - FlashInfer TRT-LLM MXFP4 x BF16 (SM100 family, the default there when flashinfer
#   imports): hidden -> 256, intermediate -> 256 (v0.10.2 mxfp4.py L202-209, v0.26.0
#   oracle/mxfp4.py L655-657), intermediate -> 128 from v0.27.0 (L656-658; v0.33.0 L871-873);
#   fp32 biases (v0.33.0 oracle/mxfp4.py L1026-1027). Up to v0.12.0 only SM100 itself
#   (is_device_capability(100), v0.12.0 mxfp4.py L134); v0.13.0 takes the SM10x family (L133).
#   flashinfer is an extra up to v0.11.0 and a dependency from v0.11.1.
# - SM120 (RTX 50xx / RTX PRO 6000): Triton up to v0.11.2 when triton_kernels imports (any
#   capability >= 9, v0.11.2 mxfp4.py L134-145); from v0.12.0 Triton is limited to
#   (9,0) <= cc < (11,0) (v0.12.0 mxfp4.py L153-166) and v0.32.0 orders it after Marlin on SM12x
#   (v0.33.0 oracle/mxfp4.py L426-434), so Marlin.
# - ROCm: 128/128 in v0.10.2 (mxfp4.py L210-215), 256/256 from v0.11.0 (L220-223; v0.33.0
#   oracle/mxfp4.py L880-910 for the non-SiLU gpt-oss activation).

_MXFP4_BLOCK = 32

# Compute capability by catalog GPU (data/gpus.json), where the architecture alone is ambiguous.
_CAPABILITY_BY_NAME = {
    "B300": (10, 3),
    "GB300": (10, 3),
    "RTX-PRO-6000-Blackwell-96GB": (12, 0),
    "RTX-5090": (12, 0),
}
_CAPABILITY_BY_ARCH = {"ampere": (8, 0), "ada": (8, 9), "hopper": (9, 0), "blackwell": (10, 0)}


def gpu_capability(name: str, arch: str) -> tuple[int, int] | None:
    """CUDA compute capability of a catalog GPU; None for ROCm parts."""
    if arch.startswith("cdna"):
        return None
    return _CAPABILITY_BY_NAME.get(name) or _CAPABILITY_BY_ARCH.get(arch, (9, 0))


def mxfp4_moe_layout(
    version: tuple[int, int, int],
    capability: tuple[int, int] | None,
    triton_kernels: bool = False,
    flashinfer: bool = True,
) -> Mxfp4Layout:
    """The MXFP4 MoE backend vLLM `version` selects for gpt-oss on a GPU, and its layout.

    `triton_kernels` and `flashinfer` matter only where a release leaves them optional
    (triton_kernels up to 0.11.2, flashinfer up to 0.11.0). The defaults are what vLLM's own
    images of the release have: flashinfer, and before 0.12 no triton_kernels, which users
    installed by hand (https://github.com/vllm-project/vllm/pull/27370), so SM90 gets Marlin.
    """
    marlin = Mxfp4Layout("marlin", hidden_align=256, inter_align=128)
    if capability is None:
        align = 128 if version < (0, 11, 0) else 256
        return Mxfp4Layout("rocm", hidden_align=align, inter_align=align)
    if capability < (9, 0):
        return marlin
    has_triton = triton_kernels or version >= (0, 12, 0)
    has_flashinfer = flashinfer or version >= (0, 11, 1)
    sm100 = capability == (10, 0) or (capability[0] == 10 and version >= (0, 13, 0))
    if sm100 and has_flashinfer:
        inter = 256 if version < (0, 27, 0) else 128
        return Mxfp4Layout("flashinfer_trtllm", hidden_align=256, inter_align=inter, bias_bytes=4)
    if version < (0, 12, 0):
        triton_ok = has_triton and capability >= (9, 0)
    else:
        triton_ok = (9, 0) <= capability < (11, 0)
    if not triton_ok:
        return marlin
    kept = version < (0, 25, 0)
    if capability[0] == 9:
        if version < (0, 11, 1):  # torch 2.8.0: checkpoint layout, nothing re-padded
            return Mxfp4Layout("triton", inter_align=64, bias_bytes=4)
        return Mxfp4Layout(
            "triton",
            inter_align=64,
            value_rows_align=16,
            value_k_align=64,
            scale_rows_align=256,
            scale_groups_align=4 if version >= (0, 26, 0) else 2,
            scales_kept=kept,
            bias_bytes=4,
        )
    return Mxfp4Layout(
        "triton",
        inter_align=64,
        value_k_align=256,  # 128 bytes of packed fp4
        scale_rows_align=128,
        scale_groups_align=8,
        scales_kept=kept,
        bias_bytes=4,
    )


def _round_up(x: int, align: int) -> int:
    return -(-x // align) * align


def mxfp4_expert_bytes(
    layout: Mxfp4Layout, hidden: int, intermediate: int, experts: int = 1
) -> int:
    """Bytes of `experts` MXFP4 experts of hidden size H and per-rank intermediate size I."""
    h = _round_up(hidden, layout.hidden_align)
    i = _round_up(intermediate, layout.inter_align)

    def values(rows: int, k: int) -> int:
        return _round_up(rows, layout.value_rows_align) * _round_up(k, layout.value_k_align) // 2

    def scales(rows: int, k: int) -> int:
        groups = _round_up(k // _MXFP4_BLOCK, layout.scale_groups_align)
        return _round_up(rows, layout.scale_rows_align) * groups

    per_expert = values(2 * i, h) + values(h, i) + scales(2 * i, h) + scales(h, i)
    if layout.scales_kept:
        per_expert += (2 * i * h + h * i) // _MXFP4_BLOCK
    per_expert += (2 * i + h) * layout.bias_bytes
    return experts * per_expert
