"""Summarise NVIDIA AIConfigurator's measured vLLM kernel tables for one GPU into the few
numbers vfleet's step cost model uses, with their provenance.

AIConfigurator (https://github.com/ai-dynamo/aiconfigurator, Apache-2.0) ships per-GPU
tables of vLLM's own kernels timed on real hardware, under
`aiconfigurator_core/systems/data/<system>/<op>/vllm/<version>/*.parquet`. This script reads
them as data (nothing of AIConfigurator's code is used) and writes
controller/src/vfleet/data/kernels/vllm-<system>-kernels.json:

- gemm: per weight format (bf16, fp8 per-tensor, fp8 block-scaled), the fraction of the
  datasheet peak a large GEMM reaches (M >= 2048) and the fraction of the HBM bandwidth a
  GEMV streams its weights at (M <= 8, weights >= 32 MiB; block-scaled FP8 from 16 MiB,
  the largest its small-M kernels were timed at);
- moe: per format, vLLM's fused-MoE compute fraction against the expert width each GPU
  holds (TP slices it), large token counts, balanced routing; `level` and `narrow_cols`
  of the curve level * w / (w + narrow_cols) fitted to those points; and what expert
  parallelism over n GPUs keeps of it (`ep_factor`: EP-n over TP-1 at equal token counts);
- prefill_attention: FlashAttention-3's causal prefill, fraction of the bf16 peak by
  prompt length (batch 1, head_dim 128, no window);
- decode_attention: the fraction of HBM bandwidth decode attention streams the KV cache
  at, large batch x context;
- allreduce: vLLM's custom all-reduce (CUDA graph) and NCCL's latency for a small message;
- sparse_prefill: what DeepSeek-V3.2's sparse attention module (the indexer, its top-k and
  FlashMLA's sparse kernel) costs a prompt over the dense MLA module it replaces, per layer:
  a floor per forward pass and a cost per prompt token by prompt length and heads per GPU.

    uv pip install aiconfigurator==0.12.0   # or: make bench-aic (installs it)
    python tools/kernels/extract_aiconfigurator.py --aic-python /path/to/aic-venv/bin/python

It re-runs itself under the interpreter that has AIConfigurator (and pandas) installed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT_DIR = ROOT / "controller" / "src" / "vfleet" / "data" / "kernels"
# Datasheet peaks of the system the tables were taken on (dense, no sparsity).
PEAKS = {"h200_sxm": {"bf16_tflops": 989.0, "fp8_tflops": 1979.0, "hbm_TBps": 4.8}}
# (table dtype, kernel timed at large M, kernel timed at small M, bytes per weight). vLLM
# picks DeepGEMM for block-scaled FP8 where M is large and FlashInfer's kernel where it is
# small; the tables hold each only in its own range.
GEMM_KERNELS = {
    "bf16": ("bfloat16", "torch.nn.functional.linear", "torch.nn.functional.linear", 2.0),
    "fp8": ("fp8", "CutlassFP8ScaledMMLinearKernel", "CutlassFP8ScaledMMLinearKernel", 1.0),
    "fp8_block": (
        "fp8_block",
        "DeepGemmFp8BlockScaledMMKernel",
        "FlashInferFp8BlockScaledMMKernel",
        1.0,
    ),
}
MOE_KERNELS = {
    "bf16": ("bfloat16", "vllm_unquantizedfusedmoe_triton_tritonexperts", "bf16"),
    "fp8_block": ("fp8_block", "vllm_fp8moe_triton_tritonexperts", "fp8"),
    "mxfp4": ("w4a16_mxfp4", "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic", "bf16"),
    # Marlin's weight-only MXFP4 MoE: what Hopper runs when triton_kernels is not installed
    # (vLLM's wheels before 0.12). Timed on another MoE shape; the level is per expert width.
    "mxfp4_marlin": (
        "w4a16_mxfp4",
        "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu",
        "bf16",
    ),
    # INT4 weight-only experts (AWQ, GPTQ, compressed-tensors W4A16) run Marlin's MoE kernel.
    "int4_marlin": ("int4_wo", "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts", "bf16"),
}
MOE_LARGE_TOKENS = 8192


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4) if values else 0.0


def summarise(data_dir: Path, system: str, version: str) -> dict[str, Any]:
    import pandas as pd  # only inside AIConfigurator's environment

    root = data_dir / system
    peak = PEAKS[system]
    hbm = peak["hbm_TBps"] * 1e12

    def table(op: str, name: str) -> Any:
        return pd.read_parquet(root / op / "vllm" / version / f"{name}.parquet")

    out: dict[str, Any] = {}
    gemm = table("gemm", "gemm_perf")
    out["gemm"] = {}
    for fmt, (dtype, large_kernel, small_kernel, nbytes) in GEMM_KERNELS.items():
        rows = gemm[gemm.gemm_dtype == dtype]
        tflops = peak["fp8_tflops" if dtype != "bfloat16" else "bf16_tflops"] * 1e12
        big = rows[
            (rows.kernel_source == large_kernel)
            & (rows.m >= 2048)
            & rows.n.between(2048, 16384)
            & rows.k.between(2048, 16384)
        ]
        compute = [2 * r.m * r.n * r.k / (r.latency * 1e-3) / tflops for r in big.itertuples()]
        small = rows[
            (rows.kernel_source == small_kernel)
            & (rows.m <= 8)
            & (rows.n * rows.k * nbytes >= (16 if fmt == "fp8_block" else 32) * 2**20)
        ]
        stream = [r.n * r.k * nbytes / (r.latency * 1e-3) / hbm for r in small.itertuples()]
        tiny = rows[
            (rows.kernel_source == small_kernel) & (rows.m <= 8) & (rows.n * rows.k <= 65536)
        ]
        out["gemm"][fmt] = {
            "smallest_us": _median((tiny.latency * 1e3).tolist()),
            "kernels": sorted({large_kernel, small_kernel}),
            "compute": _median(compute),
            "stream": _median(stream),
            "points": len(compute) + len(stream),
        }

    moe = table("moe", "moe_perf")
    moe = moe[(moe.distribution == "balanced") & (moe.num_tokens >= MOE_LARGE_TOKENS)]
    out["moe"] = {}
    for fmt, (dtype, kernel, peak_kind) in MOE_KERNELS.items():
        rows = moe[(moe.moe_dtype == dtype) & (moe.kernel_source == kernel)]
        tflops = peak[f"{peak_kind}_tflops"] * 1e12
        by_width: dict[int, list[float]] = {}
        ep_ratio: dict[int, list[float]] = {}
        tp1: dict[tuple[Any, ...], float] = {}
        for r in rows.itertuples():
            ranks = r.moe_tp_size * r.moe_ep_size
            flops = 2 * 3 * r.num_tokens * r.topk * r.hidden_size * r.inter_size / ranks
            eff = flops / (r.latency * 1e-3) / tflops
            shape = (r.num_tokens, r.hidden_size, r.inter_size, r.topk, r.num_experts)
            if r.moe_ep_size == 1:
                by_width.setdefault(int(r.inter_size // r.moe_tp_size), []).append(eff)
                if r.moe_tp_size == 1:
                    tp1[shape] = eff
        for r in rows[(rows.moe_tp_size == 1) & (rows.moe_ep_size > 1)].itertuples():
            shape = (r.num_tokens, r.hidden_size, r.inter_size, r.topk, r.num_experts)
            if shape in tp1:
                flops = 2 * 3 * r.num_tokens * r.topk * r.hidden_size * r.inter_size / r.moe_ep_size
                eff = flops / (r.latency * 1e-3) / tflops
                ep_ratio.setdefault(int(r.moe_ep_size), []).append(eff / tp1[shape])
        points = sorted((w, _median(v)) for w, v in by_width.items())
        level, narrow = _fit_width_curve(points)
        out["moe"][fmt] = {
            "kernel": kernel,
            "peak": peak_kind,
            "level": level,
            "narrow_cols": narrow,
            "by_width": [[w, e] for w, e in points],
            "ep_factor": [[n, _median(v)] for n, v in sorted(ep_ratio.items()) if n <= 64],
        }

    ctx = table("attention", "context_attention_perf")
    ctx = ctx[
        (ctx.kernel_source == "vllm_flash_attn_fa3")
        & (ctx.head_dim == 128)
        & (ctx.window_size == 0)
        & (ctx.kv_cache_dtype == "bfloat16")
        & (ctx.batch_size == 1)
        & (ctx.num_heads >= 8)
    ]
    by_len: dict[int, list[float]] = {}
    for r in ctx.itertuples():
        flops = 4 * r.num_heads * r.head_dim * r.isl * (r.isl + 1) / 2
        by_len.setdefault(int(r.isl), []).append(
            flops / (r.latency * 1e-3) / (peak["bf16_tflops"] * 1e12)
        )
    out["prefill_attention"] = {
        "kernel": "vllm_flash_attn_fa3",
        "by_prompt_len": [[n, _median(v)] for n, v in sorted(by_len.items()) if n >= 128],
    }

    gen = table("attention", "generation_attention_perf")
    gen = gen[
        (gen.kernel_source == "vllm_flash_attn_fa3")
        & (gen.head_dim == 128)
        & (gen.window_size == 0)
        & (gen.kv_cache_dtype == "bfloat16")
        & (gen.batch_size >= 64)
        & (gen.step >= 4095)
    ]
    kv = [
        r.batch_size
        * r.step
        * 2
        * r.num_key_value_heads
        * r.head_dim
        * 2
        / (r.latency * 1e-3)
        / hbm
        for r in gen.itertuples()
    ]
    out["decode_attention"] = {"kernel": "vllm_flash_attn_fa3", "kv_stream": _median(kv)}

    out["sparse_prefill"] = sparse_prefill(
        table("sparse_attention", "dsa_context_module_perf"),
        table("mla", "mla_context_module_perf"),
    )

    custom = pd.read_parquet(root / "comm" / "vllm" / version / "custom_allreduce_perf.parquet")
    small = custom[(custom.message_size <= 65536) & (custom.backend == "vllm_graph")]
    out["allreduce"] = {
        "custom_graph_small_us": {
            str(n): _median((g.latency * 1e3).tolist()) for n, g in small.groupby("num_gpus")
        }
    }
    return out


# The token count from which a forward pass is bound by its tokens rather than its floor.
SPARSE_TOKEN_BOUND = 8192


def sparse_prefill(dsa: Any, mla: Any) -> dict[str, Any]:
    """DeepSeek-V3.2's sparse attention module over the dense MLA module, per layer, both
    timed in prefill (batch x prompt length, no cached prefix, bf16 weights and KV), by
    query heads per GPU. The two share their projections, so the difference is the indexer,
    its top-k and the sparse kernel, less the dense attention they replace.

    floor_ms: the extra of a forward pass with few tokens (the module's time is flat up to
    about 2k tokens); per_token_us: by heads, [prompt length, extra per prompt token] where
    the pass holds at least SPARSE_TOKEN_BOUND tokens (the largest batch timed)."""

    def pick(frame: Any) -> Any:
        rows = frame[(frame.gemm_type == "bfloat16") & (frame.kv_cache_dtype == "bfloat16")]
        return rows.groupby(["num_heads", "batch_size", "isl"]).latency.median()

    # The MLA tables time short prompts under vLLM's MLA backends and long ones under
    # FlashAttention (MLA's prefill kernel either way; they agree within 10% where both
    # exist), so the dense side is the median over the backends at each shape.
    sparse = pick(dsa[dsa.step == 0])
    dense = pick(mla)
    extra = (sparse - dense).dropna()
    floor = [ms for (_, b, isl), ms in extra.items() if b * isl <= 1024]
    per_token: dict[str, list[list[float]]] = {}
    for heads in sorted({h for h, _, _ in extra.index}):
        points = []
        for isl in sorted({i for h, _, i in extra.index if h == heads}):
            rows = [(b, ms) for (h, b, i), ms in extra.items() if h == heads and i == isl]
            batch, ms = max(rows)
            if batch * isl >= SPARSE_TOKEN_BOUND:
                points.append([float(isl), round(ms * 1e3 / (batch * isl), 4)])
        per_token[str(int(heads))] = points
    return {
        "kernel": "FLASHMLA_SPARSE module over the dense MLA module",
        "model": str(dsa.model.iloc[0]),
        "floor_ms": _median(floor),
        "per_token_us": per_token,
        "points": len(extra),
    }


def _fit_width_curve(points: list[tuple[int, float]]) -> tuple[float, float]:
    """level, narrow_cols of e(w) = level * w / (w + narrow_cols), least squares over a
    grid (the curve has two parameters and a handful of points)."""
    best = (float("inf"), 0.0, 0.0)
    for narrow in [float(c) for c in range(0, 2049, 8)]:
        shape = [w / (w + narrow) for w, _ in points]
        level = sum(s * e for s, (_, e) in zip(shape, points, strict=True)) / max(
            sum(s * s for s in shape), 1e-12
        )
        err = sum((level * s - e) ** 2 for s, (_, e) in zip(shape, points, strict=True))
        if err < best[0]:
            best = (err, level, narrow)
    return round(best[1], 4), best[2]


def weight_stream_measured() -> dict[str, Any]:
    """The HBM fraction bf16 GEMVs stream large weights (>= 200 MB) at, from vfleet's own
    H200 measurement (data/kernels/h200-kernels-*.json; more trusted than the tables)."""
    rates = []
    for name in ("h200-kernels-torch2.11.json", "h200-kernels-extra-torch2.11.json"):
        doc = json.loads((OUT_DIR / name).read_text())
        rows = doc.get("gemm") or doc["sections"]["gemm_bf16"]
        for r in rows:
            if r["M"] <= 8 and r["N"] * r["K"] * 2 >= 200e6:
                rates.append(r.get("weight_GBps") or r["GBps"])
    return {"fraction": _median([r / 4800.0 for r in rates]), "points": len(rates)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aic-python", help="the interpreter with aiconfigurator installed")
    parser.add_argument("--system", default="h200_sxm")
    parser.add_argument("--vllm-version", default="0.24.0")
    args = parser.parse_args()
    if args.aic_python:
        cmd = [args.aic_python, __file__, "--system", args.system]
        return subprocess.call([*cmd, "--vllm-version", args.vllm_version])
    from importlib.metadata import version

    import aiconfigurator_core  # type: ignore[import-not-found]

    data_dir = Path(aiconfigurator_core.__file__).parent / "systems" / "data"
    doc = {
        "source": {
            "project": "NVIDIA AIConfigurator",
            "url": "https://github.com/ai-dynamo/aiconfigurator",
            "license": "Apache-2.0",
            "package": f"aiconfigurator-core=={version('aiconfigurator-core')}",
            "tables": f"aiconfigurator_core/systems/data/{args.system}/*/vllm/{args.vllm_version}",
            "framework": f"vllm {args.vllm_version}",
        },
        "generated_by": "tools/kernels/extract_aiconfigurator.py",
        "peaks": PEAKS[args.system],
        "weight_stream_h200_measured": weight_stream_measured(),
        **summarise(data_dir, args.system, args.vllm_version),
    }
    name = args.system.split("_")[0]
    path = OUT_DIR / f"vllm-{name}-kernels.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
