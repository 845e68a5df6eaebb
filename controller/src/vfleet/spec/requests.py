"""The flags of `vfleet budget` and `vfleet plan` as typed models: one field per flag.

vfleet.cli.from_model turns each model into its parser (field docstring -> help, default
-> default, bool -> store_true, Literal -> choices). Each bounded field carries its rule
from vfleet.spec.flags as a validator, so the rule lives here once: argparse runs it on the
text (and says "argument --tp: ..."), the model runs it again on the parsed values.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from vfleet.inputs.base import StrictModel
from vfleet.spec import flags

# Kept equal to vfleet.budget.speculative.METHODS and MAX_TOKENS (cli/budget.py checks):
# spec/ sits below budget/ and does not import it.
SpeculativeMethod = Literal["mtp", "eagle", "eagle3", "ngram"]
MAX_SPECULATIVE_TOKENS = 16


@dataclass(frozen=True)
class Metavar:
    """How --help names a flag's value (the CLI generator reads `metavar`; pydantic ignores it)."""

    metavar: str


def rule(parse: Callable[[str], Any]) -> BeforeValidator:
    """A vfleet.spec.flags parser as a field validator.

    It takes the text from the command line, or a value already parsed (a model built from
    a namespace), which it checks again through its text so both paths share one rule.
    """

    def check(value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, str | int | float | Path):
            return value  # left to the field's strict type, which refuses it
        try:
            return parse(value if isinstance(value, str) else str(value))
        except argparse.ArgumentTypeError as exc:
            raise ValueError(str(exc)) from None

    return BeforeValidator(check)


Parallel = Annotated[int, rule(flags.count(1, flags.MAX_PARALLEL))]
Tokens = Annotated[int, rule(flags.count(1, flags.MAX_TOKENS, "a token count"))]
Seqs = Annotated[int, rule(flags.count(1, flags.MAX_SEQS))]
KvBytes = Annotated[int, rule(flags.count(1, 1 << 50))]
SpecTokens = Annotated[int, rule(flags.count(1, MAX_SPECULATIVE_TOKENS))]
Fraction = Annotated[float, rule(flags.fraction)]
GpuGib = Annotated[float, rule(flags.number(0, 4096, example="80"))]
OffloadGib = Annotated[float, rule(flags.number(0, 1 << 20, lo_open=False, example="0"))]
KvDtype = Annotated[str, rule(flags.kv_dtype)]
BlockSize = Annotated[int, rule(flags.block_size)]
FilePath = Annotated[Path, rule(flags.path)]
PngPath = Annotated[Path, rule(flags.png_path)]
Sweep = Annotated[list[float], rule(flags.sweep)]


class SpeculativeFlags(StrictModel):
    """The speculative-decoding choice `budget` and `plan` share (see budget.speculative)."""

    speculative_method: SpeculativeMethod | None = None
    """speculative decoding: mtp (the model's own MTP layers), eagle/eagle3 (a draft head,
    --draft-model) or ngram (prompt lookup)"""
    num_speculative_tokens: SpecTokens | None = None
    """drafted tokens per step (mtp defaults to the model's MTP layer count)"""
    draft_model: str | None = None
    """EAGLE draft head: catalog id, folder or config.json"""


class BudgetFlags(SpeculativeFlags):
    """`vfleet budget`: one model on one GPU type at one layout."""

    model: str
    """catalog id, model folder or config.json"""
    gpu: str
    """catalog name or the name nvidia-smi prints"""
    gpu_memory_gib: GpuGib | None = None
    """override the GPU's memory (GiB)"""
    tp: Parallel = 1
    """tensor parallel size"""
    pp: Parallel = 1
    """pipeline parallel size"""
    dp: Parallel = 1
    """data parallel size"""
    enable_expert_parallel: bool = False
    """shard MoE experts across the TP x DP ranks"""
    dcp: Parallel = 1
    """decode context parallel size"""
    gpu_memory_utilization: Fraction | None = None
    """the share of each GPU's memory vLLM may use (default: the release's own)"""
    max_model_len: Tokens | None = None
    """tokens per sequence; past the model's window only with
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, as vLLM itself"""
    max_num_batched_tokens: Tokens | None = None
    """tokens one scheduler step may hold"""
    max_num_seqs: Seqs | None = None
    """sequences one engine runs at once (default: the release's own)"""
    kv_cache_dtype: KvDtype = "auto"
    """KV cache dtype"""
    kv_cache_memory_bytes: KvBytes | None = None
    """pin the KV size per GPU"""
    dtype: str = "auto"
    """weights and activations dtype, as vLLM's --dtype"""
    quantization: str | None = None
    """runtime quantization, e.g. fp8"""
    block_size: BlockSize | None = None
    """KV block size in tokens"""
    enforce_eager: bool = False
    """no CUDA graphs (and none of their memory)"""
    cpu_offload_gb: OffloadGib = 0.0
    """weights offloaded to CPU memory per GPU (GiB)"""
    mean_context_len: Tokens | None = None
    """mean context for the recommended max-num-seqs (default min(len, 4096))"""
    vllm_version: str | None = None
    """target vLLM release (default 0.33.0)"""
    sweep_gpu_memory_utilization: Annotated[Sweep | None, Metavar("START:STOP:STEP")] = None
    """also tabulate the concurrency ceiling over START:STOP:STEP of utilization"""
    plot: PngPath | None = None
    """write the sweep as a PNG"""
    as_json: bool = Field(False, alias="json")
    """print one JSON object"""


class PlanFlags(SpeculativeFlags):
    """`vfleet plan`: the best layouts for one model on one cluster."""

    cluster: FilePath
    """cluster YAML or a directory of probe facts"""
    model: str
    """catalog id, model folder or config.json"""
    workload: str = "chat"
    """chat | rag | batch | FILE.yaml"""
    vllm_version: str | None = None
    """target vLLM release (default: the probed one, else 0.33.0)"""
    gpu_memory_utilization: Fraction | None = None
    """the share of each GPU's memory vLLM may use (default: the release's own)"""
    kv_cache_dtype: KvDtype | None = None
    """override the planner's choice (auto|fp8)"""
    layout: str | None = None
    """evaluate only this layout, e.g. 'TP8 PP2 EP'"""
    allow_partial_facts: bool = False
    """plan even if a host's probe failed or measured nothing"""
    calibration: FilePath | None = None
    """a cluster's calibration.json from `vfleet calibrate` (default: the bundled fit)"""
    out: FilePath | None = None
    """also write the plan JSON here"""
    as_json: bool = Field(False, alias="json")
    """print one JSON object"""
