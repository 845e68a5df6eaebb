"""Budget behaviour users rely on: version defaults, DCP, PP, fit checks."""

from dataclasses import replace

from vfleet.budget.compute import BudgetRequest, compute, fits, smallest_fitting_layout
from vfleet.budget.params import Layout
from vfleet.catalog.gpus import resolve_gpu
from vfleet.catalog.models import load_model
from vfleet.catalog.releases import traits


def _req(model="deepseek-ai/DeepSeek-V3", gpu="H200-SXM-141GB", version="0.33.0", **kw):
    return BudgetRequest(spec=load_model(model), gpu=resolve_gpu(gpu), traits=traits(version), **kw)


def test_nvidia_smi_name_and_catalog_name_resolve_to_the_same_gpu():
    assert resolve_gpu("NVIDIA H100 80GB HBM3") == resolve_gpu("h100-sxm-80gb")
    assert resolve_gpu("H200-SXM-141GB").memory_bytes == 150_109_880_320  # measured on an H200


def test_default_utilization_moves_from_090_to_092_at_020():
    assert compute(_req(layout=Layout(tp=8), version="0.19.1")).gpu_memory_utilization == 0.90
    assert compute(_req(layout=Layout(tp=8), version="0.20.0")).gpu_memory_utilization == 0.92


def test_cuda_graph_estimate_only_from_020_and_not_with_enforce_eager():
    assert compute(_req(layout=Layout(tp=8), version="0.19.1")).cudagraph_gib == 0
    assert compute(_req(layout=Layout(tp=8), version="0.20.0")).cudagraph_gib > 0
    eager = compute(_req(layout=Layout(tp=8), version="0.20.0", enforce_eager=True))
    assert eager.cudagraph_gib == 0


def test_pinned_kv_bytes_give_exact_block_arithmetic():
    pinned = 40 * (1 << 30)
    b = compute(
        _req(
            layout=Layout(tp=8),
            kv_cache_memory_bytes=pinned,
            block_size=16,
            max_model_len=163_840,
            version="0.20.0",
        )
    )
    # docs/references.md#worked-numbers: 38,199 blocks, 611,184 tokens, 3.73x at 163,840 tokens
    assert b.kv_bytes_per_token == 70_272
    assert b.num_blocks == 38_199
    assert b.kv_tokens == 611_184
    assert b.max_concurrency == 3.73


def test_dcp_multiplies_tokens_per_engine():
    base = _req(
        layout=Layout(tp=8), kv_cache_memory_bytes=40 << 30, block_size=16, max_model_len=163_840
    )
    plain, dcp = compute(base), compute(replace(base, layout=Layout(tp=8, dcp=8)))
    assert dcp.kv_tokens == 8 * plain.kv_tokens


def test_deepseek_v3_does_not_fit_one_gpu_and_the_hint_names_a_layout_that_does():
    req = _req(layout=Layout(tp=1))
    assert not fits(compute(req))
    better = smallest_fitting_layout(req)
    assert better is not None and fits(better)
    # ~640 GiB of FP8 weights need at least five 141 GB GPUs
    assert better.tensor_parallel_size * better.pipeline_parallel_size >= 5


def test_pipeline_stage_with_most_layers_sets_capacity():
    b = compute(
        _req(
            model="meta-llama/Llama-3.1-70B-Instruct",
            gpu="H100-SXM-80GB",
            layout=Layout(tp=4, pp=3),
            max_model_len=8192,
        )
    )
    assert [s.layers for s in b.stages] == [27, 27, 26]
    assert b.num_blocks == min(s.num_blocks for s in b.stages)


def test_fp8_checkpoint_weighs_about_half_of_bf16():
    bf16 = compute(_req(model="Qwen/Qwen3-235B-A22B", layout=Layout(tp=8), max_model_len=8192))
    fp8 = compute(_req(model="Qwen/Qwen3-235B-A22B-FP8", layout=Layout(tp=8), max_model_len=8192))
    assert 0.5 < fp8.weights_gib / bf16.weights_gib < 0.56


def test_runtime_fp8_quantization_shrinks_weights():
    plain = compute(_req(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100-SXM-80GB"))
    fp8 = compute(
        _req(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100-SXM-80GB", quantization="fp8")
    )
    assert fp8.weights_gib < 0.6 * plain.weights_gib
    assert fp8.available_kv_gib > plain.available_kv_gib


def test_recommended_max_num_seqs_never_exceeds_the_kv_cap():
    b = compute(_req(layout=Layout(tp=8), max_model_len=32_768, mean_context_len=8192))
    blocks_per_seq = -(-8192 // b.block_size)
    assert b.recommended_max_num_seqs * blocks_per_seq <= b.num_blocks
