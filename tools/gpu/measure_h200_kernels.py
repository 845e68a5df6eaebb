"""Kernel timings on one GPU for the kernels vfleet's estimator needs at DeepSeek-class shapes.

What it measures (all with plain PyTorch ops, bf16 data unless said otherwise):
  1. fp8 GEMM through ``torch._scaled_mm`` with per-row scales, and with DeepSeek-style block
     scales (activations 1x128, weights 128x128) where the build accepts them.
  2. bf16 GEMM (``F.linear``) at the same DeepSeek-V3-class projection shapes.
  3. Grouped expert GEMM (``torch._grouped_mm``) for 256 experts x hidden 7168 x width 2048
     (gate+up, then down), sliced for EP8 (32 local experts) and TP8 (width 256).
  4. Causal prefill attention: SDPA at several GQA ratios (d 128), MLA prefill without
     weight absorption (q/k 192, v 128, 128 heads), and a 4096-token sliding window
     (``flex_attention`` with a block mask; an explicit mask on SDPA if flex is unusable).
  5. Decode attention: MLA with weight absorption (128 heads x 576 against a 576-wide latent
     cache) as bmm and as SDPA, and GQA 64q/8kv decode through SDPA.
  6. A DeepSeek sparse-attention-style indexer (score, top-k, gather, attention over the
     selected tokens) as torch reference ops, not DeepGEMM/FlashMLA kernels.

How: random data; CUDA events around a loop of calls after warm-ups; the mean per call. The
loop length adapts so each case runs about ``--target-ms`` (3..100 calls). Small weights and
caches are rotated over several copies so the timings do not come from the L2 cache. Each case
records its shape, dtype, ms, FLOPs and minimal bytes (each input read once, each output written
once) and the TFLOP/s and GB/s those give; a failing case (unsupported, out of memory) records
its error and the run goes on. A time guard stops starting new cases after ``--budget-s``
seconds and lists what it skipped. The JSON is rewritten after every section.

Run:  python3 tools/gpu/measure_h200_kernels.py --out DIR
      python3 tools/gpu/measure_h200_kernels.py --out DIR --device cpu --quick   (tiny sizes,
      to check the script's logic without a GPU; its numbers mean nothing)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

FP8_MAX = 448.0  # largest finite float8_e4m3fn
Timed = tuple[float, int]  # (seconds per call, calls timed)


@dataclass(frozen=True)
class Sizes:
    """The shapes of one run; FULL is the real one, QUICK only checks the logic."""

    gemm_nk: tuple[tuple[int, int], ...]  # (N, K): y[M, N] = x[M, K] @ w[N, K]^T
    gemm_m: tuple[int, ...]
    moe: tuple[tuple[str, int, int, int], ...]  # (label, experts, hidden, expert width)
    moe_tokens: tuple[int, ...]  # rows routed to each expert
    gqa: tuple[tuple[int, int], ...]  # (q heads, kv heads)
    head_dim: int
    prefill_l: tuple[int, ...]
    window: int
    window_heads: tuple[int, int]
    mla_heads: int
    mla_qk: int
    mla_v: int
    mla_latent: int
    mla_rope: int
    decode_b: tuple[int, ...]
    decode_l: tuple[int, ...]
    decode_gqa: tuple[int, int]
    idx_heads: int
    idx_dim: int
    idx_l: tuple[int, ...]
    idx_queries: int
    idx_topk: int


FULL = Sizes(
    gemm_nk=((7168, 2048), (2048, 7168), (24576, 7168), (7168, 16384), (32768, 512)),
    gemm_m=(1, 8, 32, 128, 512, 2048, 8192),
    moe=(
        ("256e_w2048", 256, 7168, 2048),
        ("ep8_32e_w2048", 32, 7168, 2048),
        ("tp8_256e_w256", 256, 7168, 256),
    ),
    moe_tokens=(1, 4, 16, 64, 256, 1024),
    gqa=((64, 8), (32, 4), (16, 16)),
    head_dim=128,
    prefill_l=(1024, 2048, 4096, 8192, 16384, 32768),
    window=4096,
    window_heads=(64, 8),
    mla_heads=128,
    mla_qk=192,
    mla_v=128,
    mla_latent=512,
    mla_rope=64,
    decode_b=(1, 16, 64, 256),
    decode_l=(1024, 4096, 16384),
    decode_gqa=(64, 8),
    idx_heads=64,
    idx_dim=128,
    idx_l=(4096, 16384, 65536),
    idx_queries=2048,
    idx_topk=2048,
)

QUICK = Sizes(
    gemm_nk=((256, 128), (128, 256)),
    gemm_m=(1, 8, 32),
    moe=(("4e_w32", 4, 64, 32), ("4e_w16", 4, 64, 16)),
    moe_tokens=(1, 4),
    gqa=((4, 2), (2, 2)),
    head_dim=32,
    prefill_l=(64, 128),
    window=32,
    window_heads=(4, 2),
    mla_heads=4,
    mla_qk=48,
    mla_v=32,
    mla_latent=32,
    mla_rope=16,
    decode_b=(1, 2),
    decode_l=(64, 128),
    decode_gqa=(4, 2),
    idx_heads=4,
    idx_dim=32,
    idx_l=(256, 512),
    idx_queries=64,
    idx_topk=32,
)


class Bench:
    """Times a callable: warm-ups, one call to size the loop, then the mean over the loop."""

    def __init__(self, device: torch.device, target_s: float) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.target_s = target_s

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def _loop(self, fn: Callable[[int], object], n: int, first: int) -> float:
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for i in range(n):
                fn(first + i)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / n
        t = time.perf_counter()
        for i in range(n):
            fn(first + i)
        return (time.perf_counter() - t) / n

    def time(self, fn: Callable[[int], object], warm: int = 2) -> Timed:
        for i in range(warm):
            fn(i)
        self.sync()
        one = self._loop(fn, 1, warm)
        iters = max(3, min(100, int(self.target_s / max(one, 1e-7))))
        return self._loop(fn, iters, warm + 1), iters


class Run:
    """Collects records by section, guards the time budget, writes the JSON."""

    def __init__(self, out_file: Path, budget_s: float, meta: dict[str, Any]) -> None:
        self.out_file = out_file
        self.t0 = time.monotonic()
        self.budget_s = budget_s
        self.meta = meta
        self.sections: dict[str, list[dict[str, Any]]] = {}
        self.skipped: list[str] = []

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def over(self) -> bool:
        return self.elapsed() > self.budget_s

    def add(self, section: str, rec: dict[str, Any]) -> None:
        self.sections.setdefault(section, []).append(rec)
        print(f"[{self.elapsed():6.1f}s] {section:<18} {describe(rec)}", flush=True)

    def case(
        self,
        section: str,
        params: dict[str, Any],
        body: Callable[[], Timed],
        flops: float | None = None,
        nbytes: float | None = None,
    ) -> dict[str, Any]:
        """Time one case; record its error instead of raising."""
        if self.over():
            self.skipped.append(f"{section} {json.dumps(params)}")
            rec = {**params, "skipped": "time guard"}
            self.sections.setdefault(section, []).append(rec)
            return rec
        rec = dict(params)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                sec, iters = body()
                rec.update(metrics(sec, iters, flops, nbytes))
            except Exception as exc:  # every failure is a result here
                rec["error"] = f"{type(exc).__name__}: {str(exc).strip()[:600]}"
                if isinstance(exc, torch.OutOfMemoryError):
                    free_memory()
        notes = [str(w.message).strip()[:300] for w in caught]
        if notes and "error" in rec:  # the backend's reasons for refusing the case
            rec["warnings"] = notes[:4]
        self.add(section, rec)
        return rec

    def save(self) -> None:
        doc = {
            **self.meta,
            "seconds": round(self.elapsed(), 1),
            "sections": self.sections,
            "skipped_by_time_guard": self.skipped,
        }
        tmp = self.out_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        tmp.replace(self.out_file)


def metrics(sec: float, iters: int, flops: float | None, nbytes: float | None) -> dict[str, Any]:
    rec: dict[str, Any] = {"ms": round(sec * 1e3, 5), "iters": iters}
    if flops is not None:
        rec["flops"] = flops
        rec["tflops"] = round(flops / sec / 1e12, 2)
    if nbytes is not None:
        rec["bytes"] = nbytes
        rec["GBps"] = round(nbytes / sec / 1e9, 1)
    return rec


def describe(rec: dict[str, Any]) -> str:
    keys = [k for k in rec if k not in {"ms", "iters", "flops", "bytes", "tflops", "GBps"}]
    head = " ".join(f"{k}={rec[k]}" for k in keys if k not in {"error", "warnings", "note"})
    if "error" in rec:
        return f"{head} ERROR {rec['error'][:160]}"
    if "ms" not in rec:
        return head
    tail = f"{rec['ms']:.4f} ms"
    if "tflops" in rec:
        tail += f" {rec['tflops']:.1f} TF/s"
    if "GBps" in rec:
        tail += f" {rec['GBps']:.0f} GB/s"
    return f"{head} -> {tail}"


def free_memory() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def copies_for(nbytes: int, l2_bytes: int, cap: int = 16) -> int:
    """How many copies of an input to rotate so repeated calls miss the L2 cache."""
    return max(1, min(cap, math.ceil(4 * l2_bytes / max(nbytes, 1))))


def rnd(*shape: int, dev: torch.device, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.randn(*shape, device=dev, dtype=dtype)


def nbytes_of(*ts: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


@contextlib.contextmanager
def backend(b: SDPBackend | None) -> Iterator[None]:
    if b is None:
        yield
    else:
        with sdpa_kernel([b]):
            yield


# 1. fp8 GEMM ---------------------------------------------------------------------------------


def quant_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row fp8 quantisation: the scale maps each row's max magnitude to FP8_MAX."""
    scale = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / FP8_MAX
    return (x.float() / scale).to(torch.float8_e4m3fn), scale.contiguous()


def block_scales(m: int, n: int, k: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Scales laid out as _scaled_mm wants them for activations 1x128 and weights 128x128.

    Activation scales (M, K/128) must be outer-dim-major (stride (1, M)); weight scales are
    given for b = w^T as (K/128, N/128), the transpose of a row-major (N/128, K/128).
    """
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    sa = (torch.rand(kb, m, device=dev) + 0.5).div_(FP8_MAX).t()
    sb = (torch.rand(nb, kb, device=dev) + 0.5).div_(FP8_MAX).t()
    return sa, sb


def gemm_cost(m: int, n: int, k: int, in_bytes: int) -> tuple[float, float]:
    return 2.0 * m * n * k, float((m * k + n * k) * in_bytes + m * n * 2)


def fp8_shape(
    run: Run, bench: Bench, sz: Sizes, dev: torch.device, l2: int, n: int, k: int
) -> None:
    w = rnd(n, k, dev=dev)
    ws = [quant_rows(w)] * copies_for(n * k, l2)
    ws = [ws[0]] + [(wq.clone(), sb) for wq, sb in ws[1:]]  # distinct copies, shared scales
    for m in sz.gemm_m:
        xq, sa = quant_rows(rnd(m, k, dev=dev))
        flops, nb = gemm_cost(m, n, k, 1)
        p = {"dtype": "fp8_e4m3", "M": m, "N": n, "K": k, "out": "bf16"}
        p["rotated_weights"] = len(ws)

        def rowwise(i: int, xq=xq, sa=sa, fast: bool = False) -> torch.Tensor:
            wq, sb = ws[i % len(ws)]  # sb (N, 1) contiguous; b = wq^T wants it as (1, N)
            return torch._scaled_mm(
                xq,
                wq.t(),
                scale_a=sa,
                scale_b=sb.view(1, -1),
                out_dtype=torch.bfloat16,
                use_fast_accum=fast,
            )

        run.case(
            "gemm_fp8",
            {**p, "scales": "rowwise"},
            lambda f=rowwise: bench.time(f),
            flops,
            nb + 4 * (m + n),
        )
        if m >= 2048:
            run.case(
                "gemm_fp8",
                {**p, "scales": "rowwise", "fast_accum": True},
                lambda f=rowwise: bench.time(lambda i: f(i, fast=True)),
                flops,
                nb,
            )
        sa_b, sb_b = block_scales(m, n, k, dev)

        def blockwise(i: int, xq=xq, sa_b=sa_b, sb_b=sb_b) -> torch.Tensor:
            return torch._scaled_mm(
                xq, ws[i % len(ws)][0].t(), scale_a=sa_b, scale_b=sb_b, out_dtype=torch.bfloat16
            )

        run.case(
            "gemm_fp8",
            {**p, "scales": "block_1x128_act_128x128_weight"},
            lambda f=blockwise: bench.time(f),
            flops,
            nb,
        )


def fp8_section(run: Run, bench: Bench, sz: Sizes, dev: torch.device, l2: int) -> None:
    for n, k in sz.gemm_nk:
        fp8_shape(run, bench, sz, dev, l2, n, k)
        free_memory()


# 2. bf16 GEMM --------------------------------------------------------------------------------


def bf16_shape(
    run: Run, bench: Bench, sz: Sizes, dev: torch.device, l2: int, n: int, k: int
) -> None:
    ws = [rnd(n, k, dev=dev) for _ in range(copies_for(2 * n * k, l2))]
    for m in sz.gemm_m:
        x = rnd(m, k, dev=dev)
        flops, nb = gemm_cost(m, n, k, 2)
        p = {"dtype": "bf16", "M": m, "N": n, "K": k, "rotated_weights": len(ws)}
        run.case(
            "gemm_bf16",
            p,
            lambda x=x: bench.time(lambda i: F.linear(x, ws[i % len(ws)])),
            flops,
            nb,
        )


def bf16_section(run: Run, bench: Bench, sz: Sizes, dev: torch.device, l2: int) -> None:
    for n, k in sz.gemm_nk:
        bf16_shape(run, bench, sz, dev, l2, n, k)
        free_memory()


# 3. grouped expert GEMM ----------------------------------------------------------------------


def grouped(x: torch.Tensor, w_t: torch.Tensor, offs: torch.Tensor, loop: bool) -> torch.Tensor:
    """x[rows, K] times each expert's w_t[e] (K, N) over its slice of rows."""
    if not loop:
        return torch._grouped_mm(x, w_t, offs=offs)
    # Fallback: one mm per expert, slices taken from the host copy of the offsets.
    out = x.new_empty(x.shape[0], w_t.shape[-1])
    start = 0
    for e, end in enumerate(offs.tolist()):
        torch.mm(x[start:end], w_t[e], out=out[start:end])
        start = end
    return out


def moe_config(run: Run, bench: Bench, sz: Sizes, dev: torch.device, cfg: tuple) -> None:
    label, e, h, f = cfg
    # nn.Linear layout (out, in) per expert, as checkpoints store them; passed transposed.
    w13, w2 = rnd(e, 2 * f, h, dev=dev), rnd(e, h, f, dev=dev)
    loop = not hasattr(torch, "_grouped_mm")
    for t in sz.moe_tokens:
        rows = t * e
        offs = torch.arange(t, rows + 1, t, dtype=torch.int32, device=dev)
        x, act = rnd(rows, h, dev=dev), rnd(rows, f, dev=dev)
        for name, inp, w in (("gate_up", x, w13), ("down", act, w2)):
            k_in, n_out = w.shape[2], w.shape[1]
            wbytes = nbytes_of(w)
            p = {
                "config": label,
                "experts": e,
                "hidden": h,
                "width": f,
                "gemm": name,
                "rows_per_expert": t,
                "K": k_in,
                "N": n_out,
                "dtype": "bf16",
                "impl": "mm_loop" if loop else "torch._grouped_mm",
            }
            flops = 2.0 * rows * k_in * n_out
            nb = float(wbytes + 2 * rows * (k_in + n_out))

            def body(inp=inp, w=w, offs=offs, wbytes=wbytes) -> Timed:
                sec, iters = bench.time(lambda i: grouped(inp, w.transpose(1, 2), offs, loop))
                return sec, iters

            rec = run.case("grouped_gemm", p, body, flops, nb)
            if "ms" in rec:
                rec["weight_GBps"] = round(wbytes / (rec["ms"] / 1e3) / 1e9, 1)
            elif "error" in rec and not loop:  # say why, then time the labelled fallback
                run.case(
                    "grouped_gemm",
                    {**p, "impl": "mm_loop"},
                    lambda inp=inp, w=w, offs=offs: bench.time(
                        lambda i: grouped(inp, w.transpose(1, 2), offs, True)
                    ),
                    flops,
                    nb,
                )
        del x, act
    del w13, w2
    free_memory()


def moe_section(run: Run, bench: Bench, sz: Sizes, dev: torch.device, l2: int) -> None:
    for cfg in sz.moe:
        moe_config(run, bench, sz, dev, cfg)


# 4. prefill attention ------------------------------------------------------------------------


def causal_pairs(length: int, window: int | None = None) -> int:
    """(query, key) pairs a causal mask keeps, optionally limited to the last `window` keys."""
    if window is None or window >= length:
        return length * (length + 1) // 2
    return window * (window + 1) // 2 + (length - window) * window


def sdpa(q, k, v, **kw) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, **kw)


def gqa_prefill(run: Run, bench: Bench, sz: Sizes, dev: torch.device) -> None:
    d = sz.head_dim
    for hq, hkv in sz.gqa:
        for length in sz.prefill_l:
            q, k, v = (
                rnd(1, hq, length, d, dev=dev),
                rnd(1, hkv, length, d, dev=dev),
                rnd(1, hkv, length, d, dev=dev),
            )
            flops = 4.0 * hq * d * causal_pairs(length)
            nb = float(nbytes_of(q, k, v) + nbytes_of(q))
            for name, b in (
                ("flash", SDPBackend.FLASH_ATTENTION),
                ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ):
                p = {
                    "kind": "gqa_causal",
                    "q_heads": hq,
                    "kv_heads": hkv,
                    "head_dim": d,
                    "L": length,
                    "backend": name,
                    "dtype": "bf16",
                }

                def body(q=q, k=k, v=v, b=b, gqa=hq != hkv) -> Timed:
                    with backend(b):
                        return bench.time(lambda i: sdpa(q, k, v, is_causal=True, enable_gqa=gqa))

                run.case("prefill_attention", p, body, flops, nb)
            del q, k, v
        free_memory()


def mla_prefill(run: Run, bench: Bench, sz: Sizes, dev: torch.device) -> None:
    h, dqk, dv = sz.mla_heads, sz.mla_qk, sz.mla_v
    for length in sz.prefill_l:
        q, k, v = (
            rnd(1, h, length, dqk, dev=dev),
            rnd(1, h, length, dqk, dev=dev),
            rnd(1, h, length, dv, dev=dev),
        )
        v_pad = F.pad(v, (0, dqk - dv))  # padded once, outside the timing
        flops = 2.0 * h * (dqk + dv) * causal_pairs(length)  # useful work, native dims
        nb = float(nbytes_of(q, k, v) + nbytes_of(v))
        variants = (
            ("flash", SDPBackend.FLASH_ATTENTION, v, "native dims"),
            (
                "flash_pad_v",
                SDPBackend.FLASH_ATTENTION,
                v_pad,
                f"v zero-padded to {dqk}, output sliced to {dv}; pad not timed",
            ),
            ("cudnn", SDPBackend.CUDNN_ATTENTION, v, "native dims"),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION, v, "native dims"),
        )
        for name, b, vv, how in variants:
            p = {
                "kind": "mla_causal_no_absorb",
                "heads": h,
                "qk_dim": dqk,
                "v_dim": dv,
                "L": length,
                "backend": name,
                "how": how,
                "dtype": "bf16",
            }

            def body(q=q, k=k, vv=vv, b=b) -> Timed:
                with backend(b):
                    return bench.time(lambda i: sdpa(q, k, vv, is_causal=True)[..., :dv])

            run.case("prefill_attention", p, body, flops, nb)
        del q, k, v, v_pad
        free_memory()


def window_mask_sdpa(q, k, v, window: int) -> Callable[[int], torch.Tensor]:
    """Fallback: an explicit boolean band mask on SDPA's memory-efficient backend."""
    length = q.shape[2]
    i = torch.arange(length, device=q.device)
    keep = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < window)
    rep = q.shape[1] // k.shape[1]
    k2, v2 = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)  # efficient has no GQA

    def fn(_: int) -> torch.Tensor:
        with backend(SDPBackend.EFFICIENT_ATTENTION):
            return sdpa(q, k2, v2, attn_mask=keep)

    return fn


def flex_fn(compile_flex: bool) -> Callable[..., torch.Tensor]:
    from torch.nn.attention.flex_attention import flex_attention

    if compile_flex:  # eager flex_attention materialises the scores; only compiled is real
        return torch.compile(flex_attention, dynamic=True)
    return flex_attention


def window_prefill(
    run: Run, bench: Bench, sz: Sizes, dev: torch.device, compile_flex: bool
) -> None:
    hq, hkv = sz.window_heads
    d, w = sz.head_dim, sz.window
    try:
        from torch.nn.attention.flex_attention import create_block_mask

        flex = flex_fn(compile_flex)
        flex_error = None
    except Exception as exc:  # flex missing or unusable: use the fallback
        flex_error = f"{type(exc).__name__}: {exc}"[:400]

    def window_mod(b, h, qi, ki):
        return (qi >= ki) & (qi - ki < w)

    def causal_mod(b, h, qi, ki):
        return qi >= ki

    for length in sz.prefill_l:
        q, k, v = (
            rnd(1, hq, length, d, dev=dev),
            rnd(1, hkv, length, d, dev=dev),
            rnd(1, hkv, length, d, dev=dev),
        )
        nb = float(nbytes_of(q, k, v) + nbytes_of(q))
        for mask_name, mod, win in (("window", window_mod, w), ("causal", causal_mod, None)):
            flops = 4.0 * hq * d * causal_pairs(length, win)
            p = {
                "kind": f"flex_{mask_name}",
                "q_heads": hq,
                "kv_heads": hkv,
                "head_dim": d,
                "L": length,
                "window": win,
                "dtype": "bf16",
                "impl": "flex_attention" + (" (torch.compile)" if compile_flex else " (eager)"),
            }

            info: dict[str, float] = {}

            def body(q=q, k=k, v=v, mod=mod, info=info, length=length) -> Timed:
                if flex_error:
                    raise RuntimeError(flex_error)
                t0 = time.perf_counter()
                bm = create_block_mask(mod, None, None, length, length, device=dev)
                bench.sync()
                info["block_mask_s"] = round(time.perf_counter() - t0, 3)
                t0 = time.perf_counter()
                flex(q, k, v, block_mask=bm, enable_gqa=True)  # compiles on first use
                bench.sync()
                info["first_call_s"] = round(time.perf_counter() - t0, 3)
                return bench.time(lambda i: flex(q, k, v, block_mask=bm, enable_gqa=True))

            rec = run.case("prefill_attention", p, body, flops, nb)
            rec.update(info)
            if "error" in rec and win is not None:
                p2 = {**p, "kind": "sdpa_window_mask", "impl": "sdpa efficient, explicit mask"}
                run.case(
                    "prefill_attention",
                    p2,
                    lambda q=q, k=k, v=v: bench.time(window_mask_sdpa(q, k, v, w)),
                    flops,
                    nb,
                )
        del q, k, v
        free_memory()


# 5. decode attention -------------------------------------------------------------------------


def mla_decode_case(
    run: Run, bench: Bench, sz: Sizes, dev: torch.device, l2: int, b: int, length: int
) -> None:
    h, dl = sz.mla_heads, sz.mla_latent + sz.mla_rope
    scale = 1.0 / math.sqrt(sz.mla_qk)  # DeepSeek keeps the softmax scale of the 192-wide q.k
    q = rnd(b, h, dl, dev=dev)
    caches = [rnd(b, length, dl, dev=dev) for _ in range(copies_for(2 * b * length * dl, l2, 64))]
    flops = 2.0 * b * h * length * (dl + sz.mla_latent)
    nb = float(nbytes_of(q, caches[0]) + 2 * b * h * sz.mla_latent)
    p = {
        "kind": "mla_absorbed",
        "B": b,
        "context": length,
        "heads": h,
        "q_dim": dl,
        "latent": sz.mla_latent,
        "dtype": "bf16",
        "rotated_caches": len(caches),
    }

    def by_bmm(i: int) -> torch.Tensor:
        c = caches[i % len(caches)]
        s = torch.bmm(q, c.transpose(1, 2)).mul_(scale)  # (B, heads, context) materialised
        return torch.bmm(torch.softmax(s, dim=-1), c[..., : sz.mla_latent])

    def by_sdpa(i: int) -> torch.Tensor:
        # Heads fold into the query axis: one shared latent "kv head" per sequence.
        c = caches[i % len(caches)].unsqueeze(1)
        return sdpa(q.unsqueeze(1), c, c[..., : sz.mla_latent], scale=scale)

    run.case(
        "decode_attention", {**p, "impl": "bmm+softmax+bmm"}, lambda: bench.time(by_bmm), flops, nb
    )

    def sdpa_body() -> Timed:
        with backend(SDPBackend.EFFICIENT_ATTENTION):
            return bench.time(by_sdpa)

    run.case(
        "decode_attention",
        {**p, "impl": "sdpa efficient, heads folded into queries"},
        sdpa_body,
        flops,
        nb,
    )


def gqa_decode_case(
    run: Run, bench: Bench, sz: Sizes, dev: torch.device, l2: int, b: int, length: int
) -> None:
    hq, hkv = sz.decode_gqa
    d = sz.head_dim
    q = rnd(b, hq, 1, d, dev=dev)
    kvs = [
        (rnd(b, hkv, length, d, dev=dev), rnd(b, hkv, length, d, dev=dev))
        for _ in range(copies_for(4 * b * hkv * length * d, l2, 64))
    ]
    flops = 4.0 * b * hq * length * d
    nb = float(nbytes_of(q, *kvs[0]) + nbytes_of(q))
    p = {
        "kind": "gqa",
        "B": b,
        "context": length,
        "q_heads": hq,
        "kv_heads": hkv,
        "head_dim": d,
        "dtype": "bf16",
        "rotated_caches": len(kvs),
    }
    run.case(
        "decode_attention",
        {**p, "impl": "sdpa enable_gqa"},
        lambda: bench.time(lambda i: sdpa(q, *kvs[i % len(kvs)], enable_gqa=True)),
        flops,
        nb,
    )
    # The q heads sharing one kv head become that head's query rows (how decode kernels do GQA).
    qf = q.view(b, hkv, hq // hkv, d)
    run.case(
        "decode_attention",
        {**p, "impl": "sdpa, q heads folded per kv head"},
        lambda: bench.time(lambda i: sdpa(qf, *kvs[i % len(kvs)])),
        flops,
        nb,
    )


def decode_section(run: Run, bench: Bench, sz: Sizes, dev: torch.device, l2: int) -> None:
    for b in sz.decode_b:
        for length in sz.decode_l:
            mla_decode_case(run, bench, sz, dev, l2, b, length)
            gqa_decode_case(run, bench, sz, dev, l2, b, length)
            free_memory()


# 6. sparse-attention indexer -----------------------------------------------------------------


def indexer_case(run: Run, bench: Bench, sz: Sizes, dev: torch.device, length: int) -> None:
    t, h, d, topk = sz.idx_queries, sz.idx_heads, sz.idx_dim, min(sz.idx_topk, length)
    dl, lat, mh = sz.mla_latent + sz.mla_rope, sz.mla_latent, sz.mla_heads
    q_idx, w_idx, k_idx = rnd(t * h, d, dev=dev), rnd(t, 1, h, dev=dev), rnd(length, d, dev=dev)
    kv, q_att = rnd(length, dl, dev=dev), rnd(t, mh, dl, dev=dev)
    pos = torch.arange(length - t, length, device=dev)  # the chunk is the context's last t tokens
    future = torch.arange(length, device=dev)[None, :] > pos[:, None]
    scale = 1.0 / math.sqrt(sz.mla_qk)

    def score(_: int = 0) -> torch.Tensor:
        logits = (q_idx @ k_idx.t()).relu_().view(t, h, length)  # (t*h, L) materialised
        s = torch.bmm(w_idx, logits).view(t, length)  # weighted sum over indexer heads
        return s.masked_fill_(future, float("-inf"))

    s = score()
    idx = s.topk(topk, dim=-1).indices
    sel = kv.index_select(0, idx.reshape(-1)).view(t, topk, dl)

    def attend(sel_: torch.Tensor) -> torch.Tensor:
        k_ = sel_.unsqueeze(1)
        with backend(SDPBackend.EFFICIENT_ATTENTION):
            return sdpa(q_att.unsqueeze(1), k_, k_[..., :lat], scale=scale)

    def pipeline(_: int) -> torch.Tensor:
        i_ = score().topk(topk, dim=-1).indices
        return attend(kv.index_select(0, i_.reshape(-1)).view(t, topk, dl))

    base = {
        "L": length,
        "queries": t,
        "idx_heads": h,
        "idx_dim": d,
        "topk": topk,
        "dtype": "bf16",
        "impl": "torch reference ops, not DeepGEMM/FlashMLA kernels",
    }
    score_flops = 2.0 * t * h * length * (d + 1)
    att_flops = 2.0 * t * mh * topk * (dl + lat)
    steps = (
        (
            "score",
            lambda i: score(),
            score_flops,
            float(nbytes_of(q_idx, w_idx, k_idx) + 2 * t * length),
        ),
        ("topk", lambda i: s.topk(topk, dim=-1), None, float(2 * t * length + 8 * t * topk)),
        (
            "gather",
            lambda i: kv.index_select(0, idx.reshape(-1)),
            None,
            float(2 * 2 * t * topk * dl),
        ),
        (
            "attend_selected",
            lambda i: attend(sel),
            att_flops,
            float(nbytes_of(q_att, sel) + 2 * t * mh * lat),
        ),
        ("all", pipeline, score_flops + att_flops, None),
    )
    for step, fn, flops, nb in steps:
        run.case("sparse_indexer", {**base, "step": step}, lambda fn=fn: bench.time(fn), flops, nb)


def indexer_section(run: Run, bench: Bench, sz: Sizes, dev: torch.device, l2: int) -> None:
    for length in sz.idx_l:
        try:
            indexer_case(run, bench, sz, dev, length)
        except Exception as exc:  # setup out of memory, say
            run.add("sparse_indexer", {"L": length, "error": f"{type(exc).__name__}: {exc}"[:600]})
        free_memory()


# the run ---------------------------------------------------------------------------------------


def smi() -> str | None:
    """Clocks, power and temperature as nvidia-smi reports them (read only)."""
    fields = "name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw,"
    fields += "power.limit,temperature.gpu,pstate"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        return out.stdout.strip() or out.stderr.strip()[:300]
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unavailable: {exc}"[:300]


def device_props(dev: torch.device) -> dict[str, Any]:
    if dev.type != "cuda":
        return {"name": platform.processor() or "cpu"}
    props = torch.cuda.get_device_properties(dev)
    out: dict[str, Any] = {}
    for name in dir(props):
        if name.startswith("_"):
            continue
        val = getattr(props, name)
        if callable(val):
            continue
        out[name] = val if isinstance(val, int | float | str | bool) else str(val)
    return out


def environment(dev: torch.device, script: Path) -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if dev.type == "cuda" else None,
        "platform": platform.platform(),
        "device": device_props(dev),
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if dev.type == "cuda":
        env["nvidia_smi_before"] = smi()
    return {
        "script": {
            "path": "tools/gpu/measure_h200_kernels.py",
            "sha256": hashlib.sha256(script.read_bytes()).hexdigest(),
        },
        "environment": env,
    }


SECTIONS: tuple[tuple[str, Callable[..., None]], ...] = (
    ("gemm_fp8", fp8_section),
    ("gemm_bf16", bf16_section),
    ("grouped_gemm", moe_section),
    ("prefill_gqa", lambda run, bench, sz, dev, l2: gqa_prefill(run, bench, sz, dev)),
    ("prefill_mla", lambda run, bench, sz, dev, l2: mla_prefill(run, bench, sz, dev)),
    ("decode", decode_section),
    ("indexer", indexer_section),
)


def summary(run: Run) -> None:
    """Best TFLOP/s and GB/s per kind of case, so the end of the log carries the headlines."""
    best: dict[str, tuple[float, float, int]] = {}
    for section, recs in run.sections.items():
        for r in recs:
            if "ms" not in r:
                continue
            label = " ".join(
                str(r[k])
                for k in ("dtype", "scales", "kind", "impl", "backend", "config", "gemm", "step")
                if k in r
            )
            key = f"{section}: {label}"
            tf, gb, n = best.get(key, (0.0, 0.0, 0))
            best[key] = (max(tf, r.get("tflops", 0.0)), max(gb, r.get("GBps", 0.0)), n + 1)
    print("summary (best over each kind's cases):", flush=True)
    for key, (tf, gb, n) in best.items():
        print(f"  {key:<78} {tf:8.1f} TF/s {gb:8.0f} GB/s  ({n} cases)", flush=True)


def out_name(dev: torch.device) -> str:
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    slug = gpu.lower().replace("nvidia", "").strip().split()[0] if gpu else "gpu"
    major_minor = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    return f"{slug}-kernels-extra-torch{major_minor}.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="folder for the JSON")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: checks the logic only")
    ap.add_argument("--budget-s", type=float, default=360.0, help="start no case after this")
    ap.add_argument("--target-ms", type=float, default=50.0, help="timed loop length per case")
    ap.add_argument("--no-compile", action="store_true", help="run flex_attention eagerly")
    ap.add_argument("--only", default="", help="comma-separated section names to run")
    args = ap.parse_args(argv)

    dev = torch.device(args.device)
    sz = QUICK if args.quick else FULL
    torch.manual_seed(0)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = environment(dev, Path(__file__).resolve())
    meta["started_utc"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta["sizes"] = asdict(sz)
    meta["method"] = (
        "random data; CUDA events around a loop of calls after 2 warm-ups, mean per call; loop "
        f"sized to about {args.target_ms:g} ms (3..100 calls); small weights/caches rotated "
        "over copies so repeats miss L2; flops = useful multiply-adds x2 (causal: kept pairs "
        "only); bytes = each input read once plus each output written once; default clocks"
    )
    meta["quick"] = args.quick
    run = Run(args.out / out_name(dev), args.budget_s, meta)
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size if dev.type == "cuda" else 1 << 20
    bench = Bench(dev, args.target_ms / 1e3)
    only = {s for s in args.only.split(",") if s}
    compile_flex = dev.type == "cuda" and not args.no_compile
    sections = (
        *SECTIONS,
        ("prefill_window", lambda r, b, s, d, l2_: window_prefill(r, b, s, d, compile_flex)),
    )  # last: its compile time is the least predictable part
    with torch.no_grad():
        for name, fn in sections:
            if only and name not in only:
                continue
            # The flex section compiles first: start it only with a margin left in the budget.
            margin = 90.0 if name == "prefill_window" and compile_flex else 0.0
            if run.elapsed() > run.budget_s - margin:
                run.skipped.append(f"section {name}")
                print(f"time guard: skipping section {name}", flush=True)
                continue
            fn(run, bench, sz, dev, l2)
            free_memory()
            run.save()
    if dev.type == "cuda":
        run.meta["environment"]["nvidia_smi_after"] = smi()
    run.save()
    summary(run)
    n_err = sum("error" in r for recs in run.sections.values() for r in recs)
    print(
        f"wrote {run.out_file} in {run.elapsed():.0f} s; {n_err} cases failed, "
        f"{len(run.skipped)} skipped",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
