"""The non-KV terms of vLLM's per-GPU budget: activation peak, non-torch memory, CUDA graphs.

vLLM measures these in a profile run; we predict them from the model's shape. Each term is a
formula over the tensors vLLM really allocates, with constants fitted once on the public
start-up logs in tests/data/kv_cases (bench/kv_accuracy.py prints the fit quality):

- the profile run pushes max_num_batched_tokens through the model (forward peak: MLP and
  MoE intermediates, hidden-state copies), then a dummy sampler over min(max_num_seqs,
  max_num_batched_tokens) rows of fp32 logits (sampler peak). The torch peak is the larger
  of the two phases, not their sum;
- non-torch memory grows after the start-up snapshot: cuBLAS workspaces always, and with
  TP > 1 NCCL's lazily created buffers (large with NVLink SHARP on NVSwitch systems);
- from 0.20 the CUDA-graph estimate is subtracted before the KV cache is sized.
"""

from __future__ import annotations

from dataclasses import dataclass

from vfleet.catalog.model_shape import ModelShape

GIB = 1 << 30
BF16 = 2

# Sampler: fp32 logits plus the copies sampling makes (probabilities, sort values and
# indices), measured as ~3.6 logit-sized buffers across vocabularies from 49k to 262k.
SAMPLER_LOGIT_COPIES = 3.61
# vLLM 0.15 and 0.16 held about 9.5 logit-sized buffers in the sampler profile (llm-d's
# version sweep of the same Qwen3-14B launch: 5.64 GiB peak there, 2.23 in 0.17 and 0.18).
SAMPLER_LOGIT_COPIES_015 = 9.5
# Per-row sampler state (penalties, output token buffers): 0.125 GiB at 1,024 rows.
SAMPLER_BYTES_PER_ROW = 128 * 1024
# Forward peak per token: gate/up output (2 x I), activation output (I), and hidden-sized
# buffers (residual, norm output, qkv, attention output, ...): about seven in V1, which keeps
# persistent per-token input buffers, three in V0.
FORWARD_HIDDEN_COPIES = 7
FORWARD_HIDDEN_COPIES_V0 = 3
# MoE: routed-token buffers (dispatch and combine of topk x hidden per token) that stay
# live next to the sampler phase.
MOE_TOPK_HIDDEN_COPIES = 2
# Multimodal encoder profiling (vision towers) on top of the text profile.
VISION_PROFILE = int(0.2 * GIB)

NON_TORCH_BASE = int(0.25 * GIB)
NON_TORCH_NVSWITCH_TP = int(1.85 * GIB)
NON_TORCH_PCIE_TP = int(0.05 * GIB)
NCCL_INIT_CHARGED = int(0.6 * GIB)  # <=0.10: the snapshot preceded NCCL communicator init

CUDAGRAPH_BASE = int(0.3 * GIB)
CUDAGRAPH_PER_LAYER = int(0.01 * GIB)


@dataclass(frozen=True)
class ProfileShape:
    max_num_batched_tokens: int
    max_num_seqs: int
    tp: int
    is_first_stage: bool
    is_last_stage: bool
    moe_layers_on_rank: int
    v0_engine: bool = False
    version: tuple[int, int, int] = (0, 33, 0)
    mxfp4_experts: bool = False


def sampler_peak(spec: ModelShape, shape: ProfileShape) -> int:
    if not shape.is_last_stage or shape.v0_engine:
        return 0  # V0 profiled logits only for the last token of each prompt
    rows = min(shape.max_num_seqs, shape.max_num_batched_tokens)
    copies = SAMPLER_LOGIT_COPIES
    if (0, 15, 0) <= shape.version < (0, 17, 0):
        copies = SAMPLER_LOGIT_COPIES_015
    return int(copies * rows * spec.vocab_size * 4) + rows * SAMPLER_BYTES_PER_ROW


def forward_peak(spec: ModelShape, shape: ProfileShape) -> int:
    tokens = shape.max_num_batched_tokens
    widest = spec.intermediate_size / shape.tp
    if spec.is_moe:
        per_token_expert = spec.experts_per_token * spec.moe_intermediate_size / shape.tp
        widest = max(widest if spec.num_layers > len(spec.moe_layers) else 0, per_token_expert)
    copies = FORWARD_HIDDEN_COPIES_V0 if shape.v0_engine else FORWARD_HIDDEN_COPIES
    return int(tokens * (3 * widest + copies * spec.hidden_size) * BF16)


def activation_bytes(spec: ModelShape, shape: ProfileShape) -> int:
    peak = max(forward_peak(spec, shape), sampler_peak(spec, shape))
    if shape.moe_layers_on_rank and not shape.mxfp4_experts:  # MXFP4 kernels route in place
        peak += int(
            MOE_TOPK_HIDDEN_COPIES
            * shape.max_num_batched_tokens
            * spec.experts_per_token
            * spec.hidden_size
            * BF16
        )
    if spec.vision and shape.is_first_stage:
        peak += VISION_PROFILE
    return peak


def non_torch_bytes(tp: int, nvswitch: bool, nccl_inside_budget: bool) -> int:
    total = NON_TORCH_BASE
    if tp > 1:
        total += NON_TORCH_NVSWITCH_TP if nvswitch else NON_TORCH_PCIE_TP
        if nccl_inside_budget:
            total += NCCL_INIT_CHARGED
    return total


def cudagraph_bytes(layers_on_rank: int, enforce_eager: bool, subtracted: bool) -> int:
    if enforce_eager or not subtracted:
        return 0
    return CUDAGRAPH_BASE + CUDAGRAPH_PER_LAYER * layers_on_rank


def model_buffer_bytes(
    spec: ModelShape,
    max_num_batched_tokens: int,
    is_last_stage: bool,
    version: tuple[int, int, int],
    drafts_from_hidden_states: bool = False,
) -> int:
    """Buffers a model allocates while loading, counted in "Model loading took".

    DeepSeek V4 (models/deepseek_v4/nvidia/model.py): the indexer's shared top-k index buffer
    (int32, max_num_batched_tokens x index_topk) and, on the last PP stage, the residual
    stream kept for an MTP or EAGLE draft (max_num_batched_tokens x hc_mult x hidden) --
    always allocated before 0.27.0, only when such a draft runs from 0.27.0.
    """
    if not spec.is_dsv4:
        return 0
    total = max_num_batched_tokens * spec.index_topk * 4
    if is_last_stage and (version < (0, 27, 0) or drafts_from_hidden_states):
        total += max_num_batched_tokens * spec.hc_mult * spec.hidden_size * spec.dtype_bytes
    return total
