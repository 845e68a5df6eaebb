"""The flags of the commands that plan and diagnose (budget, plan, estimate, doctor) as
typed models: one field per flag.

vfleet.cli.from_model turns each model into its parser, as vLLM's arg_utils builds
`vllm serve` from its config classes: the field's docstring is the help, its default the
default (and the help shows it), a bool a switch, a Literal the choices, a list a repeated
flag. Each bounded field carries its rule from vfleet.documents.flag_types (flags.Rule), so the rule
lives here once: argparse runs it on the text (and says "argument --tp: ..."), the model
runs it again on the parsed values. `vfleet render`'s flags are in vfleet.documents.render,
the environment commands' in vfleet.cli.env_flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import ConfigDict, Field

from vfleet.budget.speculative import MAX_TOKENS, Method
from vfleet.catalog.releases import DEFAULT_VERSION
from vfleet.documents import flag_types as flags
from vfleet.documents.flag_types import Derived, FilePath, Metavar, Rule
from vfleet.inputs.strict import StrictModel

if TYPE_CHECKING:
    from vfleet.budget.speculative import Speculative
    from vfleet.catalog.model_shape import ModelShape

Parallel = Annotated[int, Rule(flags.count(1, flags.MAX_PARALLEL))]
Tokens = Annotated[int, Rule(flags.count(1, flags.MAX_TOKENS, "a token count"))]
Seqs = Annotated[int, Rule(flags.count(1, flags.MAX_SEQS))]
Requests = Annotated[int, Rule(flags.count(1, flags.MAX_REQUESTS))]
KvBytes = Annotated[int, Rule(flags.count(1, 1 << 50))]
SpecTokens = Annotated[int, Rule(flags.count(1, MAX_TOKENS))]
Fraction = Annotated[float, Rule(flags.fraction)]
GpuGib = Annotated[float, Rule(flags.number(0, 4096, example="80"))]
OffloadGib = Annotated[float, Rule(flags.number(0, 1 << 20, lo_open=False, example="0"))]
RequestRate = Annotated[float, Rule(flags.number(0, 1e6, example="20"))]
WatchSeconds = Annotated[
    float, Rule(flags.number(0, flags.MAX_WATCH_S, lo_open=False, example="30"))
]
KvDtype = Annotated[str, Rule(flags.kv_dtype)]
BlockSize = Annotated[int, Rule(flags.block_size)]
Endpoint = Annotated[str, Rule(flags.endpoint)]
Unit = Annotated[str, Rule(flags.unit)]
PngPath = Annotated[Path, Rule(flags.png_path)]
Sweep = Annotated[list[float], Rule(flags.sweep)]
# Where a command targets the release the cluster was probed with unless told.
PROBED_VERSION = Derived(f"the probed one, else {DEFAULT_VERSION}")


class SpeculativeOptions(StrictModel):
    """Speculative decoding, as `budget`, `plan`, `estimate` and `render` take it."""

    # A command validates only its own model: the others' validators need not be built.
    model_config = ConfigDict(defer_build=True)

    speculative_method: Method | None = None
    """speculative decoding: mtp (the model's own MTP layers), eagle/eagle3 (a draft head,
    --draft-model) or ngram (prompt lookup)"""
    num_speculative_tokens: SpecTokens | None = None
    """drafted tokens per step (mtp defaults to the model's MTP layer count)"""
    draft_model: str | None = None
    """EAGLE draft head: catalog id, folder or config.json"""

    @property
    def given(self) -> bool:
        """Whether any of the three flags was given."""
        return bool(self.speculative_method or self.num_speculative_tokens or self.draft_model)

    def speculative(self, target: ModelShape) -> Speculative | None:
        """The flags as one choice, checked against the target model; None when unset."""
        from vfleet.budget.speculative import from_args

        return from_args(
            self.speculative_method, self.num_speculative_tokens, self.draft_model, target
        )


class BudgetFlags(SpeculativeOptions):
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
    vllm_version: str = DEFAULT_VERSION
    """target vLLM release"""
    sweep_gpu_memory_utilization: Annotated[Sweep | None, Metavar("START:STOP:STEP")] = None
    """also tabulate the concurrency ceiling over START:STOP:STEP of utilization"""
    plot: PngPath | None = None
    """write the sweep as a PNG"""
    as_json: bool = Field(False, alias="json")
    """print one JSON object"""


class PlanFlags(SpeculativeOptions):
    """`vfleet plan`: the best layouts for one model on one cluster."""

    cluster: FilePath
    """cluster YAML or a directory of probe facts"""
    model: str
    """catalog id, model folder or config.json"""
    workload: str = "chat"
    """chat | rag | batch | FILE.yaml"""
    vllm_version: Annotated[str | None, PROBED_VERSION] = None
    """target vLLM release"""
    gpu_memory_utilization: Fraction | None = None
    """the share of each GPU's memory vLLM may use (default: the release's own)"""
    kv_cache_dtype: KvDtype | None = None
    """override the planner's choice (auto|fp8)"""
    layout: str | None = None
    """evaluate only this layout, e.g. 'TP8 PP2 EP'"""
    mode: Literal["auto", "aggregated", "disaggregated"] | None = None
    """serve from one pool, from prefill and decode pools, or compare (default: auto from
    vLLM 0.9.2, aggregated before it or with --layout)"""
    allow_partial_facts: bool = False
    """plan even if a host's probe failed or measured nothing"""
    calibration: FilePath | None = None
    """a cluster's calibration.json from `vfleet calibrate` (default: the bundled fit)"""
    out: FilePath | None = None
    """also write the plan JSON here"""
    as_json: bool = Field(False, alias="json")
    """print one JSON object"""


class EstimateFlags(SpeculativeOptions):
    """`vfleet estimate`: one layout at one operating point."""

    cluster: FilePath
    """cluster YAML or probe facts"""
    model: str
    """catalog id, model folder or config.json"""
    layout: str
    """e.g. 'TP8', 'TP1 DP8 EP', 'TP8 PP2'"""
    input_len: Tokens
    """prompt tokens (mean)"""
    output_len: Tokens
    """completion tokens (mean)"""
    concurrency: Requests | None = None
    """requests in flight (vllm bench serve --max-concurrency); omit for all at once"""
    num_prompts: Requests | None = None
    """requests in the run (default 10 x C)"""
    request_rate: RequestRate | None = None
    """requests/s for the cluster (default: all at once)"""
    dataset: Literal["random", "sharegpt"] = "random"
    """random: fixed lengths; sharegpt: its length spread around these means"""
    replicas: Parallel | None = None
    """engine copies (default: as many as fit)"""
    vllm_version: Annotated[str | None, PROBED_VERSION] = None
    """target vLLM release"""
    quantization: str | None = None
    """runtime quantization, e.g. fp8"""
    kv_cache_dtype: KvDtype | None = None
    """auto | fp8 | ..."""
    max_num_seqs: Seqs | None = None
    """default: the release's own default"""
    max_num_batched_tokens: Tokens | None = None
    """default: the release's own"""
    max_model_len: Tokens | None = None
    """default: the model's context window (past it only with
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, as vLLM)"""
    gpu_memory_utilization: Fraction | None = None
    """the share of each GPU's memory vLLM may use (default: the release's own)"""
    all2all_backend: str | None = None
    """EP dispatch, e.g. deepep_low_latency"""
    calibration: FilePath | None = None
    """a cluster's calibration.json from `vfleet calibrate` (default: the bundled fit)"""
    as_json: bool = Field(False, alias="json")
    """print one JSON object"""


class DoctorFlags(StrictModel):
    """`vfleet doctor`: what to read, and what is known of the engine."""

    model_config = ConfigDict(defer_build=True)

    endpoint: list[Endpoint] = Field(default_factory=list)
    """vLLM API base URL, e.g. http://10.0.0.11:8000"""
    endpoints: Annotated[FilePath | None, Metavar("FILE")] = None
    """every engine in this endpoints.json from `vfleet render`"""
    log: list[FilePath] = Field(default_factory=list)
    """a vLLM service log to read"""
    journal: list[Unit] = Field(default_factory=list)
    """a local systemd unit whose journal to read"""
    plan: FilePath | None = None
    """the deployed plan JSON"""
    served_model_name: str | None = None
    """read only this model's series (default: the model --endpoints names)"""
    max_num_seqs: Seqs | None = None
    """the engine's max-num-seqs, if known"""
    watch: Annotated[WatchSeconds, Metavar("SECONDS")] = 0.0
    """sample over this many seconds and report rates"""
    as_json: bool = Field(False, alias="json")
    """print one JSON object"""
