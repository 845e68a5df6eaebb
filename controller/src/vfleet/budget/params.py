"""Parameter counts by component, and how vLLM shards them over TP / PP / DP / EP ranks.

Every tensor group carries a shard rule that mirrors the vLLM layer it lands in:
- "tp": Column/RowParallelLinear, split evenly over the tensor-parallel group;
- "kv": K/V projections, split by KV head, each rank keeping at least one whole head;
- "vocab": VocabParallelEmbedding / ParallelLMHead, vocab padded to 64 then split;
- "replicated": norms, routers, MLA down-projections (q_a, kv_a), vision towers;
- "experts": routed experts, split over TP x DP (tensor-sharded, or whole experts with EP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vfleet.budget.quant import Mxfp4Layout, WeightFormat, mxfp4_expert_bytes, weight_format
from vfleet.catalog.model_shape import ModelShape

VOCAB_PADDING = 64
FP32_BYTES = 4


@dataclass(frozen=True)
class TensorGroup:
    component: str  # embeddings|attention|dense_mlp|routed_experts|shared_experts|router|...
    params: int
    shard: str
    kv_heads: int = 0  # for shard == "kv": heads in this tensor group


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    enable_expert_parallel: bool = False
    dcp: int = 1

    @property
    def label(self) -> str:
        """The layout as people and the plan write it, e.g. 'TP2 DP4 EP'."""
        text = f"TP{self.tp}"
        if self.pp > 1:
            text += f" PP{self.pp}"
        if self.dp > 1:
            text += f" DP{self.dp}"
        if self.enable_expert_parallel:
            text += " EP"
        if self.dcp > 1:
            text += f" DCP{self.dcp}"
        return text


def pp_partition(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage exactly as vLLM's get_pp_indices splits them.

    The remainder goes one layer each to the stages before the last, counting back from the
    second-to-last, so the last stage (which also holds the norm and LM head) stays light.
    """
    if pp < 1 or pp > num_layers:
        raise ValueError(f"pipeline size {pp} does not fit {num_layers} layers")
    parts = [num_layers // pp] * pp
    for i in range(num_layers % pp):
        parts[-(i + 2)] += 1
    return parts


def stage_layers(num_layers: int, pp: int, rank: int) -> range:
    parts = pp_partition(num_layers, pp)
    start = sum(parts[:rank])
    return range(start, start + parts[rank])


def _attention(spec: ModelShape, layer: int) -> list[TensorGroup]:
    h, nh = spec.hidden_size, spec.num_attention_heads
    if spec.is_dsv4:
        return _attention_dsv4(spec, layer)
    if spec.is_mla:
        qk_head = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        groups = [
            TensorGroup(
                "attention",
                h * (spec.q_lora_rank + spec.kv_lora_rank + spec.qk_rope_head_dim)
                if spec.q_lora_rank
                else h * (spec.kv_lora_rank + spec.qk_rope_head_dim),
                "replicated",
            ),
            TensorGroup("attention", (spec.q_lora_rank or h) * nh * qk_head, "tp"),
            TensorGroup(
                "attention",
                spec.kv_lora_rank * nh * (spec.qk_nope_head_dim + spec.v_head_dim),
                "tp",
            ),
            TensorGroup("attention", nh * spec.v_head_dim * h, "tp"),
            TensorGroup("norms", spec.kv_lora_rank + spec.q_lora_rank, "replicated"),
        ]
        if spec.index_head_dim:  # DeepSeek V3.2 lightning indexer, replicated
            groups.append(
                TensorGroup(
                    "indexer",
                    spec.q_lora_rank * spec.index_n_heads * spec.index_head_dim
                    + h * spec.index_head_dim
                    + h * spec.index_n_heads,
                    "replicated",
                )
            )
        return groups
    hd, nkv = spec.head_dim, spec.num_kv_heads
    bias = 1 if spec.attention_bias else 0  # Qwen2-style q/k/v biases
    return [
        TensorGroup("attention", (h + bias) * nh * hd, "tp"),
        TensorGroup("attention", 2 * (h + bias) * nkv * hd, "kv", kv_heads=nkv),
        TensorGroup("attention", nh * hd * h, "tp"),
    ]


def _attention_dsv4(spec: ModelShape, layer: int) -> list[TensorGroup]:
    """DeepSeek V4: low-rank Q, one shared 512-wide KV head, grouped low-rank output,
    plus a KV compressor (and, on ratio-4 layers, an indexer with its own compressor)."""
    h, nh, hd = spec.hidden_size, spec.num_attention_heads, spec.head_dim
    groups = [
        TensorGroup("attention", h * spec.q_lora_rank + h * hd, "replicated"),
        TensorGroup("attention", spec.q_lora_rank * nh * hd, "tp"),
        TensorGroup("attention", nh * hd * spec.o_lora_rank, "tp"),
        TensorGroup("attention", spec.o_groups * spec.o_lora_rank * h, "tp"),
    ]
    ratio = spec.compress_ratios[layer] if layer < len(spec.compress_ratios) else 0
    if ratio:
        # The compressor's fused wkv/wgate is unquantized (bf16) and replicated.
        coff = 2 if ratio == 4 else 1
        groups.append(TensorGroup("compressor", 2 * h * coff * hd, "replicated"))
    if ratio == 4 and spec.index_head_dim:
        ih = spec.index_head_dim
        # Indexer: FP8 wq_b; bf16 weights_proj and its own compressor; all replicated.
        groups.append(
            TensorGroup("indexer", spec.q_lora_rank * spec.index_n_heads * ih, "replicated")
        )
        groups.append(
            TensorGroup("compressor", h * spec.index_n_heads + 2 * h * 2 * ih, "replicated")
        )
    if spec.hc_mult:
        # Hyper-connections: fp32 mixing weights for the attention and FFN sublayers.
        mix = (2 + spec.hc_mult) * spec.hc_mult
        groups.append(
            TensorGroup("hyper_connections", 2 * (mix * spec.hc_mult * h + mix + 3), "replicated")
        )
    return groups


def _mlp(spec: ModelShape, layer: int) -> list[TensorGroup]:
    h = spec.hidden_size
    mats = 3 if spec.gated_mlp else 2
    if not spec.is_moe_layer(layer):
        return [TensorGroup("dense_mlp", mats * h * spec.intermediate_size, "tp")]
    groups = [
        TensorGroup(
            "routed_experts", spec.num_experts * 3 * h * spec.moe_intermediate_size, "experts"
        ),
        TensorGroup("router", spec.num_experts * h, "replicated"),
    ]
    if spec.shared_expert_intermediate_size:
        groups.append(
            TensorGroup("shared_experts", 3 * h * spec.shared_expert_intermediate_size, "tp")
        )
    return groups


def layer_groups(spec: ModelShape, layer: int) -> list[TensorGroup]:
    norms = TensorGroup("norms", 2 * spec.hidden_size, "replicated")
    return [*_attention(spec, layer), *_mlp(spec, layer), norms]


def padded_vocab(spec: ModelShape) -> int:
    return math.ceil(spec.vocab_size / VOCAB_PADDING) * VOCAB_PADDING


_COUNTS: dict[int, tuple[ModelShape, dict[str, int]]] = {}


def component_params(spec: ModelShape) -> dict[str, int]:
    """Whole-model parameter counts by component (what the checkpoint holds). Kept for the
    last specs seen: a plan asks for the same model's counts once per layout."""
    hit = _COUNTS.get(id(spec))
    if hit is not None and hit[0] is spec:
        return dict(hit[1])
    counts = _count_components(spec)
    if len(_COUNTS) > 32:
        _COUNTS.clear()
    _COUNTS[id(spec)] = (spec, counts)
    return dict(counts)


def _count_components(spec: ModelShape) -> dict[str, int]:
    counts: dict[str, int] = {}

    def add(component: str, n: int) -> None:
        counts[component] = counts.get(component, 0) + n

    add("embeddings", spec.vocab_size * spec.hidden_size)
    for layer in range(spec.num_layers):
        for group in layer_groups(spec, layer):
            add(group.component, group.params)
    add("norms", spec.hidden_size)
    if not spec.tie_word_embeddings:
        add("lm_head", spec.vocab_size * spec.hidden_size)
    if spec.num_mtp_layers:
        mtp_layer = max(spec.num_layers - 1, 0)
        per_mtp = sum(g.params for g in layer_groups(spec, mtp_layer))
        add("mtp", spec.num_mtp_layers * (per_mtp + 2 * spec.hidden_size * spec.hidden_size))
    if spec.vision:
        add("vision", spec.vision.params)
    return counts


def _rank_params(group: TensorGroup, spec: ModelShape, layout: Layout) -> float:
    tp = layout.tp
    if group.shard == "tp":
        return group.params / tp
    if group.shard == "kv":
        per_head = group.params / max(group.kv_heads, 1)
        return per_head * max(1, group.kv_heads // tp)
    if group.shard == "experts":
        ranks = tp * layout.dp
        if layout.enable_expert_parallel:
            per_expert = group.params / spec.num_experts
            return per_expert * math.ceil(spec.num_experts / ranks)
        return group.params / ranks
    return float(group.params)


def _mxfp4_rank_expert_bytes(spec: ModelShape, layout: Layout, mxfp4: Mxfp4Layout) -> float:
    """One MoE layer's MXFP4 experts on one rank, in the backend's padded layout.

    Without expert parallelism FusedMoE splits every expert's intermediate dimension over
    TP x DP (intermediate_size // tp_size, then the backend's round-up); with it each rank
    keeps whole experts, at most ceil(E / ranks) of them. Biases are counted: vLLM's MXFP4
    MoE method allocates w13/w2 biases (gpt-oss has them).
    """
    ranks = layout.tp * layout.dp
    if layout.enable_expert_parallel:
        experts, inter = math.ceil(spec.num_experts / ranks), spec.moe_intermediate_size
    else:
        experts, inter = spec.num_experts, spec.moe_intermediate_size // ranks
    return float(mxfp4_expert_bytes(mxfp4, spec.hidden_size, inter, experts))


_GROUPS: dict[int, tuple[ModelShape, dict[int, tuple[TensorGroup, ...]]]] = {}


def _layer_groups_cached(spec: ModelShape, layer: int) -> tuple[TensorGroup, ...]:
    hit = _GROUPS.get(id(spec))
    if hit is None or hit[0] is not spec:
        if len(_GROUPS) > 32:
            _GROUPS.clear()
        hit = (spec, {})
        _GROUPS[id(spec)] = hit
    groups = hit[1].get(layer)
    if groups is None:
        fresh = tuple(layer_groups(spec, layer))
        # Layers of one kind share one tuple, so callers may key on its identity.
        groups = next((g for g in hit[1].values() if g == fresh), fresh)
        hit[1][layer] = groups
    return groups


def _priced(
    group: TensorGroup, spec: ModelShape, fmt: WeightFormat, layout: Layout
) -> tuple[str, float]:
    """One tensor group's bytes on one rank."""
    if group.shard == "experts" and fmt.mxfp4 is not None:
        return group.component, _mxfp4_rank_expert_bytes(spec, layout, fmt.mxfp4)
    if group.component == "hyper_connections":
        return group.component, _rank_params(group, spec, layout) * FP32_BYTES
    return group.component, _rank_params(group, spec, layout) * fmt.bytes_per_param(group.component)


def groups_bytes(
    groups: list[TensorGroup], spec: ModelShape, fmt: WeightFormat, layout: Layout
) -> float:
    """Bytes on one rank of tensor groups that `spec`'s layers would hold (draft layers)."""
    return sum(_priced(group, spec, fmt, layout)[1] for group in groups)


def rank_weight_bytes(
    spec: ModelShape, fmt: WeightFormat, layout: Layout, pp_rank: int
) -> dict[str, float]:
    """Bytes of weights one GPU of pipeline stage `pp_rank` holds, by component."""
    out: dict[str, float] = {}

    def add(component: str, kind: str, n: float) -> None:
        out[component] = out.get(component, 0.0) + n * fmt.bytes_per_param(kind)

    first, last = pp_rank == 0, pp_rank == layout.pp - 1
    vocab_rank = padded_vocab(spec) / layout.tp * spec.hidden_size
    if first:
        add("embeddings", "embeddings", vocab_rank)
        if spec.vision:
            add("vision", "vision", spec.vision.params)
    if last and (not spec.tie_word_embeddings or (layout.pp > 1 and not first)):
        add("lm_head", "lm_head", vocab_rank)
    # Layers of one kind hold the same tensors: price each kind once, add in layer order.
    priced: dict[int, list[tuple[str, float]]] = {}
    for layer in stage_layers(spec.num_layers, layout.pp, pp_rank):
        groups = _layer_groups_cached(spec, layer)
        parts = priced.get(id(groups))
        if parts is None:
            parts = [_priced(group, spec, fmt, layout) for group in groups]
            priced[id(groups)] = parts
        for component, value in parts:
            out[component] = out.get(component, 0.0) + value
    if last and spec.hc_mult:
        hc_dim = spec.hc_mult * spec.hidden_size
        out["hyper_connections"] = out.get("hyper_connections", 0.0) + FP32_BYTES * (
            spec.hc_mult * hc_dim + spec.hc_mult + 1
        )
    out["rotary_cache"] = rotary_cache_bytes(spec, fmt)
    return out


def rotary_cache_bytes(spec: ModelShape, fmt: WeightFormat) -> float:
    """Rotary cos/sin cache: max_position x rotary dim, one per distinct RoPE base.

    DeepSeek V4 keeps it in fp32 (DeepseekV4ScalingRotaryEmbedding) and has two bases:
    rope_theta on window-only layers and compress_rope_theta on compressed ones.
    """
    rotary = spec.qk_rope_head_dim or spec.head_dim
    if spec.is_dsv4:
        bases = 1 + (any(spec.compress_ratios) and not all(spec.compress_ratios))
        return float(bases * spec.max_position_embeddings * rotary * FP32_BYTES)
    return float(spec.max_position_embeddings * rotary * fmt.dtype_bytes)


def checkpoint_bytes(spec: ModelShape) -> float:
    """Bytes of the model's weights as its checkpoint stores them (its own quantization, one
    copy of every tensor): what a host's disk must hold before the engine can load it."""
    fmt = weight_format(spec.quantization, spec.model_type, spec.dtype_bytes)
    whole = rank_weight_bytes(spec, fmt, Layout(), 0)
    return sum(v for k, v in whole.items() if k != "rotary_cache")
