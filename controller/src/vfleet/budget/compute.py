"""The KV budget: how many tokens of KV cache each engine gets, computed as vLLM computes it.

Pure functions: a BudgetRequest (model spec, GPU, flags, release) in, a Budget out.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from vfleet.budget import kv_layout, memory, speculative
from vfleet.budget.params import (
    Layout,
    component_params,
    pp_partition,
    rank_weight_bytes,
    stage_layers,
)
from vfleet.budget.quant import weight_format
from vfleet.catalog.config_checks import DTYPE_BYTES
from vfleet.catalog.gpus import Gpu
from vfleet.catalog.model_shape import ModelShape
from vfleet.catalog.releases import VersionTraits, batch_defaults
from vfleet.errors import UserError

GIB = 1 << 30


@dataclass(frozen=True)
class BudgetRequest:
    spec: ModelShape
    gpu: Gpu
    traits: VersionTraits
    layout: Layout = field(default_factory=Layout)
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"
    quantization: str | None = None
    block_size: int | None = None
    enforce_eager: bool = False
    kv_cache_memory_bytes: int | None = None
    cpu_offload_gb: float = 0.0
    mean_context_len: int | None = None
    speculative: speculative.Speculative | None = None


@dataclass(frozen=True)
class StageBudget:
    """One pipeline stage; every GPU of a stage holds the same bytes."""

    pp_rank: int
    layers: int
    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    available_kv_bytes: int
    kv_bytes_per_token: int
    num_blocks: int


@dataclass(frozen=True)
class Budget:
    model: str
    gpu: str
    vllm_version: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    enable_expert_parallel: bool
    decode_context_parallel_size: int
    gpu_memory_gib: float
    gpu_memory_utilization: float
    requested_gib: float
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cudagraph_gib: float
    available_kv_gib: float
    kv_bytes_per_token: int
    kv_cache_dtype: str
    block_size: int
    kv_bytes_per_block: int
    num_blocks: int
    kv_tokens: int
    max_model_len: int
    max_concurrency: float
    max_num_seqs: int
    max_num_batched_tokens: int
    recommended_max_num_seqs: int
    # Blocks one request of mean_context_len tokens takes across every cache group.
    blocks_per_mean_request: float
    mean_context_len: int
    weight_format: str
    kv_pinned: bool
    moe_backend: str = ""  # the MXFP4 MoE kernels the release picks (quant.mxfp4_moe_layout)
    stages: list[StageBudget] = field(default_factory=list)
    kv_groups: list[dict[str, Any]] = field(default_factory=list)
    weights_by_component_gib: dict[str, float] = field(default_factory=dict)
    params_by_component_b: dict[str, float] = field(default_factory=dict)
    # The draft: method, tokens, its weights per GPU of the last stage, its KV layers.
    speculative: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _dtype_bytes(spec: ModelShape, dtype: str) -> int:
    if dtype in ("auto", "", None):
        return spec.dtype_bytes
    if dtype not in DTYPE_BYTES:
        raise UserError(f"--dtype {dtype} is not one of auto, bfloat16, float16, float32")
    return DTYPE_BYTES[dtype]


def _check_layout(spec: ModelShape, layout: Layout) -> None:
    tp, pp = layout.tp, layout.pp
    if min(tp, pp, layout.dp, layout.dcp) < 1:
        raise UserError("parallel sizes must be 1 or more: fix --tp/--pp/--dp/--dcp")
    if spec.num_attention_heads % tp:
        raise UserError(
            f"--tp {tp} does not divide the {spec.num_attention_heads} attention heads of "
            f"{spec.name}: use a TP size that divides it"
        )
    kv = spec.num_kv_heads
    if not spec.is_mla and not spec.is_dsv4 and (kv % tp if kv >= tp else tp % kv):
        raise UserError(f"--tp {tp} and the model's {kv} KV heads do not divide each other")
    if pp > spec.num_layers:
        raise UserError(f"--pp {pp} exceeds the model's {spec.num_layers} layers")
    if layout.dcp > 1 and tp % layout.dcp:
        raise UserError(f"--dcp {layout.dcp} must divide --tp {tp}")
    if layout.dcp > 1 and spec.sliding_layers:
        raise UserError("sliding-window models cannot use decode context parallel: drop --dcp")


def _max_in_flight(req: BudgetRequest, mnbt: int) -> int:
    """Tokens a window cache reserves beyond its window for scheduled, unsettled steps.

    Before 0.26 one step's max_num_batched_tokens (SlidingWindowSpec.max_memory_usage_bytes);
    from 0.26 VllmConfig.max_in_flight_tokens: one batch per concurrent step, two under
    async scheduling without PP (the V1 model runner), else one per PP stage.
    """
    if req.traits.version < (0, 26, 0):
        return mnbt
    batches = 2 if req.layout.pp == 1 and req.traits.async_scheduling else req.layout.pp
    return batches * mnbt


def compute(req: BudgetRequest) -> Budget:
    spec, gpu, traits, layout = req.spec, req.gpu, req.traits, req.layout
    _check_layout(spec, layout)
    version = traits.version
    dtype_bytes = _dtype_bytes(spec, req.dtype)
    fmt = weight_format(
        spec.quantization, spec.model_type, dtype_bytes, req.quantization, version=version, gpu=gpu
    )
    util = req.gpu_memory_utilization
    if util is None:  # 0 is refused below, not replaced by the default
        util = traits.default_gpu_memory_utilization
    if not 0 < util <= 1:
        raise UserError(f"--gpu-memory-utilization {util} must be in (0, 1]")
    max_model_len = req.max_model_len or spec.max_position_embeddings
    default_seqs, default_tokens = batch_defaults(version, gpu.memory_gib, gpu.name, max_model_len)
    max_num_seqs = req.max_num_seqs or default_seqs
    mnbt = req.max_num_batched_tokens or min(default_tokens, max_num_seqs * max_model_len)
    kv_dtype = kv_layout.resolve_kv_dtype(spec, req.kv_cache_dtype, version, gpu.arch)
    block_size = req.block_size or kv_layout.default_block_size(spec, kv_dtype, version, gpu.arch)
    requested = math.ceil(gpu.memory_bytes * util)
    draft = req.speculative
    if draft:
        draft.check(spec, version)
    draft_kv = speculative.stage_kv_args(draft, spec, kv_dtype, dtype_bytes, layout.tp)
    draft_bytes = 0.0

    stages: list[StageBudget] = []
    kv_layouts = []
    weights_by_component: dict[str, float] = {}
    for rank, _n in enumerate(pp_partition(spec.num_layers, layout.pp)):
        layers = stage_layers(spec.num_layers, layout.pp, rank)
        weights = rank_weight_bytes(spec, fmt, layout, rank)
        if draft and rank == layout.pp - 1:  # vLLM runs the drafter on the last stage
            extra = speculative.draft_weight_bytes(draft, spec, fmt, layout, version, gpu)
            weights, draft_bytes = {**weights, **extra}, sum(extra.values())
        buffers = memory.model_buffer_bytes(
            spec,
            mnbt,
            rank == layout.pp - 1,
            version,
            drafts_from_hidden_states=bool(draft and draft.method != "ngram"),
        )
        if buffers:
            weights = {**weights, "buffers": float(buffers)}
        if rank == 0:
            weights_by_component = weights
        # vLLM takes --cpu-offload-gb in GiB off the GPU-resident weights.
        weight_total = max(0, int(sum(weights.values()) - req.cpu_offload_gb * GIB))
        moe_layers = sum(1 for i in layers if spec.is_moe_layer(i))
        shape = memory.ProfileShape(
            max_num_batched_tokens=mnbt,
            max_num_seqs=max_num_seqs,
            tp=layout.tp,
            is_first_stage=rank == 0,
            is_last_stage=rank == layout.pp - 1,
            moe_layers_on_rank=moe_layers,
            v0_engine=traits.v0_engine,
            version=version,
            mxfp4_experts=fmt.scheme == "mxfp4",
        )
        activation = memory.activation_bytes(spec, shape)
        non_torch = memory.non_torch_bytes(
            layout.tp * (1 if layout.dp == 1 else layout.dp),
            gpu.nvswitch_class,
            traits.nccl_inside_budget,
        )
        cudagraph = memory.cudagraph_bytes(
            len(layers), req.enforce_eager, traits.cudagraph_subtracted
        )
        if req.kv_cache_memory_bytes is not None:
            available = req.kv_cache_memory_bytes
        else:
            available = requested - weight_total - activation - non_torch - cudagraph
        last_kv = draft_kv if rank == layout.pp - 1 else {}
        kv = kv_layout.stage_layout(
            spec, layers, kv_dtype, dtype_bytes, layout.tp, block_size, version=version, **last_kv
        )
        kv_layouts.append(kv)
        stages.append(
            StageBudget(
                pp_rank=rank,
                layers=len(layers),
                weights_bytes=weight_total,
                activation_bytes=activation,
                non_torch_bytes=non_torch,
                cudagraph_bytes=cudagraph,
                available_kv_bytes=available,
                kv_bytes_per_token=kv.bytes_per_token,
                num_blocks=max(0, available // kv.bytes_per_block),
            )
        )

    limiting = min(range(len(stages)), key=lambda i: stages[i].num_blocks)
    stage, kv = stages[limiting], kv_layouts[limiting]
    num_blocks = stage.num_blocks
    in_flight = _max_in_flight(req, mnbt)
    retained = speculative.window_retained_tokens(draft, spec, version)
    per_request = kv_layout.blocks_per_request(kv, max_model_len, in_flight, layout.dcp, retained)
    max_concurrency = num_blocks / per_request if per_request else 0.0
    if traits.tokens_group_aware:
        kv_tokens = int(max_concurrency * max_model_len)
    else:
        kv_tokens = num_blocks // kv.num_groups * kv.min_block_size
        if version >= (0, 11, 0):
            kv_tokens *= layout.dcp

    mean_ctx = req.mean_context_len or min(max_model_len, 4096)
    mean_blocks = kv_layout.blocks_per_request(kv, mean_ctx, in_flight, layout.dcp, retained)
    # Keep 10% of the blocks free so decode growth does not force preemption at the cap.
    cap = int(0.9 * max(num_blocks - 1, 0) / mean_blocks) if mean_blocks else 0
    recommended = max(1, min(cap, 8192) // 8 * 8 if cap >= 16 else cap)

    params = component_params(spec)
    return Budget(
        model=spec.name,
        gpu=gpu.name,
        vllm_version=traits.label,
        tensor_parallel_size=layout.tp,
        pipeline_parallel_size=layout.pp,
        data_parallel_size=layout.dp,
        enable_expert_parallel=layout.enable_expert_parallel,
        decode_context_parallel_size=layout.dcp,
        gpu_memory_gib=round(gpu.memory_bytes / GIB, 2),
        gpu_memory_utilization=util,
        requested_gib=round(requested / GIB, 2),
        weights_gib=round(stage.weights_bytes / GIB, 2),
        activation_gib=round(stage.activation_bytes / GIB, 2),
        non_torch_gib=round(stage.non_torch_bytes / GIB, 2),
        cudagraph_gib=round(stage.cudagraph_bytes / GIB, 2),
        available_kv_gib=round(stage.available_kv_bytes / GIB, 2),
        kv_bytes_per_token=stage.kv_bytes_per_token,
        kv_cache_dtype=kv.kv_dtype,
        block_size=block_size,
        kv_bytes_per_block=kv.bytes_per_block,
        num_blocks=num_blocks,
        kv_tokens=kv_tokens,
        max_model_len=max_model_len,
        max_concurrency=round(max_concurrency, 2),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=mnbt,
        recommended_max_num_seqs=recommended,
        blocks_per_mean_request=round(mean_blocks, 3),
        mean_context_len=mean_ctx,
        weight_format=fmt.scheme,
        moe_backend=fmt.mxfp4.backend if fmt.mxfp4 else "",
        kv_pinned=req.kv_cache_memory_bytes is not None,
        stages=stages,
        kv_groups=kv_layout.group_summary(kv),
        weights_by_component_gib={k: round(v / GIB, 3) for k, v in weights_by_component.items()},
        params_by_component_b={k: round(v / 1e9, 3) for k, v in params.items()},
        speculative=_draft_summary(draft, spec, draft_bytes, kv_layouts[-1].bytes_per_token),
    )


def _draft_summary(
    draft: speculative.Speculative | None, spec: ModelShape, weight_bytes: float, last_kv: int
) -> dict[str, Any] | None:
    if draft is None:
        return None
    return {
        **draft.to_json(),
        "draft_weights_gib": round(weight_bytes / GIB, 3),
        "draft_kv_layers": draft.kv_layers(spec),
        "last_stage_kv_bytes_per_token": last_kv,
        "decode_tokens_per_seq": speculative.decode_slots(draft),
    }


def fits(budget: Budget) -> bool:
    return budget.num_blocks > 0 and budget.max_concurrency >= 1


def smallest_fitting_layout(req: BudgetRequest, max_gpus: int = 64) -> Budget | None:
    """The cheapest TP x PP (fewest GPUs, then least PP) under which one request fits."""
    candidates = []
    for tp in (1, 2, 4, 8, 16):
        for pp in (1, 2, 3, 4, 6, 8, 16):
            if tp * pp <= max_gpus:
                candidates.append((tp * pp, pp, tp))
    for _gpus, pp, tp in sorted(candidates):
        trial = replace(req, layout=replace(req.layout, tp=tp, pp=pp, dp=1, dcp=1))
        try:
            budget = compute(trial)
        except UserError:
            continue
        if fits(budget):
            return budget
    return None


def requests_held(kv_tokens: int, block_size: int, input_len: int, output_len: int) -> int:
    """The KV ceiling: requests a cache of `kv_tokens` holds at once when each grows to
    input + output tokens in whole blocks. Past it, more concurrency buys only preemption
    (each request is rounded up to its last block, as vLLM allocates them)."""
    per_request = math.ceil((input_len + output_len) / block_size) * block_size
    return kv_tokens // per_request
