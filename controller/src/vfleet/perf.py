"""A cost model of one vLLM engine step: GPU roofline plus the communication each
parallelism adds, over the link it actually crosses.

One decode step on one GPU reads its weights (experts only where tokens were routed), reads
the KV of every running sequence, and does 2 FLOPs per active parameter per token. The
roofline takes the slower of memory and compute. Communication adds, per layer:
- TP: two all-reduces of the step's hidden states (attention out, MLP out);
- EP / MoE over DP: dispatch and combine all-to-all of topk x hidden per token;
- PP: one point-to-point send of hidden states per stage boundary;
- DCP: three small collectives per attention layer.
Each collective costs latency + bytes / bandwidth on the link its group spans.

Calibration: the H200 fixture (tests/data/gpu-hosts/h200-1gpu-ubuntu2404/calibrate.json)
measured bf16 GEMM ~780 TFLOP/s of 989 peak, fp8 ~1,340 of 1,979, and weight streaming at
small batch ~3.7 TB/s of 4.8. Other GPUs get their datasheet peaks times those ratios.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vfleet.gpus import Gpu
from vfleet.modelspec import ModelSpec

GB = 1e9
BF16_EFFICIENCY = 780 / 989
FP8_EFFICIENCY = 1340 / 1979
HBM_EFFICIENCY = 3.7 / 4.8
STEP_OVERHEAD_S = 0.4e-3  # scheduler, sampler, input preparation per step
LAYER_OVERHEAD_S = 6e-6  # kernel boundaries per layer with CUDA graphs
EP_IMBALANCE = 1.10  # hottest expert rank vs the mean without EPLB
# Fused-MoE kernels lose efficiency once TP slices an expert's width below ~512 columns
# (DeepSeek-V3 at TP8: 2048 / 8 = 256); applied to expert reads and FLOPs of MoE-TP.
NARROW_EXPERT_WIDTH = 512

HALF_BW_BYTES = 1.5e6
# vLLM's fused-MoE grouped GEMMs in prefill run well below dense GEMM efficiency; NVIDIA
# AIConfigurator's measured vLLM data for DeepSeek-V3 on H200 puts expert layers at about a
# third of the dense rate.
MOE_GEMM_EFFICIENCY = 0.33

# Collective latency by link: NCCL small-message latencies typical of each fabric.
LATENCY_S = {"nvlink": 8e-6, "pcie": 15e-6, "infiniband": 20e-6, "roce": 25e-6, "ethernet": 60e-6}


@dataclass(frozen=True)
class Link:
    kind: str  # nvlink | pcie | infiniband | roce | ethernet
    busbw_GBps: float

    def collective_s(self, nbytes: float, ranks: int, factor: float = 2.0) -> float:
        """Ring-style collective: factor x (n-1)/n of the bytes over the bus bandwidth.

        NCCL reaches its bus bandwidth only on large messages; a message of HALF_BW_BYTES
        gets half of it (decode steps move a few MB per collective).
        """
        if ranks <= 1:
            return 0.0
        volume = nbytes * factor * (ranks - 1) / ranks
        effective = self.busbw_GBps * GB * nbytes / (nbytes + HALF_BW_BYTES)
        return LATENCY_S.get(self.kind, 60e-6) + volume / effective


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
    kv_bytes_per_token: float  # per GPU
    active_params: float  # per token, whole model
    fp8_compute: bool
    tp_link: Link
    moe_link: Link  # the link the MoE all-to-all (or DP gather) crosses
    pp_link: Link


@dataclass(frozen=True)
class StepCost:
    gpu_s: float  # the two rooflines plus per-step overhead
    memory_s: float  # weights + KV read time alone, for the report
    compute_s: float  # linear + attention FLOP time alone, for the report
    tp_s: float
    moe_s: float
    pp_s: float
    dcp_s: float

    @property
    def step_s(self) -> float:
        return self.gpu_s + self.tp_s + self.moe_s + self.dcp_s


def active_params(spec: ModelSpec, params: dict[str, int]) -> float:
    """Parameters one token touches: everything but the experts it is not routed to."""
    total = sum(v for k, v in params.items() if k not in ("mtp", "vision", "embeddings"))
    routed = params.get("routed_experts", 0)
    if spec.num_experts:
        total -= routed * (1 - spec.experts_per_token / spec.num_experts)
    return float(total)


def experts_touched(spec: ModelSpec, tokens: float) -> float:
    """Fraction of experts that at least one of `tokens` tokens is routed to."""
    if not spec.num_experts:
        return 1.0
    miss = (1 - spec.experts_per_token / spec.num_experts) ** max(tokens, 0)
    return 1 - miss


def step_cost(
    spec: ModelSpec, gpu: Gpu, e: EngineShape, running: float, context: float, new_tokens: float
) -> StepCost:
    """One pipeline stage of one DP rank: `running` sequences decoding at `context` tokens
    of KV, plus `new_tokens` prefill tokens in the same step (chunked prefill).

    Linear layers are one roofline (weights read vs GEMM FLOPs, same kernels for decode and
    prefill tokens); attention is a second one (KV read vs attention FLOPs) that runs after
    it, so the two add.
    """
    tokens = running + new_tokens
    moe_group_tokens = tokens * e.dp  # DP attention ranks all feed the same experts
    hbm = gpu.hbm_tb_s * 1e12 * HBM_EFFICIENCY
    peak = (
        gpu.fp8_dense_tflops * FP8_EFFICIENCY
        if e.fp8_compute and gpu.fp8
        else gpu.bf16_dense_tflops * BF16_EFFICIENCY
    ) * 1e12
    if e.ep:
        imbalance = EP_IMBALANCE
    else:
        width = spec.moe_intermediate_size / (e.tp * e.dp) if spec.num_experts else 1e9
        imbalance = max(1.0, (NARROW_EXPERT_WIDTH / width) ** 0.25)
    expert_read = e.expert_bytes_per_gpu * experts_touched(spec, moe_group_tokens)
    weights_s = (e.dense_bytes_per_gpu + expert_read * imbalance) / hbm
    expert_share = _expert_share(spec)
    linear_flops = 2 * e.active_params / e.pp * tokens / e.tp
    linear_s = linear_flops * (1 - expert_share) / peak + (
        linear_flops * expert_share * imbalance / (peak * MOE_GEMM_EFFICIENCY)
    )
    heads = spec.num_attention_heads / e.tp
    qk = (spec.kv_lora_rank + spec.qk_rope_head_dim) if spec.is_mla else spec.head_dim
    kv_s = running * context * e.kv_bytes_per_token / e.dcp / hbm
    attention_flops = (
        4
        * heads
        * qk
        * e.layers_per_stage
        * (running * context / e.dcp + new_tokens * (context / 2))
    )
    attention_s = attention_flops / peak
    overhead = STEP_OVERHEAD_S / e.pp + LAYER_OVERHEAD_S * e.layers_per_stage
    hidden_bytes = tokens * spec.hidden_size * 2
    tp_s = 2 * e.layers_per_stage * e.tp_link.collective_s(hidden_bytes, e.tp)
    moe_s = 0.0
    moe_ranks = e.tp * e.dp
    if e.moe_layers_per_stage and moe_ranks > 1 and (e.ep or e.dp > 1):
        # vLLM's default all2all (allgather_reducescatter) gathers every DP rank's tokens
        # to every expert rank and reduce-scatters the outputs back.
        gathered = hidden_bytes * e.dp / e.tp
        moe_s = (
            2 * e.moe_layers_per_stage * e.moe_link.collective_s(gathered, moe_ranks, factor=1.0)
        )
    dcp_s = 0.0
    if e.dcp > 1:
        partial = running * heads * (qk + 1) * 4
        dcp_s = 3 * e.layers_per_stage * e.tp_link.collective_s(partial, e.dcp, factor=1.0)
    pp_s = e.pp_link.collective_s(hidden_bytes, 2, factor=2.0) if e.pp > 1 else 0.0
    gpu_s = max(weights_s, linear_s) + max(kv_s, attention_s) + overhead
    return StepCost(gpu_s, weights_s + kv_s, linear_s + attention_s, tp_s, moe_s, pp_s, dcp_s)


def _expert_share(spec: ModelSpec) -> float:
    """Fraction of a token's linear FLOPs spent in routed experts."""
    if not spec.num_experts:
        return 0.0
    per_expert = 3 * spec.hidden_size * spec.moe_intermediate_size
    routed = per_expert * spec.experts_per_token * len(spec.moe_layers)
    dense = 12 * spec.hidden_size * spec.hidden_size * spec.num_layers  # attention-ish
    shared = 3 * spec.hidden_size * spec.shared_expert_intermediate_size * len(spec.moe_layers)
    mlp = 3 * spec.hidden_size * spec.intermediate_size * (spec.num_layers - len(spec.moe_layers))
    return routed / (routed + dense + shared + mlp)


@dataclass(frozen=True)
class Prediction:
    running_per_rank: int
    tpot_s: float  # mean inter-token time, prefill interleaved at the steady-state rate
    itl_p99_s: float  # a step that also carries a full prefill chunk
    ttft_p99_s: float
    output_tokens_per_s: float  # per engine
    cost: StepCost


def predict(
    spec: ModelSpec,
    gpu: Gpu,
    e: EngineShape,
    running: int,
    context: float,
    input_mean: float,
    output_mean: float,
    input_p99: float,
    max_num_batched_tokens: int,
) -> Prediction:
    """Steady state of one engine with `running` sequences per DP rank."""
    steady_prefill = running * input_mean / max(output_mean, 1)
    # With PP, `running` splits into pp micro-batches that stream through the stages.
    micro = running / e.pp
    cost = step_cost(spec, gpu, e, micro, context, steady_prefill / e.pp)
    tpot = e.pp * cost.step_s + (e.pp - 1) * cost.pp_s
    chunk = max(max_num_batched_tokens - running, 1)
    # The chunk rides in one micro-batch; a token waits for one such step and pp - 1
    # ordinary ones on its way round the pipeline.
    worst = step_cost(spec, gpu, e, micro, context, chunk)
    itl_p99 = worst.step_s + (e.pp - 1) * (cost.step_s + worst.pp_s)
    ttft = math.ceil(input_p99 / chunk) * itl_p99
    throughput = running * e.dp / tpot if tpot > 0 else 0.0
    return Prediction(running, tpot, itl_p99, ttft, throughput, cost)
