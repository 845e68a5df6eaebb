"""A cost model of one vLLM engine step, from the work it does and the links it crosses.

One step of one engine rank (one pipeline stage of one DP rank) runs `decode` sequences one
token each and `prefill` prompt tokens (chunked prefill mixes both). Per GPU it costs:

- linear layers, dense and expert parts each a roofline: the slower of reading the weights
  (experts only where a token was routed) and the GEMM FLOPs at a fitted fraction of peak;
  grouped expert GEMMs have their own efficiency, lower still when TP slices an expert's
  width thin;
- attention: the slower of reading the KV of every decoding sequence and its FLOPs, plus the
  prefill chunk's causal attention FLOPs;
- communication on the link each group spans: TP all-reduces (two per layer), the MoE
  dispatch and combine (EP, or experts sharded over DP), the PP send, DCP's collectives;
  each is latency + bytes / bandwidth on that kind of link, so small messages on slow links
  cost their latency, not a bandwidth penalty;
- overhead: CPU work per step and per sequence (scheduler, input preparation, sampler) and a
  launch cost per layer, small under CUDA graphs (decode-only steps) and larger for mixed
  steps. With async scheduling the CPU work hides behind the GPU's.

The efficiencies and overheads are fitted to measured serving runs per GPU generation and
engine generation (`vfleet.perf.fit`, bench/perf_accuracy.py); nothing here is per case.
Every function takes plain floats or NumPy arrays of steps, so a whole simulated run is
costed in one call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vfleet.catalog.gpus import Gpu
from vfleet.catalog.model_shape import ModelShape
from vfleet.perf.fit import PerfParams
from vfleet.perf.kernels import shapes

GB = 1e9
# One collective's fixed latency by link kind. Inside an NVLink domain vLLM's custom
# all-reduce is one shot: about 5 us from 2 to 8 GPUs (measured on an H200, data/kernels/
# vllm-h200-kernels.json `allreduce`). Elsewhere NCCL's ring pays a step latency per step,
# 2 (n - 1) steps for an all-reduce, n - 1 for a gather or scatter, each as slow as the slowest
# link in the ring (the network's, once a group spans nodes).
LATENCY_S = {"nvlink": 5e-6, "pcie": 15e-6, "infiniband": 20e-6, "roce": 25e-6, "ethernet": 60e-6}
HOP_S = {"nvlink": 0.0, "pcie": 2e-6, "infiniband": 5e-6, "roce": 6e-6, "ethernet": 15e-6}
CUDA_GRAPH_MAX_BATCH = 512  # vLLM's largest captured decode batch (V1 default)
SPARSE_TOPK_TOKENS = 2048  # DeepSeek-V3.2's indexer keeps this many tokens per query


@dataclass(frozen=True)
class Link:
    kind: str  # nvlink | pcie | infiniband | roce | ethernet
    busbw_GBps: float

    def collective_s(self, nbytes: Any, ranks: int, factor: float = 2.0) -> Any:
        """A ring-style collective of `nbytes` per rank: latency plus factor x (n-1)/n of
        the bytes over the bus bandwidth (2 for all-reduce, 1 for gather or scatter)."""
        if ranks <= 1:
            return 0.0 * nbytes
        steps = factor * (ranks - 1)
        latency = LATENCY_S.get(self.kind, 60e-6) + HOP_S.get(self.kind, 15e-6) * steps
        return latency + nbytes * factor * (ranks - 1) / ranks / (self.busbw_GBps * GB)


@dataclass(frozen=True)
class EngineShape:
    """What the cost model needs to know about one engine layout."""

    tp: int
    pp: int
    dp: int
    ep: bool
    dcp: int
    layers_per_stage: int
    moe_layers_per_stage: int
    dense_bytes_per_gpu: float  # non-expert weights of the heaviest stage, per GPU
    expert_bytes_per_gpu: float
    kv_bytes_per_token: float  # per GPU, this stage's layers
    dense_flops_per_token: float  # linear FLOPs per token outside routed experts, per GPU
    expert_flops_per_token: float  # routed-expert FLOPs per token, whole stage, unsplit
    compute: str  # bf16 | fp8 | fp4: the GEMM input format
    tp_link: Link
    moe_link: Link  # the link the MoE all-to-all (or DP gather) crosses
    pp_link: Link
    all2all: str = "gather"  # gather (allgather/reduce-scatter) | naive | routed (DeepEP-style)
    kernel_format: str = "bf16"  # one of vfleet.perf.kernels.FORMATS: which measured kernels run


@dataclass(frozen=True)
class StepCost:
    """One step's time by part (seconds; floats or arrays over steps)."""

    weights_s: Any  # weight reads alone (the memory side of the linear roofline)
    linear_s: Any  # linear FLOPs alone (the compute side)
    linear_roof_s: Any  # the roofline of the two: what the linear layers cost
    kv_read_s: Any
    attention_s: Any  # attention FLOPs, decode and prefill
    attention_roof_s: Any
    tp_s: Any
    moe_s: Any
    pp_s: Any
    dcp_s: Any
    overhead_s: Any  # launches plus the CPU work the GPU does not hide

    @property
    def step_s(self) -> Any:
        """A stage's step, without the PP send (a pipeline overlaps it with other stages)."""
        return (
            self.linear_roof_s
            + self.attention_roof_s
            + self.tp_s
            + self.moe_s
            + self.dcp_s
            + self.overhead_s
        )

    @property
    def gpu_s(self) -> Any:
        return self.linear_roof_s + self.attention_roof_s

    @property
    def memory_s(self) -> Any:
        return self.weights_s + self.kv_read_s

    @property
    def compute_s(self) -> Any:
        return self.linear_s + self.attention_s

    def breakdown_ms(self) -> dict[str, float]:
        """Mean milliseconds per step by part, for reports and `vfleet estimate --json`."""

        def ms(value: Any) -> float:
            return round(float(np.mean(value)) * 1e3, 4)

        return {
            "linear_compute": ms(self.linear_s),
            "weight_reads": ms(self.weights_s),
            "linear": ms(self.linear_roof_s),
            "attention_compute": ms(self.attention_s),
            "kv_reads": ms(self.kv_read_s),
            "attention": ms(self.attention_roof_s),
            "tp_comm": ms(self.tp_s),
            "ep_comm": ms(self.moe_s),
            "pp_comm": ms(self.pp_s),
            "dcp_comm": ms(self.dcp_s),
            "fixed_overhead": ms(self.overhead_s),
            "step": ms(self.step_s),
        }


def active_params(spec: ModelShape, params: dict[str, int]) -> float:
    """Parameters one token touches: everything but the experts it is not routed to."""
    total: float = sum(v for k, v in params.items() if k not in ("mtp", "vision", "embeddings"))
    routed = params.get("routed_experts", 0)
    if spec.num_experts:
        total -= routed * (1 - spec.experts_per_token / spec.num_experts)
    return float(total)


def experts_touched(spec: ModelShape, tokens: Any) -> Any:
    """Fraction of experts that at least one of `tokens` tokens is routed to."""
    if not spec.num_experts:
        return 1.0 + 0.0 * tokens
    miss = (1 - spec.experts_per_token / spec.num_experts) ** np.maximum(tokens, 0)
    return 1 - miss


def peak_flops(gpu: Gpu, compute: str) -> float:
    if compute == "fp4" and gpu.fp4_dense_tflops:
        return gpu.fp4_dense_tflops * 1e12
    if compute in ("fp8", "fp4") and gpu.fp8:
        return gpu.fp8_dense_tflops * 1e12
    return gpu.bf16_dense_tflops * 1e12


def _peak_kind(gpu: Gpu, compute: str) -> str:
    return "fp8" if compute in ("fp8", "fp4") and gpu.fp8 else "bf16"


def _attention_flops(spec: ModelShape, heads: float, decode: bool) -> float:
    """Attention FLOPs per (query token, context token) pair per layer on one GPU."""
    if spec.is_mla:
        if decode:  # absorbed MLA: scores over the latent plus rope, values over the latent
            return 2 * heads * (2 * spec.kv_lora_rank + spec.qk_rope_head_dim)
        return 2 * heads * (spec.qk_nope_head_dim + spec.qk_rope_head_dim + spec.v_head_dim)
    return 4 * heads * spec.head_dim


def _effective_context(spec: ModelShape, context: Any) -> Any:
    """Context the attention kernels actually touch: sparse and sliding layers cap it."""
    if spec.index_n_heads:  # DeepSeek-V3.2 / V4 sparse attention
        return np.minimum(context, spec.index_topk or SPARSE_TOPK_TOKENS)
    if spec.sliding_window and spec.sliding_layers:
        share = len(spec.sliding_layers) / max(spec.num_layers, 1)
        return share * np.minimum(context, spec.sliding_window) + (1 - share) * context
    return context


def _capped_pairs(prefill: Any, pairs: Any, window: float) -> Any:
    """The step's causal (query, key) pairs when no query looks back more than `window`
    tokens: each prompt token is taken at the step's mean context (as decode is)."""
    mean_context = pairs / np.maximum(prefill, 1)
    return prefill * np.minimum(mean_context, window)


def _prefill_attention_flops(spec: ModelShape, heads: float, prefill: Any, pairs: Any) -> Any:
    """Attention FLOPs of the step's prompt tokens per layer on one GPU, by layer kind.

    DeepSeek-V3.2's sparse attention is priced as the dense MLA prefill plus what the measured
    sparse module adds to it (`_sparse_prefill_s`). V4's sparse attention has no measured
    table: each query attends to the indexer's top-k tokens only, on the compressed latent,
    as MLA decode does (absorbed). Sliding
    window layers see at most their window; the other layers the whole causal prefix.
    """
    if spec.index_n_heads and (spec.is_dsv4 or shapes().sparse is None):
        topk = spec.index_topk or SPARSE_TOPK_TOKENS
        return _attention_flops(spec, heads, decode=True) * _capped_pairs(prefill, pairs, topk)
    full = _attention_flops(spec, heads, decode=False) * pairs
    if spec.sliding_window and spec.sliding_layers:
        share = len(spec.sliding_layers) / max(spec.num_layers, 1)
        windowed = _attention_flops(spec, heads, decode=False) * _capped_pairs(
            prefill, pairs, spec.sliding_window
        )
        return share * windowed + (1 - share) * full
    return full


def _sparse_prefill_s(
    spec: ModelShape, gpu: Gpu, prefill: Any, prompt_len: Any, heads: float
) -> Any | None:
    """What DeepSeek-V3.2's sparse attention adds to one layer's prompt tokens over dense MLA,
    from the measured module (None where no table covers the model: V4, other models). Its
    per-token part is compute: other GPUs scale it by their bf16 peak."""
    table = shapes().sparse
    if not spec.index_n_heads or spec.is_dsv4 or table is None:
        return None
    extra = table.extra_s(prefill, prompt_len, heads)
    floor = np.where(prefill > 0, table.floor_s, 0.0)
    scale = shapes().peak_tflops["bf16"] / gpu.bf16_dense_tflops
    return floor + (extra - floor) * scale


def _indexer_flops(spec: ModelShape, pairs: Any) -> Any:
    """The sparse-attention indexer's scoring of every earlier token, per layer: its heads
    dot a query with each cached key. vLLM replicates the indexer on every TP rank, so this
    is not divided by TP."""
    if not spec.index_n_heads:
        return 0.0 * pairs
    return 2 * spec.index_n_heads * spec.index_head_dim * pairs


def step_cost(
    spec: ModelShape,
    gpu: Gpu,
    e: EngineShape,
    params: PerfParams,
    *,
    decode: Any,
    decode_context: Any,
    prefill: Any,
    prefill_pairs: Any,
    seqs: Any,
    new_requests: Any = 0.0,
    active_dp: int | None = None,
    cpu_scale: float = 1.0,
) -> StepCost:
    """One stage of one DP rank for one step.

    decode: sequences generating one token; decode_context: the KV tokens they hold in
    total; prefill: prompt tokens in the step; prefill_pairs: (query, key) pairs their
    causal attention computes; seqs: sequences the CPU prepares; new_requests: requests
    starting their prompt (input processing, block tables). `active_dp` is how many DP
    ranks carry tokens into the shared expert layers (default: all of them).
    """
    eff, over = params.efficiency, params.overheads
    kernels = shapes()
    dp_busy = e.dp if active_dp is None else active_dp
    tokens = decode + prefill
    hbm = gpu.hbm_tb_s * 1e12
    peak = peak_flops(gpu, e.compute)
    attn_peak = gpu.bf16_dense_tflops * 1e12

    # Linear layers: dense part and routed experts, a roofline each.
    dense_read = e.dense_bytes_per_gpu / (hbm * eff.hbm)
    gemm_eff = eff.gemm * kernels.gemm_ratio(e.kernel_format)
    dense_compute = e.dense_flops_per_token * tokens / (peak * gemm_eff)
    moe_read = 0.0 * tokens
    moe_compute = 0.0 * tokens
    if spec.num_experts and e.moe_layers_per_stage:
        group_tokens = tokens * dp_busy  # DP attention ranks all feed the same experts
        ranks = e.tp * e.dp
        imbalance = eff.ep_imbalance if e.ep else 1.0
        width = spec.moe_intermediate_size if e.ep else spec.moe_intermediate_size / ranks
        curve = kernels.moe_curve(e.kernel_format)
        narrow_cols = eff.moe_narrow_cols * curve.narrow_cols / kernels.moe["bf16"].narrow_cols
        peak_kind = _peak_kind(gpu, e.compute)
        moe_eff = eff.moe_gemm * kernels.moe_ratio(e.kernel_format, peak_kind)
        if e.ep:
            moe_eff = moe_eff * kernels.ep_factor(e.kernel_format, ranks)
        moe_read = (e.expert_bytes_per_gpu * experts_touched(spec, group_tokens) * imbalance) / (
            hbm * eff.hbm
        )
        flops = e.expert_flops_per_token * group_tokens / ranks * imbalance
        # Thin expert slices cost what they cost on the measured GPU, scaled by bandwidth.
        narrow_s = (
            flops
            / (kernels.peak_tflops[peak_kind] * 1e12 * moe_eff)
            * (narrow_cols / width)
            * (kernels.hbm_tb_s / gpu.hbm_tb_s)
        )
        moe_compute = flops / (peak * moe_eff) + narrow_s
    weights_s = dense_read + moe_read
    linear_s = dense_compute + moe_compute
    linear_roof = np.maximum(dense_read, dense_compute) + np.maximum(moe_read, moe_compute)

    # Attention: KV reads against FLOPs for decode, FLOPs for the prefill chunk.
    heads = spec.num_attention_heads / e.tp
    layers = e.layers_per_stage
    context = _effective_context(spec, decode_context / np.maximum(decode, 1)) * decode
    kv_read = decode_context * e.kv_bytes_per_token / e.dcp / (hbm * eff.kv_read)
    decode_flops = _attention_flops(spec, heads, decode=True) * context / e.dcp * layers
    prefill_flops = _prefill_attention_flops(spec, heads, prefill, prefill_pairs) * layers
    # A prompt's attention runs at the efficiency FlashAttention reaches at its length (a
    # prompt processed whole has a mean context of half its length).
    prompt_len = 2 * prefill_pairs / np.maximum(prefill, 1.0)
    prefill_eff = eff.attention * kernels.prefill_shape(prompt_len)
    # The indexer scores in FP8 where the GPU has it (DeepSeek's kernels do).
    indexer_peak = peak_flops(gpu, "fp8")
    # Decode steps score their new token against the whole context, prompts every pair
    # (unless the measured sparse module prices the prompts' part).
    sparse_prompts = _sparse_prefill_s(spec, gpu, prefill, prompt_len, heads)
    scored = decode_context if sparse_prompts is not None else prefill_pairs + decode_context
    indexer_s = _indexer_flops(spec, scored) * layers / (indexer_peak * eff.attention)
    if sparse_prompts is not None:
        indexer_s = indexer_s + sparse_prompts * layers
    prefill_s = prefill_flops / (attn_peak * prefill_eff)
    attention_s = decode_flops / (attn_peak * eff.attention) + prefill_s + indexer_s
    attention_roof = (
        np.maximum(kv_read, decode_flops / (attn_peak * eff.attention)) + prefill_s + indexer_s
    )

    # Communication.
    hidden_bytes = tokens * spec.hidden_size * 2
    tp_s = 2 * layers * e.tp_link.collective_s(hidden_bytes, e.tp)
    moe_s = 0.0 * tokens
    moe_ranks = e.tp * e.dp
    # With DP 1 the MoE input is already on every TP rank and the combine is the TP
    # all-reduce, EP or not; only DP ranks' tokens travel through the all2all.
    if e.moe_layers_per_stage and e.dp > 1:
        # vLLM's default all2all gathers every DP rank's tokens to every expert rank and
        # reduce-scatters the outputs back: one gather and one scatter per MoE layer.
        link = Link(e.moe_link.kind, e.moe_link.busbw_GBps * eff.a2a)
        if e.all2all == "routed" and e.ep:
            # DeepEP-style kernels send each token only to the ranks holding its experts.
            fanout = min(spec.experts_per_token, moe_ranks) / moe_ranks
            sent = hidden_bytes * dp_busy / e.tp * fanout
        else:
            sent = hidden_bytes * dp_busy / e.tp
        moe_s = 2 * e.moe_layers_per_stage * link.collective_s(sent, moe_ranks, factor=1.0)
        if e.all2all == "naive":  # one broadcast per DP rank, each paying its latency
            moe_s = moe_s + 2 * e.moe_layers_per_stage * (dp_busy - 1) * LATENCY_S.get(
                link.kind, 60e-6
            )
    dcp_s = 0.0 * tokens
    if e.dcp > 1:
        qk = (spec.kv_lora_rank + spec.qk_rope_head_dim) if spec.is_mla else spec.head_dim
        partial = decode * heads * (qk + 1) * 4
        dcp_s = 3 * layers * e.tp_link.collective_s(partial, e.dcp, factor=1.0)
    pp_s = e.pp_link.collective_s(hidden_bytes, 2, factor=1.0) if e.pp > 1 else 0.0 * tokens

    # Overheads: launches per layer (CUDA graphs only for decode-only steps), CPU per step.
    graphs = (prefill <= 0) & (decode <= CUDA_GRAPH_MAX_BATCH)
    launch = kernels_per_step(spec, e) * (
        over.graph_kernel_s + np.where(graphs, 0.0, over.eager_kernel_s)
    )
    cpu = (over.step_s + over.seq_s * seqs + over.request_s * new_requests) * cpu_scale / e.pp
    gpu_busy = linear_roof + attention_roof + tp_s + moe_s + dcp_s + launch
    hidden_cpu = np.maximum(cpu - gpu_busy, 0.0) if params.async_scheduling else cpu
    overhead = launch + hidden_cpu
    return StepCost(
        weights_s=weights_s,
        linear_s=linear_s,
        linear_roof_s=linear_roof,
        kv_read_s=kv_read,
        attention_s=attention_s,
        attention_roof_s=attention_roof,
        tp_s=tp_s,
        moe_s=moe_s,
        pp_s=pp_s,
        dcp_s=dcp_s,
        overhead_s=overhead,
    )


def kernels_per_step(spec: ModelShape, e: EngineShape) -> float:
    """Kernels one stage launches per step, counted from the layer's structure. At small
    batch no kernel is busy long, so their count sets the step's floor.

    Per layer: norms, rotary, attention, activation and residual kernels (6); one per
    GEMM, and one more per GEMM where activations are quantised to FP8 first; GQA has two
    projections (qkv, out), MLA six (q down/up, kv down, two absorbed bmm, out); a dense MLP
    two; a routed MoE block its router, two grouped GEMMs and three routing kernels
    (top-k, alignment, combine), and a shared expert two GEMMs more.
    """
    per_gemm = 2 if e.compute == "fp8" else 1
    attention = 6 if spec.is_mla else 2
    dense_layer = 6 + per_gemm * (attention + 2)
    moe_layer = 6 + per_gemm * (attention + 2 + (2 if spec.num_shared_experts else 0)) + 4
    moe = e.moe_layers_per_stage
    return float(moe * moe_layer + (e.layers_per_stage - moe) * dense_layer)


def pipeline_step_s(cost: StepCost, pp: int) -> Any:
    """Time between two tokens of one sequence: with PP, the running batch splits into pp
    micro-batches that stream through the stages, so a sequence waits one full round."""
    return pp * cost.step_s + max(pp - 1, 0) * cost.pp_s


def flops_per_token(
    spec: ModelShape, params: dict[str, int], tp: int, pp: int
) -> tuple[float, float]:
    """(dense FLOPs per token per GPU, routed-expert FLOPs per token per stage, unsplit)."""
    active = active_params(spec, params)
    routed_active = 0.0
    if spec.num_experts:
        routed_active = params.get("routed_experts", 0) * spec.experts_per_token / spec.num_experts
    dense = 2 * (active - routed_active) / pp / tp
    return dense, 2 * routed_active / pp
