"""DeepSeek-V4's KV plan per vLLM release, against the numbers four public start-up logs and
the release sources give (docs/references.md#deepseek-v4-kv; logs: tests/data/kv_cases,
ptocu-dsv4*).

All rows use the logs' inputs: V4-Flash at TP2 on H200, 34,448,757,120 bytes of KV memory,
max_num_batched_tokens 8192. The oracle test (tests/engine/test_kv_oracle.py) checks the same code
against each release's own planner over a wider sweep.
"""

from __future__ import annotations

import pytest

from vfleet.budget import compute as budget
from vfleet.budget import kv_dsv4
from vfleet.budget.params import Layout
from vfleet.catalog import gpus
from vfleet.catalog import models as catalog
from vfleet.catalog import releases as versions
from vfleet.catalog.model_shape import spec_from_config
from vfleet.errors import UserError

AVAILABLE = 34_448_757_120
LENGTHS = (4096, 65536, 131072, 262144)
# Tokens vLLM prints as "GPU KV cache size" at each max_model_len above.
PRINTED = {
    "0.20.0": (26_200, 26_200, 26_200, 26_200),
    "0.20.2": (89_793, 665_561, 1_233_228, 2_150_197),
    "0.23.0": (90_841, 673_323, 1_247_612, 2_175_276),
    "0.26.0": (90_841, 351_768, 675_523, 1_251_387),
    "0.27.0": (83_600, 324_666, 626_226, 1_169_238),
    "0.33.0": (83_600, 324_666, 626_226, 1_169_238),
}


def _flash():
    return catalog.load_model("deepseek-ai/DeepSeek-V4-Flash")


def _budget(version: str, max_model_len: int, **kw) -> budget.Budget:
    return budget.compute(
        budget.BudgetRequest(
            spec=kw.pop("spec", None) or _flash(),
            gpu=gpus.resolve_gpu("H200-SXM-141GB"),
            traits=versions.traits(version),
            layout=Layout(tp=2),
            kv_cache_memory_bytes=AVAILABLE,
            max_model_len=max_model_len,
            max_num_batched_tokens=8192,
            **kw,
        )
    )


@pytest.mark.parametrize("version", sorted(PRINTED))
def test_printed_tokens_per_release(version: str) -> None:
    got = tuple(_budget(version, length).kv_tokens for length in LENGTHS)
    assert got == PRINTED[version]


def test_flash_groups_at_0_23() -> None:
    spec = _flash()
    cache = kv_dsv4.plan(spec, range(spec.num_layers), (0, 23, 0))
    summary = [(g.kind, g.block_size, g.window, g.page_bytes, len(g.pages)) for g in cache.groups]
    assert sorted(summary) == sorted(
        [
            ("full", 256, 0, 1_002_240, 62),  # 21 CSA + 20 HCA compressed + 21 indexer caches
            ("swa", 64, 128, 823_680, 22),  # the 43 window caches split 22 + 21
            ("swa", 64, 128, 786_240, 21),
            ("csa_state", 4, 8, 967_680, 42),  # CSA and indexer compressor states
            ("hca_state", 8, 128, 748_800, 20),
        ]
    )
    assert cache.bytes_per_block == 22 * 37_440 + 20 * 1_728 + 21 * 8_640
    assert _budget("0.23.0", 4096).num_blocks == 33_134


def test_block_stride_per_release() -> None:
    spec = _flash()
    stride = {
        v: kv_dsv4.plan(spec, range(spec.num_layers), versions.parse_version(v)).bytes_per_block
        for v in ("0.20.2", "0.23.0", "0.27.0")
    }
    assert stride == {"0.20.2": 22 * 47_808, "0.23.0": 1_039_680, "0.27.0": 1_002_240}


def test_concurrency_formula_at_0_23() -> None:
    # N = ceil(L / 256) + 2969 with M = 8192 once L >= 8,319; 1,494 at L = 4096.
    spec = _flash()
    cache = kv_dsv4.plan(spec, range(spec.num_layers), (0, 23, 0))
    assert kv_dsv4.blocks_per_request(cache, 4096, 8192) == 1494
    for length in (16384, 65536, 262144, 1_048_576):
        assert kv_dsv4.blocks_per_request(cache, length, 8192) == -(-length // 256) + 2969


def test_mtp_layer_adds_a_window_cache() -> None:
    spec = _flash()
    layers = range(spec.num_layers)
    with_mtp = kv_dsv4.plan(spec, layers, (0, 33, 0), mtp_layers=1)
    swa = [len(g.pages) for g in with_mtp.groups if g.kind == "swa"]
    assert sum(swa) == spec.num_layers + 1 and sorted(swa) == [22, 22]
    # Before 0.27 the window pages weigh into each request's block count ...
    old_plain, old_mtp = (kv_dsv4.plan(spec, layers, (0, 23, 0), mtp_layers=n) for n in (0, 1))
    assert kv_dsv4.blocks_per_request(old_mtp, 65536, 8192) > kv_dsv4.blocks_per_request(
        old_plain, 65536, 8192
    )
    # ... from 0.27 a request takes blocks per group, and the 22-layer window group still
    # fits in the full group's stride, so the MTP layer costs no capacity.
    plain = kv_dsv4.plan(spec, layers, (0, 33, 0))
    assert with_mtp.bytes_per_block == plain.bytes_per_block
    assert kv_dsv4.blocks_per_request(with_mtp, 65536, 16384) == kv_dsv4.blocks_per_request(
        plain, 65536, 16384
    )


def test_every_mtp_module_is_a_window_only_layer() -> None:
    # vLLM gives layers past num_hidden_layers compress ratio 1 whatever compress_ratios lists,
    # and builds one per num_nextn_predict_layers, even past the list's end.
    config = catalog.catalog_entry("deepseek-ai/DeepSeek-V4-Flash")["config"]
    spec = spec_from_config({**config, "num_nextn_predict_layers": 3}, name="three-modules")
    ratios = kv_dsv4.kv_layer_ratios(spec, range(spec.num_layers), spec.num_mtp_layers)
    assert ratios[spec.num_layers :] == [1, 1, 1]
    cache = kv_dsv4.plan(spec, range(spec.num_layers), (0, 33, 0), mtp_layers=3)
    assert sum(len(g.pages) for g in cache.groups if g.kind == "swa") == spec.num_layers + 3


def test_retained_tokens_widen_every_window_group() -> None:
    cache = kv_dsv4.plan(_flash(), range(43), (0, 33, 0), mtp_layers=1)
    plain = kv_dsv4.pages_per_request(cache, 131072, 16384)
    wider = kv_dsv4.pages_per_request(cache, 131072, 16384, retained_tokens=2)
    for group, before, after in zip(cache.groups, plain, wider, strict=True):
        # Window - 1 + 16384 tokens end within a block's last two slots in every window
        # group (SWA 64, CSA state 4, HCA state 8): two more spill into the next block.
        assert after == before + (group.kind != "full")


def test_pro_groups_follow_its_layer_mix() -> None:
    spec = catalog.load_model("deepseek-ai/DeepSeek-V4-Pro")
    cache = kv_dsv4.plan(spec, range(spec.num_layers), (0, 23, 0))
    # 30 CSA and 31 HCA layers: 31 layer tuples, 61 window caches split 31 + 30.
    assert sorted(len(g.pages) for g in cache.groups if g.kind == "swa") == [30, 31]
    assert cache.bytes_per_block == 31 * 37_440 + 31 * 1_728 + 30 * 8_640


def test_flash_weights_match_the_log() -> None:
    # "Model loading took 74.08 GiB" per GPU at TP2, 0.23.0, M = 8192.
    got = _budget("0.23.0", 4096).weights_gib
    assert abs(got - 74.08) / 74.08 < 0.005


def test_releases_before_v4_support_are_refused() -> None:
    with pytest.raises(UserError, match=r"0\.20\.0 or later"):
        _budget("0.19.1", 4096)
