"""Start-up failures read from an engine's log: a max-model-len the KV cannot hold, a KV
cache too small for one request, out of memory while profiling or allocating blocks."""

from __future__ import annotations

import re

from vfleet.observe.findings import Diagnosis, EngineConfig

_NUM = r"(\d{1,12}(?:\.\d{1,12})?)"
_FREE_MEM = re.compile(
    rf"Free memory on device.{{0,200}}?\({_NUM}/{_NUM} GiB\).{{0,400}}?utilization "
    rf"\({_NUM}, {_NUM} GiB\)"
)
_TOO_LONG = re.compile(
    r"max seq len \((\d{1,18})\) is larger than the maximum number of tokens "
    r"that can be stored in KV cache \((\d{1,18})\)"
)
_NEEDS_KV = re.compile(
    rf"{_NUM} GiB KV cache is needed.{{0,2000}}?available KV cache memory \({_NUM} GiB\)",
    re.S,
)
_OOM = re.compile(r"(CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError)")
_NO_BLOCKS = re.compile(r"No available memory for the cache blocks")


def log_diagnoses(log: str, cfg: EngineConfig) -> list[Diagnosis]:
    found: list[Diagnosis] = []
    m = _FREE_MEM.search(log)
    if m and float(m.group(2)) > 0:
        free, total, util, want = (float(x) for x in m.groups())
        target = max(0.05, round(free / total - 0.01, 2))
        found.append(
            Diagnosis(
                "oom_at_start",
                "Start-up refused: other processes hold GPU memory",
                [
                    f"free {free:.2f} of {total:.2f} GiB at start-up, utilization {util} wants "
                    f"{want:.2f} GiB"
                ],
                f"lower --gpu-memory-utilization from {util} to {target} (what is free), or free "
                "the GPU from the other process",
            )
        )
    if m := _TOO_LONG.search(log):
        want, have = int(m.group(1)), int(m.group(2))
        found.append(
            Diagnosis(
                "kv_too_small",
                "Start-up refused: one request at max-model-len does not fit the KV",
                [f"max-model-len {want} tokens, KV cache holds {have} tokens"],
                f"lower --max-model-len from {want} to at most {have}, or raise "
                "--gpu-memory-utilization / use --kv-cache-dtype fp8 / add TP or PP",
            )
        )
    elif (m := _NEEDS_KV.search(log)) and float(m.group(1)) > 0:
        need, free = float(m.group(1)), float(m.group(2))
        found.append(
            Diagnosis(
                "kv_too_small",
                "Start-up refused: one request at max-model-len does not fit the KV",
                [f"needs {need:.2f} GiB of KV for one request, {free:.2f} GiB available"],
                f"lower --max-model-len by {(1 - free / need) * 100:.0f}% or more, or raise "
                "--gpu-memory-utilization",
            )
        )
    if _OOM.search(log) or _NO_BLOCKS.search(log):
        mnbt = cfg.max_num_batched_tokens
        knob = (
            f"lower --max-num-batched-tokens from {mnbt} to {max(512, mnbt // 2)}"
            if mnbt
            else "lower --max-num-batched-tokens (the profile run's activation peak)"
        )
        configured = cfg.gpu_memory_utilization
        found.append(
            Diagnosis(
                "oom_at_start",
                "Out of memory while profiling or allocating the KV cache",
                ["the log reports a CUDA/torch out-of-memory error or no memory for KV blocks"],
                knob
                + (
                    f", or lower --gpu-memory-utilization from {configured} to "
                    f"{configured - 0.03:.2f}"
                    if configured
                    else ""
                ),
                [
                    "`vfleet budget` with the same flags shows which term (weights, activation, "
                    "non-torch, CUDA graphs) takes the memory"
                ],
            )
        )
    return found


# ---- metric signals ----------------------------------------------------------------------
