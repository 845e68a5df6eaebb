"""vLLM version parsing and the per-release behaviour that moves the KV budget.

Boundaries were read off the released wheels (docs/references.md#budget-history,
#capacity-log-lines, #batch-defaults). Releases between two listed ones take the behaviour of
the older one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vfleet.errors import UserError

OLDEST_SUPPORTED = (0, 5, 0)  # V0-era logs and benchmarks still parse; 0.8+ is deployable
NEWEST_KNOWN = (0, 33, 0)
DEFAULT_VERSION = "0.33.0"

# A release as vLLM and pip write it: 0.19.1, v0.10.1.1, 0.11 or 0.8.5.post1, 0.32.0+cpu,
# 0.11.1rc2.dev45+g1a2b3c. ASCII digits only, nothing around it (no space, no newline).
_VERSION_RE = re.compile(
    r"v?([0-9]{1,4})\.([0-9]{1,4})(?:\.([0-9]{1,4}))?(?:\.[0-9]{1,4})?"
    r"(?:(?:[.+-]?[A-Za-z]|[+-][0-9])[0-9A-Za-z.+_-]{0,40})?"
)


def parse_version(text: str | None) -> tuple[int, int, int]:
    """Parse '0.19.0', 'v0.10.1.1', '0.32.0+cpu' or '0.11' into a comparable triple."""
    if text is None or text == "":
        text = DEFAULT_VERSION
    match = _VERSION_RE.fullmatch(str(text))
    if not match:
        shown = repr(str(text)[:40]) + ("..." if len(str(text)) > 40 else "")
        raise UserError(
            f"vLLM version {shown} is not a version number: pass it like --vllm-version 0.19.1"
        )
    major, minor, patch = (int(g) if g else 0 for g in match.groups())
    triple = (major, minor, patch)
    if triple < OLDEST_SUPPORTED or triple[:2] > NEWEST_KNOWN[:2]:
        raise UserError(
            f"vLLM {text} is outside the supported range 0.5 to 0.33: "
            "pick a release in that range with --vllm-version"
        )
    return triple


@dataclass(frozen=True)
class VersionTraits:
    """What a vLLM release does that changes the numbers."""

    version: tuple[int, int, int]
    default_gpu_memory_utilization: float
    # <=0.10.2 took the memory snapshot before NCCL init, so NCCL buffers were charged.
    nccl_inside_budget: bool
    # From 0.20.0 the CUDA-graph estimate is subtracted before the KV cache is allocated.
    cudagraph_subtracted: bool
    # From 0.20.2 "GPU KV cache size" = int(max_concurrency x max_model_len) (group aware);
    # before, num_blocks // num_groups x block_size.
    tokens_group_aware: bool
    # 0.11-0.20.0 multiply the printed tokens by the context-parallel size explicitly.
    v0_engine: bool
    # Async scheduling on by default (VllmConfig, 0.14.0 onwards).
    async_scheduling: bool = False

    @property
    def label(self) -> str:
        return ".".join(str(p) for p in self.version)


def traits(version: str | None) -> VersionTraits:
    v = parse_version(version)
    return VersionTraits(
        version=v,
        default_gpu_memory_utilization=0.92 if v >= (0, 20, 0) else 0.90,
        nccl_inside_budget=v < (0, 11, 0),
        cudagraph_subtracted=v >= (0, 20, 0),
        tokens_group_aware=v >= (0, 20, 2),
        v0_engine=v < (0, 8, 0),
        async_scheduling=v >= (0, 14, 0),
    )


def mla_forces_whole_prompts(version: tuple[int, int, int]) -> bool:
    """0.7.1 to 0.7.x turn chunked prefill (and prefix caching) off for an MLA model,
    whatever was asked (vllm-project/vllm#12642, VllmConfig.__post_init__: "MLA is enabled;
    forcing chunked prefill and prefix caching to be disabled."); V1 (0.8+) chunks MLA
    prompts. Without chunks, one V0 step prefills every waiting prompt that fits the batch,
    so a closed-loop client's requests start, and finish, in waves."""
    return (0, 7, 1) <= version < (0, 8, 0)


def batch_defaults(
    version: tuple[int, int, int], gpu_memory_gib: float, gpu_name: str, max_model_len: int
) -> tuple[int, int]:
    """`vllm serve` defaults for (max_num_seqs, max_num_batched_tokens) on this device.

    vLLM decides them from the device memory seen by the process that builds the config
    (EngineArgs.get_batch_defaults); A100 stays in the small tier on purpose.
    """
    name = gpu_name.lower()
    if version < (0, 8, 0):
        # V0: 256 sequences; chunked prefill only auto-on past 32K context, and without it
        # a batch must hold a whole prompt.
        return 256, 2048 if max_model_len > 32768 else max(max_model_len, 2048)
    big = gpu_memory_gib >= 70 and "a100" not in name
    if version >= (0, 30, 0) and gpu_memory_gib >= 160:
        return 1024, 16384
    if version < (0, 9, 0):
        big = gpu_memory_gib >= 70
    if big:
        return 1024, 8192
    return 256, 2048
