"""Measured kernel efficiencies: how fast vLLM's own kernels run, by shape, on real GPUs.

The step cost model (`vfleet.perf.model`) prices each part of a step against the datasheet
peak times an efficiency. The level of each efficiency and the way it changes with shape
come from kernel timings, not from fitting serving runs:

- `data/kernels/vllm-h200-kernels.json`: vLLM 0.24's kernels timed on an H200 by NVIDIA
  AIConfigurator (its collected tables, summarised by tools/kernels/extract_aiconfigurator.py
  with their package version), and the weight-streaming rate from vfleet's own H200
  measurement (`h200-kernels-*.json`, tools/gpu/measure_h200_kernels.py).

What the tables give, as levels (`measured_efficiency`, used for Hopper unless a cluster's
calibration says otherwise) and as shapes relative to those levels:

- a GEMM's compute fraction by weight format (bf16, FP8 per-tensor, FP8 block-scaled);
- vLLM's fused-MoE fraction by format (MXFP4 twice: OpenAI's Triton kernels, and Marlin's
  weight-only kernel, which Hopper runs where triton_kernels is not installed and which
  reaches about 0.24 of the bf16 peak to Triton's 0.62; INT4 experts, AWQ or GPTQ, run
  Marlin's INT4 kernel), by the expert width each GPU holds
  (TP slices it: level * w / (w + narrow_cols)), and what expert parallelism over n GPUs
  keeps of it. The narrow-width loss is kept as the time it costs on the measured GPU,
  scaled by memory bandwidth, not as a fraction of any GPU's peak: a GPU with a sixth of the
  H200's compute (H20) loses far less of its own peak to it;
- FlashAttention-3's causal prefill fraction by prompt length (short prompts reach a small
  share of the peak: 2% at 256 tokens, 37% at 2k, 64% at 16k);
- decode attention's KV streaming fraction and large GEMVs' weight streaming fraction;
- what DeepSeek-V3.2's sparse attention (indexer, top-k, sparse kernel) adds to a prompt's
  layer over the dense MLA it replaces: a floor per forward pass (about 1.2 ms on the
  H200, flat up to some 2k tokens) and a cost per prompt token that grows with the prompt
  (0.23 us at 512 tokens, 0.42 at 2k, 0.71 at 32k, with 16 query heads per GPU).

Other GPU generations use the same shapes (fractions of their own peaks); their levels
come from the fit (`vfleet.perf.fit`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from vfleet.data import DATA_DIR

TABLE_FILE = DATA_DIR / "kernels" / "vllm-h200-kernels.json"
# The weight formats the model distinguishes (vfleet.perf.model.EngineShape.kernel_format).
FORMATS = ("bf16", "fp8", "fp8_block", "mxfp4", "mxfp4_marlin", "int4_marlin")
# Weight-only formats: their dense layers run bf16 GEMMs (gpt-oss keeps them in bf16; INT4's
# dequantising GEMMs are priced as bf16 ones, for want of a measured table).
WEIGHT_ONLY = ("mxfp4", "mxfp4_marlin", "int4_marlin")


@dataclass(frozen=True)
class MoeCurve:
    level: float  # fraction of the format's peak at wide experts and many tokens
    narrow_cols: float  # expert width per GPU at which it halves
    peak: str  # bf16 | fp8: the peak the level is a fraction of
    ep_factor: tuple[tuple[int, float], ...]  # (EP ranks, share of the TP-1 efficiency kept)


@dataclass(frozen=True)
class SparsePrefill:
    """DeepSeek-V3.2's sparse attention module over the dense MLA module, per layer, in
    prefill, on the measured GPU."""

    floor_s: float  # the extra of a forward pass with few prompt tokens
    heads: tuple[float, ...]  # query heads per GPU the per-token costs were timed at
    prompt_len: tuple[tuple[float, ...], ...]  # by heads: prompt lengths
    per_token_s: tuple[tuple[float, ...], ...]  # by heads: extra seconds per prompt token

    def extra_s(self, tokens: Any, prompt_len: Any, heads: float) -> Any:
        """The extra seconds of one layer's forward pass holding `tokens` prompt tokens of
        prompts about `prompt_len` long, with `heads` query heads per GPU (0 when none)."""
        logs = np.log2(self.heads)
        at = float(np.clip(np.log2(max(heads, 1.0)), logs[0], logs[-1]))
        upper = min(int(np.searchsorted(logs, at)), len(logs) - 1)
        lower = max(upper - 1, 0)
        span = logs[upper] - logs[lower]
        weight = 0.0 if span == 0 else (at - logs[lower]) / span
        length = np.log(np.maximum(prompt_len, 1.0))

        def per_token(i: int) -> Any:
            return np.interp(length, np.log(self.prompt_len[i]), self.per_token_s[i])

        cost = (1 - weight) * per_token(lower) + weight * per_token(upper)
        return np.where(tokens > 0, np.maximum(self.floor_s, tokens * cost), 0.0)


@dataclass(frozen=True)
class KernelTable:
    source: str
    gemm_compute: dict[str, float]
    weight_stream: float
    kv_stream: float
    moe: dict[str, MoeCurve]
    prefill_len: tuple[float, ...]
    prefill_eff: tuple[float, ...]
    peak_tflops: dict[str, float]  # the measured GPU's datasheet peaks, by bf16 | fp8
    hbm_tb_s: float
    sparse: SparsePrefill | None = None

    def gemm_ratio(self, fmt: str) -> float:
        """A format's GEMM compute fraction over bf16's (each of its own peak)."""
        base = self.gemm_compute["bf16"]
        return self.gemm_compute.get(_gemm_format(fmt), base) / base

    def moe_curve(self, fmt: str) -> MoeCurve:
        return self.moe.get(fmt) or self.moe["bf16"]

    def moe_ratio(self, fmt: str, peak_kind: str) -> float:
        """vLLM's fused-MoE level for `fmt`, as a fraction of the `peak_kind` peak the cost
        model divides by, over the bf16 kernel's level (each as the tables have it)."""
        curve, base = self.moe_curve(fmt), self.moe["bf16"]
        level = curve.level
        if curve.peak == "fp8" and peak_kind == "bf16":
            level *= 2.0  # an fp8 level counted against the bf16 peak
        elif curve.peak == "bf16" and peak_kind == "fp8":
            level /= 2.0
        return level / base.level

    def ep_factor(self, fmt: str, ranks: Any) -> Any:
        """The share of the fused-MoE efficiency EP over `ranks` GPUs keeps (1 for 1)."""
        points = self.moe_curve(fmt).ep_factor or self.moe["bf16"].ep_factor
        if not points:
            return 1.0 + 0.0 * np.asarray(ranks, dtype=float)
        xs = np.log2([1.0, *(float(n) for n, _ in points)])
        ys = [1.0, *(f for _, f in points)]
        return np.interp(np.log2(np.maximum(ranks, 1.0)), xs, ys)

    def prefill_shape(self, prompt_len: Any) -> Any:
        """Prefill attention's efficiency at `prompt_len` over its best (log-interpolated)."""
        xs = np.log(self.prefill_len)
        ys = np.asarray(self.prefill_eff) / max(self.prefill_eff)
        return np.interp(np.log(np.maximum(prompt_len, 1.0)), xs, ys)

    def measured_levels(self) -> dict[str, float]:
        """The Efficiency fields these tables measure (fractions of the bf16 peak and HBM)."""
        bf16 = self.moe["bf16"]
        return {
            "gemm": self.gemm_compute["bf16"],
            "hbm": self.weight_stream,
            "kv_read": self.kv_stream,
            "attention": max(self.prefill_eff),
            "moe_gemm": bf16.level,
            "moe_narrow_cols": bf16.narrow_cols,
        }


def _gemm_format(fmt: str) -> str:
    return "bf16" if fmt in WEIGHT_ONLY else fmt


def table_from_dict(raw: dict[str, Any], source: str) -> KernelTable:
    moe = {
        fmt: MoeCurve(
            level=float(v["level"]),
            narrow_cols=float(v["narrow_cols"]),
            peak=str(v["peak"]),
            ep_factor=tuple((int(n), float(f)) for n, f in v.get("ep_factor", [])),
        )
        for fmt, v in raw["moe"].items()
    }
    prefill = [(float(n), float(e)) for n, e in raw["prefill_attention"]["by_prompt_len"]]
    sparse = None
    if "sparse_prefill" in raw:
        measured = raw["sparse_prefill"]
        by_heads = sorted((float(h), pts) for h, pts in measured["per_token_us"].items())
        sparse = SparsePrefill(
            floor_s=float(measured["floor_ms"]) * 1e-3,
            heads=tuple(h for h, _ in by_heads),
            prompt_len=tuple(tuple(float(n) for n, _ in pts) for _, pts in by_heads),
            per_token_s=tuple(tuple(float(us) * 1e-6 for _, us in pts) for _, pts in by_heads),
        )
    return KernelTable(
        source=source,
        gemm_compute={fmt: float(v["compute"]) for fmt, v in raw["gemm"].items()},
        weight_stream=float(raw["weight_stream_h200_measured"]["fraction"]),
        kv_stream=float(raw["decode_attention"]["kv_stream"]),
        moe=moe,
        prefill_len=tuple(n for n, _ in prefill),
        prefill_eff=tuple(e for _, e in prefill),
        peak_tflops={"bf16": raw["peaks"]["bf16_tflops"], "fp8": raw["peaks"]["fp8_tflops"]},
        hbm_tb_s=float(raw["peaks"]["hbm_TBps"]),
        sparse=sparse,
    )


@cache
def kernel_table(arch: str) -> KernelTable | None:
    """The measured table for a GPU generation, or None where vfleet has none."""
    if arch != "hopper":
        return None
    raw = json.loads(TABLE_FILE.read_text())
    return table_from_dict(raw, f"{TABLE_FILE.name} ({raw['source']['package']})")


@cache
def shapes() -> KernelTable:
    """The shapes every generation uses (Hopper's, the one measured)."""
    table = kernel_table("hopper")
    assert table is not None
    return table
