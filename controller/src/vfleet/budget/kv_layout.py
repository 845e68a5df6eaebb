"""KV-cache layout per rank: bytes per token, blocks, and token capacity, as vLLM counts them.

Three shapes, following vLLM's get_kv_cache_groups (docs/references.md#kv-cache-groups):
- all layers full attention (GQA/MHA, MLA, MLA + V3.2 indexer): one group, a block holds
  block_size tokens of every layer;
- full + sliding-window layers (Gemma-2/3, gpt-oss): layers split into equal-size groups that
  share one block pool; a request needs blocks in every group;
- DeepSeek V4 packed caches (compressed CSA/HCA, SWA, compressor and indexer state).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vfleet.budget import kv_dsv4
from vfleet.catalog.model_shape import ModelShape
from vfleet.errors import UserError

KV_DTYPES = (
    "auto",
    "bfloat16",
    "float16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_ds_mla",
    "fp8_inc",
    "int8_per_token_head",
    "fp8_per_token_head",
)

# Bytes per token per layer of DeepSeek's packed FP8 latent formats
# (docs/references.md#bytes-per-token).
FP8_DS_MLA_ROW = 656
DSV4_ROW = 584
INDEXER_ROW_DSV32 = 132


@dataclass(frozen=True)
class KvLayout:
    """Per-rank KV facts for one pipeline stage."""

    bytes_per_token: int  # per GPU, per token of context, all layers of the stage
    block_size: int
    bytes_per_block: int  # one block across every group of the stage
    num_groups: int
    full_groups: int
    sliding_groups: int
    sliding_window: int
    kv_dtype: str  # resolved storage format
    # Chunked local attention (Llama 4): groups of layers that attend within fixed chunks.
    chunked_groups: int = 0
    attention_chunk_size: int = 0
    # DeepSeek V4 only: its groups and the release's block and concurrency rules.
    dsv4: kv_dsv4.Dsv4Cache | None = None

    @property
    def min_block_size(self) -> int:
        return self.dsv4.min_block_size if self.dsv4 else self.block_size


def resolve_kv_dtype(
    spec: ModelShape, kv_cache_dtype: str, version: tuple[int, int, int], arch: str
) -> str:
    """What the cache really stores for this model, dtype flag, release and GPU."""
    if kv_cache_dtype not in KV_DTYPES:
        raise UserError(
            f"--kv-cache-dtype {kv_cache_dtype} is not supported here: use auto, bfloat16, "
            "float16, fp8, fp8_e4m3, fp8_e5m2 or fp8_ds_mla"
        )
    fp8 = kv_cache_dtype.startswith("fp8") or kv_cache_dtype.endswith("per_token_head")
    if spec.is_dsv4:
        return "fp8_ds_mla"  # V4 only runs with the packed fp8 format
    if spec.is_mla and spec.index_head_dim:  # DeepSeek V3.2 sparse attention
        if kv_cache_dtype == "auto" and version < (0, 12, 0):
            return "fp8_ds_mla"  # 0.11 defaulted V3.2 to fp8
        if fp8:
            return "fp8" if arch == "blackwell" and kv_cache_dtype != "fp8_ds_mla" else "fp8_ds_mla"
        return "auto"
    if kv_cache_dtype == "fp8_ds_mla":
        return "fp8_ds_mla" if spec.is_mla else "fp8"
    return "fp8" if fp8 else "auto"  # bfloat16/float16 store like auto on bf16/fp16 models


def element_bytes(spec: ModelShape, kv_dtype: str, dtype_bytes: int) -> int:
    return 1 if kv_dtype.startswith("fp8") else dtype_bytes


def layer_row_bytes(spec: ModelShape, kv_dtype: str, dtype_bytes: int, tp: int) -> int:
    """Bytes one token takes in one layer on one GPU (K and V, or the MLA latent)."""
    e = element_bytes(spec, kv_dtype, dtype_bytes)
    if spec.is_mla:
        row = (
            FP8_DS_MLA_ROW
            if kv_dtype == "fp8_ds_mla"
            else ((spec.kv_lora_rank + spec.qk_rope_head_dim) * e)
        )
        if spec.index_head_dim:
            row += spec.index_head_dim + spec.index_head_dim // 128 * 4
        return row
    heads = max(1, spec.num_kv_heads // tp)
    return 2 * heads * spec.head_dim * e


def default_block_size(
    spec: ModelShape, kv_dtype: str, version: tuple[int, int, int], arch: str
) -> int:
    """The block size vLLM picks when --block-size is not given (docs/references.md#block-size)."""
    if spec.is_dsv4:
        return 256
    if spec.is_mla:
        if spec.index_head_dim:
            return 64
        if arch == "hopper":
            if version >= (0, 20, 0) and not kv_dtype.startswith("fp8"):
                return 16  # FLASH_ATTN_MLA takes bf16 with 16-token blocks
            return 64  # FlashMLA
        if arch == "blackwell":
            return 64 if spec.qk_nope_head_dim == 128 or version >= (0, 20, 0) else 128
        return 16  # Triton MLA on Ampere/Ada
    return 16


def _hybrid_groups(counts: list[int]) -> tuple[int, list[int]]:
    """(group_size, groups per attention kind) as _get_kv_cache_groups_uniform_page_size:
    groups as large as the biggest kind when the kinds differ by less than 1.5x, else as
    the smallest, each kind padded up to whole groups."""
    small, large = min(counts), max(counts)
    group_size = large if large < 1.5 * small else small
    return group_size, [math.ceil(n / group_size) for n in counts]


def stage_layout(
    spec: ModelShape,
    layers: range,
    kv_dtype: str,
    dtype_bytes: int,
    tp: int,
    block_size: int,
    *,
    version: tuple[int, int, int] = (0, 33, 0),
    mtp_layers: int = 0,
    draft_rows: tuple[int, ...] = (),
    chunked_local_hybrid: bool = False,
) -> KvLayout:
    """The KV layout of one pipeline stage.

    Chunked local layers keep their own groups only with chunked_local_hybrid (the
    VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 opt-in); by default vLLM turns the
    hybrid manager off for such models and caches every layer as full attention.
    """
    if spec.is_dsv4:
        return _dsv4_layout(spec, layers, version, mtp_layers)
    row = layer_row_bytes(spec, kv_dtype, dtype_bytes, tp)
    sliding_set = set(spec.sliding_layers)
    chunked_set = set(spec.chunked_layers) if chunked_local_hybrid else set()
    n_sliding = sum(1 for i in layers if i in sliding_set)
    n_chunked = sum(1 for i in layers if i in chunked_set and i not in sliding_set)
    n_full = len(layers) - n_sliding - n_chunked
    # A drafter's attention layers join the target's KV spec (vfleet.budget.speculative): MTP
    # layers have the target's row, an EAGLE head its own (draft_rows), all full attention.
    extra = (row,) * mtp_layers + tuple(draft_rows)
    windowed = n_sliding or n_chunked
    if extra and windowed and (not n_full or set(extra) != {row}):
        raise UserError(
            f"a draft model on sliding-window {spec.name} is not modelled here (its layers "
            "change the cache groups): budget it without speculative decoding"
        )
    n_full += len(extra)
    bytes_per_token = row * len(layers) + sum(extra)
    kinds = [
        (kind, n)
        for kind, n in (("full", n_full), ("sliding", n_sliding), ("chunked", n_chunked))
        if n
    ]
    if len(kinds) == 1:
        # One group: uniform full attention, or every layer windowed alike.
        group_size, per_kind = 1, [1]
        bytes_per_block = bytes_per_token * block_size
    else:
        group_size, per_kind = _hybrid_groups([n for _, n in kinds])
        bytes_per_block = group_size * row * block_size
    groups = {kind: g for (kind, _), g in zip(kinds, per_kind, strict=True)}
    return KvLayout(
        bytes_per_token,
        block_size,
        bytes_per_block,
        sum(per_kind),
        groups.get("full", 0),
        groups.get("sliding", 0),
        spec.sliding_window if n_sliding else 0,
        kv_dtype,
        chunked_groups=groups.get("chunked", 0),
        attention_chunk_size=spec.attention_chunk_size if n_chunked else 0,
    )


def _dsv4_layout(
    spec: ModelShape, layers: range, version: tuple[int, int, int], mtp_layers: int
) -> KvLayout:
    cache = kv_dsv4.plan(spec, layers, version, mtp_layers)
    full = cache.full
    # Bytes per token of context in the full-length (compressed) caches: what attention reads.
    per_token = round(full.page_bytes / full.block_size)
    return KvLayout(
        per_token,
        full.block_size,
        cache.bytes_per_block,
        len(cache.groups),
        1,
        len(cache.groups) - 1,
        spec.sliding_window,
        "fp8_ds_mla",
        dsv4=cache,
    )


def group_summary(kv: KvLayout) -> list[dict[str, int | str]]:
    """The KV cache groups one block spans, for reports and --json."""
    if kv.dsv4:
        return [
            {
                "kind": g.kind,
                "block_size": g.block_size,
                "window": g.window,
                "layers": len(g.pages),
                "page_bytes": g.page_bytes,
            }
            for g in kv.dsv4.groups
        ]
    per_group = kv.bytes_per_block // max(kv.num_groups, 1)
    kinds = (
        ("full", kv.full_groups, 0),
        ("sliding", kv.sliding_groups, kv.sliding_window),
        ("chunked", kv.chunked_groups, kv.attention_chunk_size),
    )
    return [
        {"kind": kind, "block_size": kv.block_size, "window": window, "page_bytes": per_group}
        for kind, count, window in kinds
        for _ in range(count)
    ]


def blocks_per_request(
    kv: KvLayout,
    max_model_len: int,
    max_in_flight_tokens: int,
    dcp: int = 1,
    retained_tokens: int = 0,
) -> float:
    """Blocks one request of max_model_len tokens needs across every group.

    retained_tokens: extra tokens sliding windows keep for multi-module MTP (vLLM's
    SlidingWindowSpec.extra_retained_tokens; chunked local attention has none).
    """
    if kv.dsv4:
        return kv_dsv4.blocks_per_request(
            kv.dsv4, max_model_len, max_in_flight_tokens, dcp, retained_tokens
        )
    full = kv.full_groups * math.ceil(math.ceil(max_model_len / dcp) / kv.block_size)
    window = 0
    if kv.sliding_groups:
        span = min(kv.sliding_window - 1 + retained_tokens + max_in_flight_tokens, max_model_len)
        window = kv.sliding_groups * (math.ceil(span / kv.block_size) + 1)
    chunked = 0
    if kv.chunked_groups:
        # One chunk plus the in-flight tokens, no partial block (ChunkedLocalAttentionSpec).
        span = min(kv.attention_chunk_size + max_in_flight_tokens, max_model_len)
        chunked = kv.chunked_groups * math.ceil(span / kv.block_size)
    return full + window + chunked
