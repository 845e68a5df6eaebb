"""What doctor works from and what it concludes: the engine's configuration (read from its
start-up log or from the plan) and one diagnosis with its evidence and first knob."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field


@dataclass
class EngineConfig:
    """What the engine was started with, from the plan or its own start-up log."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    source: str = "unknown"


@dataclass
class Diagnosis:
    id: str
    title: str
    evidence: list[str]
    first_knob: str
    more: list[str] = field(default_factory=list)


_NON_DEFAULT = re.compile(r"non-default args: (\{.{0,20000}\})")
_COUNTS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len")


def _typed(name: str, value: object) -> bool:
    """Whether `value` is what the engine could have been started with for `name`."""
    if name == "enable_chunked_prefill":
        return isinstance(value, bool)
    if name == "gpu_memory_utilization":
        return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 40


def config_from_log(log: str) -> EngineConfig:
    """vLLM (0.9+) logs the arguments that differ from defaults at start-up. A line that is
    not a dict literal, or a value of the wrong type, is not that line: skipped."""
    cfg = EngineConfig()
    for match in _NON_DEFAULT.finditer(log):
        try:
            args = ast.literal_eval(match.group(1))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if not isinstance(args, dict):
            continue
        for name in (*_COUNTS, "enable_chunked_prefill", "gpu_memory_utilization"):
            if name in args and _typed(name, args[name]):
                setattr(cfg, name, args[name])
        cfg.source = "the engine's start-up log"
    return cfg


def merge(primary: EngineConfig, fallback: EngineConfig) -> EngineConfig:
    out = EngineConfig(source=primary.source if primary.source != "unknown" else fallback.source)
    for name in (
        "max_num_seqs",
        "max_num_batched_tokens",
        "enable_chunked_prefill",
        "gpu_memory_utilization",
        "max_model_len",
    ):
        value = getattr(primary, name)
        setattr(out, name, value if value is not None else getattr(fallback, name))
    return out
