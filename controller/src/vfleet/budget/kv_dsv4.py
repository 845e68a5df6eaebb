"""DeepSeek-V4's hybrid KV cache, planned the way each vLLM release plans it.

Every V4 layer keeps a sliding-window cache; compressed layers (ratio 4, "CSA", and ratio 128,
"HCA") add a compressed full-length cache and an fp32 compressor state, and CSA layers an
indexer cache and its compressor state. vLLM groups these into one full-MLA group and window
groups that share one block pool. Sources are files of the vLLM release wheels (paths inside
the `vllm/` package of 0.23.0 unless named), as summarised in docs/references.md#deepseek-v4-kv:

- per-layer specs: models/deepseek_v4/attention.py (get_kv_cache_spec, the indexer cache),
  models/deepseek_v4/compressor.py (CompressorStateCache), v1/attention/backends/mla/
  sparse_swa.py (DeepseekV4SWACache, 64-token blocks);
- page sizes: v1/kv_cache_interface.py (584-byte fp8_ds_mla rows, 576-byte alignment);
- grouping: v1/core/kv_cache_utils.py group_and_unify_kv_cache_specs,
  _approximate_gcd and _get_kv_cache_groups_uniform_groups;
- bytes per block: _get_kv_cache_config_deepseek_v4 (0.20.2: tuples x tuple bytes; 0.23:
  per page-size slots) and, from 0.27.0, _get_packed_kv_cache_layout (widest group);
- printed concurrency: get_max_concurrency_for_kv_cache_config (before 0.27 weighted by the
  first group's page; from 0.27 the plain sum of each group's blocks per request).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from vfleet.catalog.model_shape import ModelShape
from vfleet.errors import UserError

ALIGN = 576  # FlashMLA's paged layout wants pages in multiples of 576 bytes
ROW = 584  # fp8_ds_mla: 448 B fp8 NoPE + 128 B bf16 RoPE + 8 B scales per token
FULL_BLOCK = 256  # the SWA backend's preferred block size, taken by the whole model
SWA_BLOCK = 64
FP32 = 4
MIN_RELEASE = (0, 20, 0)


@dataclass(frozen=True)
class CacheGroup:
    """One KV cache group: layers that allocate blocks together."""

    kind: str  # "full", "swa", "csa_state" or "hca_state"
    block_size: int
    window: int  # tokens a window group keeps; 0 for the full group
    pages: tuple[int, ...]  # padded page bytes of each layer in the group

    @property
    def page_bytes(self) -> int:
        return sum(self.pages)


@dataclass(frozen=True)
class Dsv4Cache:
    groups: tuple[CacheGroup, ...]
    bytes_per_block: int
    version: tuple[int, int, int]

    @property
    def min_block_size(self) -> int:
        return min(g.block_size for g in self.groups)

    @property
    def full(self) -> CacheGroup:
        return self.groups[0]


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _indexer_row(spec: ModelShape) -> int:
    # 128 fp8 values plus one fp32 scale per 128-value quant block.
    return spec.index_head_dim + spec.index_head_dim // 128 * FP32


def kv_layer_ratios(spec: ModelShape, layers: range, mtp_layers: int) -> list[int]:
    """Compress ratio of every layer that registers KV, the MTP layers last.

    An MTP layer (index >= num_hidden_layers) is SWA-only whatever compress_ratios lists for
    it: DeepseekV4Attention sets compress_ratio = 1 there (models/deepseek_v4/attention.py
    0.23.0 L178-181, 0.33.0 L238-242; 0.20.x model_executor/models/deepseek_v4.py L900-903),
    and one MTP layer is built per num_nextn_predict_layers (nvidia/mtp.py).
    """
    ratios = [spec.compress_ratios[i] if i < len(spec.compress_ratios) else 0 for i in layers]
    return ratios + [1] * mtp_layers


def _layer_caches(spec: ModelShape, ratio: int) -> list[tuple[str, int, int, int]]:
    """(group key, block size, window, unpadded page bytes) of each cache one layer adds."""
    caches = [("swa", SWA_BLOCK, spec.sliding_window, _round_up(SWA_BLOCK * ROW, ALIGN))]
    if ratio <= 1:
        return caches
    caches.append(("full", FULL_BLOCK, 0, _round_up(FULL_BLOCK // ratio * ROW, ALIGN)))
    overlap = 2 if ratio == 4 else 1  # CSA windows overlap by one ratio
    state_block, state_kind = (4, "csa_state") if ratio == 4 else (8, "hca_state")
    # The state holds kv and score vectors for `overlap` windows, in fp32.
    state_page = state_block * 2 * overlap * spec.head_dim * FP32
    caches.append((state_kind, state_block, overlap * ratio, _round_up(state_page, ALIGN)))
    if ratio == 4 and spec.index_head_dim:
        indexer_page = FULL_BLOCK // ratio * _indexer_row(spec)
        caches.append(("full", FULL_BLOCK, 0, _round_up(indexer_page, ALIGN)))
        indexer_state = state_block * 2 * overlap * spec.index_head_dim * FP32
        caches.append((state_kind, state_block, overlap * ratio, _round_up(indexer_state, ALIGN)))
    return caches


def _approximate_gcd(values: list[int], lower_bound: int) -> int:
    """The tuple count with the least total round-up padding; ties take the larger."""
    best, best_pad = lower_bound, None
    for d in range(lower_bound, max(max(values), lower_bound) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad <= best_pad:
            best, best_pad = d, pad
    return best


def plan(
    spec: ModelShape, layers: range, version: tuple[int, int, int], mtp_layers: int = 0
) -> Dsv4Cache:
    """The groups and bytes per block vLLM gives one rank holding `layers`."""
    if version < MIN_RELEASE:
        raise UserError(
            "DeepSeek-V4 needs vLLM 0.20.0 or later: pass --vllm-version 0.20.0 or newer"
        )
    full_pages: list[int] = []
    window_layers: dict[tuple[str, int, int], list[int]] = {}
    for ratio in kv_layer_ratios(spec, layers, mtp_layers):
        for kind, block, window, page in _layer_caches(spec, ratio):
            if kind == "full":
                full_pages.append(page)
            else:
                window_layers.setdefault((kind, block, window), []).append(page)
    if not full_pages:
        raise UserError(
            "a DeepSeek-V4 pipeline stage without a compressed layer cannot be planned: "
            "use fewer pipeline stages"
        )
    full_sizes = sorted(set(full_pages))

    def tuples(pages: list[int]) -> int:
        return Counter(pages).most_common(1)[0][1]

    counts = [tuples(full_pages)]
    counts += [tuples(p) for p in window_layers.values()]
    n_tuples = _approximate_gcd(counts, counts[0])

    groups = [CacheGroup("full", FULL_BLOCK, 0, tuple(full_pages))]
    for (kind, block, window), pages in window_layers.items():
        # Window pages are padded up to the nearest full-group page so they share tensors.
        padded = [min((s for s in full_sizes if s >= p), default=p) for p in pages]
        sizes = sorted(set(padded))
        per_size = len(padded) // len(sizes)
        layer_tuples = [tuple(sizes)] * per_size
        n_groups = math.ceil(per_size / n_tuples)
        for i in range(n_groups):
            members = layer_tuples[i::n_groups]
            groups.append(CacheGroup(kind, block, window, tuple(p for t in members for p in t)))
    return Dsv4Cache(tuple(groups), _bytes_per_block(groups, version), version)


def _bytes_per_block(groups: list[CacheGroup], version: tuple[int, int, int]) -> int:
    if version >= (0, 27, 0):
        return max(g.page_bytes for g in groups)  # packed layout: the widest group
    slots: dict[int, int] = {}
    for group in groups:
        for size, count in Counter(group.pages).items():
            slots[size] = max(slots.get(size, 0), count)
    if version >= (0, 23, 0):
        return sum(size * count for size, count in slots.items())
    # 0.20.x-0.22: every tuple slot holds one page of each full-group size.
    return max(slots.values()) * sum(set(groups[0].pages))


def pages_per_request(
    cache: Dsv4Cache,
    max_model_len: int,
    in_flight_tokens: int,
    dcp: int = 1,
    retained_tokens: int = 0,
) -> list[int]:
    """Blocks one request of max_model_len tokens takes in each group.

    retained_tokens: what every window cache keeps beyond its window for multi-module MTP
    (vfleet.budget.speculative.window_retained_tokens).
    """
    pages = []
    for group in cache.groups:
        if group.kind == "full":
            pages.append(math.ceil(math.ceil(max_model_len / dcp) / group.block_size))
        else:
            span = min(group.window - 1 + retained_tokens + in_flight_tokens, max_model_len)
            pages.append(math.ceil(span / group.block_size) + 1)
    return pages


def blocks_per_request(
    cache: Dsv4Cache,
    max_model_len: int,
    in_flight_tokens: int,
    dcp: int = 1,
    retained_tokens: int = 0,
) -> int:
    """The per-request block count behind the "Maximum concurrency" vLLM prints."""
    pages = pages_per_request(cache, max_model_len, in_flight_tokens, dcp, retained_tokens)
    if cache.version >= (0, 27, 0):
        return sum(pages)
    weighted = sum(p * g.page_bytes for p, g in zip(pages, cache.groups, strict=True))
    return math.ceil(weighted / cache.groups[0].page_bytes)
