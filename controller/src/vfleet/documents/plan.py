"""The plan: what the planner makes, `vfleet plan --out` writes and `vfleet render`,
`vfleet doctor`, the report, the ledger and the pipeline read, as one typed model.

Unknown keys are refused, not ignored: a hand edit such as `max_num_seq: 512` would
otherwise render a launch that silently keeps the planner's value, and a misspelt field is
named with a did-you-mean. The planner's report-only sections (the workload, predictions,
alternatives, the rejected layouts) are optional, so a plan without them still renders.
The rules are the ones vLLM enforces at start-up, checked here so a bad plan stops at
render, not on the hosts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from vfleet.budget.params import Layout
from vfleet.documents.placement import MAX_PARALLEL, PlanHost
from vfleet.documents.pools import Disaggregation, Pool, check_pools
from vfleet.errors import UserError
from vfleet.inputs.files import load_json
from vfleet.inputs.strict import StrictModel
from vfleet.inputs.validate import validate
from vfleet.inputs.values import Label

BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)  # vLLM's --block-size choices (CPU build: 128)
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla")
SPECULATIVE_METHODS = ("mtp", "eagle", "eagle3", "ngram")
_VERSION = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}(?:[.+-][0-9A-Za-z.+-]{0,40})?")
MAX_HOSTS = 4096
# What the planner writes for the model (a Hugging Face id or a folder), the GPU (a catalog
# name) and the model type: anything else in those fields is a hand edit, refused rather
# than carried into launch scripts and reports.
_MODEL = re.compile(r"[A-Za-z0-9_./~+@=:][A-Za-z0-9_./~+@=:-]{0,4095}")
_GPU = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._()+-]{0,63}")
_MODEL_TYPE = re.compile(r"[A-Za-z0-9_.-]{0,200}")


def check_version(value: str) -> str:
    if not _VERSION.fullmatch(value):
        raise ValueError("must be a vLLM release written X.Y.Z (e.g. 0.11.1)")
    return value


def _matching(pattern: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"must be {what}")
        return value

    return AfterValidator(check)


def _block_size(value: int) -> int:
    if value not in BLOCK_SIZES:
        raise ValueError(f"must be one of {', '.join(map(str, BLOCK_SIZES))}")
    return value


Parallel = Annotated[int, Field(ge=1, le=MAX_PARALLEL)]
Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
ModelLen = Annotated[int, Field(ge=1, le=100_000_000)]
Seqs = Annotated[int, Field(ge=1, le=1_000_000)]
BatchTokens = Annotated[int, Field(ge=1, le=1_000_000_000)]
KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla"]
LayoutLabel = Annotated[str, Field(max_length=200)]
Count = Annotated[int, Field(ge=0)]
Amount = Annotated[float, Field(ge=0, allow_inf_nan=False)]
# A workload's milliseconds stay what they were given: 2000 from a preset, 2000.0 from a file.
Millis = Annotated[int, Field(gt=0)] | Annotated[float, Field(gt=0, allow_inf_nan=False)]
Version = Annotated[
    str, AfterValidator(check_version), Field(json_schema_extra={"pattern": _VERSION.pattern})
]
BlockSize = Annotated[
    int, AfterValidator(_block_size), Field(json_schema_extra={"enum": list(BLOCK_SIZES)})
]


class DegradedLink(StrictModel):
    """A host whose link to the others the health gate warned about."""

    host: Label
    """the host name (e.g. gpu-node-03)"""
    why: Annotated[str, Field(max_length=2000)]
    """the health gate's evidence (e.g. iperf3: h2->h3 41 Gb/s (46% of 90))"""
    in_multi_node_engines: bool
    """whether an engine that spans nodes runs on it (only when the sound hosts cannot
    hold one; it is then costed at the measured bandwidth)"""


class Speculative(StrictModel):
    """Speculative decoding as the plan records it; absent when off."""

    method: Literal["mtp", "eagle", "eagle3", "ngram"]
    """the speculative method: mtp, eagle, eagle3 or ngram"""
    num_speculative_tokens: Annotated[int, Field(ge=1, le=16)]
    """tokens proposed per step, 1 to 16 (e.g. 1)"""
    draft_model: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    """the EAGLE draft's id or path (e.g. yuhuili/EAGLE-LLaMA3.1-Instruct-8B)"""

    @model_validator(mode="after")
    def _eagle_needs_a_draft(self) -> Speculative:
        if self.method in ("eagle", "eagle3") and not self.draft_model:
            raise ValueError(f"speculative method {self.method} needs a draft_model")
        return self


Loose = dict[str, Any]


class PlanWorkload(StrictModel):
    """The workload the plan was made for (vfleet.plan.workload.Workload)."""

    name: Annotated[str, Field(min_length=1, max_length=255)]
    """the preset or the workload file's name (e.g. chat)"""
    input_mean: Annotated[int, Field(ge=1)]
    """mean prompt tokens (e.g. 1024)"""
    input_p99: Annotated[int, Field(ge=1)]
    """p99 prompt tokens (e.g. 4096)"""
    output_mean: Annotated[int, Field(ge=1)]
    """mean output tokens (e.g. 256)"""
    output_p99: Annotated[int, Field(ge=1)]
    """p99 output tokens (e.g. 1024)"""
    concurrency: Annotated[int, Field(ge=1)]
    """simultaneous requests (e.g. 512)"""
    ttft_p99_ms: Millis
    """the p99 time-to-first-token target in ms (e.g. 2000)"""
    tpot_p99_ms: Millis
    """the p99 time-per-output-token target in ms (e.g. 50)"""


class Predicted(StrictModel):
    """What the cost model predicts for a layout on the whole cluster."""

    tokens_per_s: Amount
    """output tokens/s (e.g. 1714.1)"""
    tokens_per_s_p10: Amount
    """the 10th percentile of the measured error band (e.g. 942.9)"""
    tokens_per_s_p90: Amount
    """the 90th percentile of the band (e.g. 2048.8)"""
    tokens_per_s_per_gpu: Amount
    """output tokens/s per GPU used (e.g. 214.3)"""
    tpot_ms: Amount
    """time per output token in ms (e.g. 49.01)"""
    itl_p99_ms: Amount
    """p99 inter-token latency in ms (e.g. 342.06)"""
    ttft_ms: Amount
    """p99 time to first token in ms (e.g. 1026.2)"""
    max_concurrency: Count
    """sequences the KV caches of every replica hold (e.g. 3472)"""
    running_per_engine: Count
    """sequences each engine runs at once (e.g. 84)"""
    comm_ms_per_step: Annotated[
        dict[Annotated[str, Field(max_length=40)], Amount], Field(max_length=16)
    ]
    """communication ms per step by kind (e.g. {"tp": 1.027, "moe": 2.27})"""


class Alternative(StrictModel):
    """A layout ranked below the chosen one: its knobs, its predictions and why it lost.
    The fields mean what the plan's fields of the same names mean."""

    layout: LayoutLabel
    replicas: Annotated[int, Field(ge=1)]
    tensor_parallel_size: Parallel
    pipeline_parallel_size: Parallel
    data_parallel_size: Parallel
    enable_expert_parallel: bool
    decode_context_parallel_size: Parallel
    gpu_memory_utilization: Fraction
    max_num_seqs: Seqs
    max_num_batched_tokens: BatchTokens
    max_model_len: ModelLen
    enable_chunked_prefill: bool
    kv_cache_dtype: KvCacheDtype
    block_size: BlockSize | None
    kv_tokens_per_engine: Count
    weights_gib_per_gpu: Amount
    meets_slo: bool
    predicted: Predicted
    why_not: Annotated[str, Field(max_length=4000)]
    """why the chosen layout beat it"""


class RejectedLayout(StrictModel):
    """A layout the planner refused."""

    layout: LayoutLabel
    """its label (e.g. TP1)"""
    why: Annotated[str, Field(max_length=4000)]
    """the rule or the memory check that refused it"""


class Plan(StrictModel):
    """A plan as the planner makes it and `vfleet render` reads it (`vfleet plan --out`)."""

    model: Annotated[
        str,
        Field(min_length=1, max_length=4096),
        _matching(_MODEL, "a model id or folder: letters, digits and _ . / ~ + @ = : -"),
    ]
    """the model id or folder (e.g. meta-llama/Llama-3.1-8B-Instruct)"""
    vllm_version: Version
    """the vLLM release as X.Y.Z (e.g. 0.11.1)"""
    model_type: Annotated[
        str, Field(max_length=200), _matching(_MODEL_TYPE, "letters, digits, _ . and -")
    ] = ""
    """the model's config.json model_type (e.g. llama)"""
    tensor_parallel_size: Parallel
    """GPUs per pipeline stage, 1 to 1024 (e.g. 8)"""
    pipeline_parallel_size: Parallel
    """pipeline stages, 1 to 1024 (e.g. 1)"""
    data_parallel_size: Parallel
    """data-parallel ranks per engine, 1 to 1024 (e.g. 1)"""
    decode_context_parallel_size: Parallel = 1
    """decode context-parallel size, 1 to 1024 (e.g. 1)"""
    enable_expert_parallel: bool = False
    """whether MoE experts are spread over the ranks: true or false"""
    enable_chunked_prefill: bool = True
    """whether long prompts are prefilled in chunks: true or false"""
    max_model_len: ModelLen
    """tokens per sequence, 1 to 100,000,000 (e.g. 8192)"""
    max_num_seqs: Seqs
    """sequences per engine rank, 1 to 1,000,000 (e.g. 256)"""
    max_num_batched_tokens: BatchTokens
    """tokens per engine step, at least max_num_seqs (e.g. 8192)"""
    gpu_memory_utilization: Fraction
    """the fraction of GPU memory vLLM may use, in (0, 1] (e.g. 0.92)"""
    kv_cache_dtype: KvCacheDtype
    """the KV cache dtype (e.g. auto, or fp8 where the GPU supports it)"""
    block_size: BlockSize | None = None
    """the KV block size in tokens (e.g. 16 on GPUs, 128 for the CPU build)"""
    speculative: Speculative | None = None
    """speculative decoding (e.g. {"method": "mtp", "num_speculative_tokens": 1})"""
    hosts: Annotated[list[PlanHost], Field(min_length=1, max_length=MAX_HOSTS)]
    """the hosts and the ranks each GPU runs, 1 to 4096 hosts"""

    # Written by the planner for people and the report; render does not read them.
    gpu: Annotated[str, _matching(_GPU, "a GPU name as `vfleet gpus` lists it")] | None = None
    """the GPU the plan is for (e.g. H100-SXM-80GB)"""
    nodes: Annotated[int, Field(ge=1, le=MAX_HOSTS)] | None = None
    """the cluster's node count (e.g. 2)"""
    gpus_per_node: Annotated[int, Field(ge=1, le=1024)] | None = None
    """GPUs per node (e.g. 8)"""
    workload: PlanWorkload | None = None
    """the workload the plan was made for"""
    layout: LayoutLabel | None = None
    """the chosen layout's label (e.g. TP8)"""
    replicas: Annotated[int, Field(ge=1)] | None = None
    """engine replicas (e.g. 2)"""
    kv_tokens_per_engine: Count | None = None
    """KV cache tokens per engine (e.g. 500000)"""
    weights_gib_per_gpu: Amount | None = None
    """weights per GPU in GiB (e.g. 15.0)"""
    meets_slo: bool | None = None
    """whether the prediction meets the workload's SLOs"""
    predicted: Predicted | None = None
    """the cost model's predictions"""
    alternatives: list[Alternative] | None = None
    """the next-best layouts"""
    rejected: list[RejectedLayout] | None = None
    """the layouts refused, with why"""
    reason: str | None = None
    """why this layout won"""
    idle_gpus: Count | None = None
    """GPUs the plan leaves idle (e.g. 0)"""
    degraded_links: Annotated[list[DegradedLink], Field(max_length=4096)] | None = None
    """the hosts with a degraded link and whether engines that span nodes use them"""
    overrides: Loose | None = None
    """the group_vars values the plan was made around (vfleet_plan_overrides)"""
    disaggregation: Disaggregation | None = None
    """aggregated against prefill/decode pools: both estimates, and the prefill pool when
    the plan is disaggregated (its top level is then the decode pool)"""

    @property
    def serves_disaggregated(self) -> bool:
        """Prefill and decode pools are deployed. A plan that only compared the split (its
        `disaggregation.chosen` is aggregated) serves from one pool."""
        return self.disaggregation is not None and self.disaggregation.chosen == "disaggregated"

    @property
    def served_prefill_pool(self) -> Pool | None:
        """The prefill pool this plan deploys; None where it serves from one pool."""
        split = self.disaggregation
        return split.prefill if split is not None and self.serves_disaggregated else None

    def document(self) -> dict[str, Any]:
        """The plan as `vfleet plan --out` writes it: the fields it was made or read with (a
        default it was not given stays out), in the order the planner writes them."""
        data = self.model_dump(mode="json", exclude_unset=True)
        return {key: data[key] for key in DOCUMENT_ORDER if key in data}

    @model_validator(mode="after")
    def _label_and_replicas_match_the_ranks(self) -> Plan:
        """The layout label and replica count are what people read; they must say what the
        ranks below them do (a plan claiming 100 replicas on 8 GPUs is a hand edit)."""
        layout = Layout(
            tp=self.tensor_parallel_size,
            pp=self.pipeline_parallel_size,
            dp=self.data_parallel_size,
            enable_expert_parallel=self.enable_expert_parallel,
            dcp=self.decode_context_parallel_size,
        )
        if self.layout is not None and " ".join(self.layout.split()) != layout.label:
            raise ValueError(
                f"layout {self.layout[:60]!r} does not match the sizes it sits beside "
                f"({layout.label}): re-run `vfleet plan --out`"
            )
        engines = {engine for host in self.hosts for engine in host.engines}
        if self.replicas is not None and self.replicas != len(engines):
            raise ValueError(
                f"replicas is {self.replicas} but the hosts run {len(engines)} engine(s): "
                "re-run `vfleet plan --out`"
            )
        if self.disaggregation is not None:
            sizes = (layout.tp, layout.pp, layout.dp)
            check_pools(self.disaggregation, sizes, self.hosts)
        return self

    @field_validator("max_num_batched_tokens")
    @classmethod
    def _batch_holds_the_sequences(cls, value: int, info: ValidationInfo) -> int:
        seqs = info.data.get("max_num_seqs")
        if seqs is not None and value < seqs:
            raise ValueError(
                f"is below max_num_seqs ({seqs}), which vLLM refuses: raise it or re-plan"
            )
        length = info.data.get("max_model_len")
        chunked = info.data.get("enable_chunked_prefill", True)
        if length is not None and not chunked and value < length:
            raise ValueError(
                f"without chunked prefill must cover max_model_len ({length}): enable "
                "chunked prefill or raise it"
            )
        return value

    @field_validator("hosts")
    @classmethod
    def _ranks_complete_and_unique(cls, hosts: list[PlanHost], info: ValidationInfo) -> Any:
        sizes = [info.data.get(k) for k in ("tensor_parallel_size", "pipeline_parallel_size")]
        sizes.append(info.data.get("data_parallel_size"))
        names: set[str] = set()
        engines: dict[str, set[tuple[int, int, int]]] = {}
        for host in hosts:
            if host.host in names:
                raise ValueError(f"host {host.host} appears twice: list each host once")
            names.add(host.host)
            for engine, ranks in host.engines.items():
                seen = engines.setdefault(engine, set())
                for r in ranks:
                    rank = (r.tp_rank, r.pp_rank, r.dp_rank)
                    if rank in seen:
                        raise ValueError(
                            f"engine {engine} has rank tp{rank[0]} pp{rank[1]} dp{rank[2]} "
                            "twice: re-run `vfleet plan --out`"
                        )
                    seen.add(rank)
        tp, pp, dp = sizes
        if not (isinstance(tp, int) and isinstance(pp, int) and isinstance(dp, int)):
            return hosts  # a size is itself wrong, and that error is the one to show
        per_engine = tp * pp * dp
        for engine, placed in engines.items():
            out_of_range = any(t >= tp or p >= pp or d >= dp for t, p, d in placed)
            if len(placed) != per_engine or out_of_range:
                raise ValueError(
                    f"engine {engine} has {len(placed)} ranks, not the {per_engine} of TP x PP "
                    "x DP (or a rank out of range): re-run `vfleet plan --out`"
                )
        return hosts


# The order of a plan file's keys: the planner's (vfleet.plan.document), which predates the
# model and differs from the order its fields are declared and checked in above.
DOCUMENT_ORDER = (
    *("model", "model_type", "gpu", "nodes", "gpus_per_node", "vllm_version", "workload"),
    *("layout", "replicas", "tensor_parallel_size", "pipeline_parallel_size"),
    *("data_parallel_size", "enable_expert_parallel", "decode_context_parallel_size"),
    *("gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "max_model_len"),
    *("enable_chunked_prefill", "kv_cache_dtype", "block_size", "kv_tokens_per_engine"),
    *("weights_gib_per_gpu", "meets_slo", "predicted", "speculative", "alternatives"),
    *("rejected", "hosts", "reason", "idle_gpus", "degraded_links", "overrides"),
    "disaggregation",
)


def parse_plan(doc: Any) -> Plan:
    """A parsed plan Document as a Plan, or one UserError line."""
    if not isinstance(doc.data, dict):
        raise UserError(
            f"{doc.source} is not a vfleet plan (a JSON object): run `vfleet plan --out`"
        )
    return validate(Plan, doc)


def load_plan(path: Path) -> Plan:
    """Read and check a plan file. The fields it leaves out take their defaults, which are
    what render assumed of a missing key before the model existed; `model_fields_set` says
    which ones the file holds (doctor trusts only those)."""
    if not path.exists() and not path.is_symlink():
        raise UserError(f"no plan at {path}: run `vfleet plan --out FILE` first")
    return parse_plan(load_json(path, "plan"))
