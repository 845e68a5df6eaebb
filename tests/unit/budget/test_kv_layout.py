"""Bytes per token and block arithmetic against docs/references.md#worked-numbers."""

import pytest

from vfleet.budget.kv_layout import layer_row_bytes, stage_layout
from vfleet.budget.params import pp_partition
from vfleet.catalog.models import load_model


@pytest.mark.parametrize(
    ("layers", "pp", "split"),
    [
        (61, 2, [31, 30]),
        (61, 3, [20, 21, 20]),
        (61, 4, [15, 15, 16, 15]),
        (61, 8, [7, 7, 8, 8, 8, 8, 8, 7]),
        (80, 3, [27, 27, 26]),
        (32, 1, [32]),
    ],
)
def test_pipeline_split_matches_vllm(layers, pp, split):
    assert pp_partition(layers, pp) == split


@pytest.mark.parametrize(("tp", "expected"), [(4, 81_920), (8, 40_960), (16, 40_960)])
def test_gqa_heads_split_then_replicate(tp, expected):
    spec = load_model("meta-llama/Llama-3.1-70B-Instruct")
    assert layer_row_bytes(spec, "auto", 2, tp) * spec.num_layers == expected


@pytest.mark.parametrize(("kv_dtype", "expected"), [("auto", 70_272), ("fp8", 35_136)])
def test_mla_latent_is_not_split_by_tp(kv_dtype, expected):
    spec = load_model("deepseek-ai/DeepSeek-V3")
    for tp in (1, 8, 16):
        assert layer_row_bytes(spec, kv_dtype, 2, tp) * spec.num_layers == expected


@pytest.mark.parametrize(
    ("kv_dtype", "expected"), [("fp8_ds_mla", 48_068), ("auto", 78_324), ("fp8", 43_188)]
)
def test_deepseek_v32_rows_include_the_indexer(kv_dtype, expected):
    spec = load_model("deepseek-ai/DeepSeek-V3.2")
    assert layer_row_bytes(spec, kv_dtype, 2, 8) * spec.num_layers == expected


def test_gpt_oss_forms_two_groups_of_eighteen_layers():
    spec = load_model("openai/gpt-oss-120b")
    kv = stage_layout(spec, range(spec.num_layers), "auto", 2, 4, 16)
    assert (kv.full_groups, kv.sliding_groups) == (1, 1)
    assert kv.bytes_per_block == 147_456  # 18 layers x 8,192-byte pages at TP4


def test_llama4_chunked_layers_are_full_attention_unless_hybrid_is_opted_in():
    from vfleet.budget.kv_layout import blocks_per_request

    spec = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert len(spec.chunked_layers) == 36  # every fourth of 48 layers is global NoPE
    default = stage_layout(spec, range(spec.num_layers), "auto", 2, 2, 16)
    assert (default.num_groups, default.chunked_groups) == (1, 0)
    hybrid = stage_layout(spec, range(spec.num_layers), "auto", 2, 2, 16, chunked_local_hybrid=True)
    # 12 global and 36 chunked layers: groups of 12, one full and three chunked.
    assert (hybrid.full_groups, hybrid.chunked_groups) == (1, 3)
    assert hybrid.bytes_per_block == 12 * 2 * 4 * 128 * 2 * 16
    # A request of 131,072 tokens: 8,192 full blocks, and per chunked group one chunk
    # plus one step of 8,192 in-flight tokens (1,024 blocks of 16).
    assert blocks_per_request(hybrid, 131072, 8192) == 8192 + 3 * 1024
