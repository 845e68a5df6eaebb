"""MXFP4 expert weights (gpt-oss) as vLLM lays them out, per release and GPU.

References are to https://github.com/vllm-project/vllm at the release tag named, with line
numbers of that tag:
- Q = vllm/model_executor/layers/quantization/mxfp4.py (backend choice and padding to v0.18)
- O = vllm/model_executor/layers/fused_moe/oracle/mxfp4.py (the same from v0.19)
- U = vllm/model_executor/layers/quantization/utils/mxfp4_utils.py (_swizzle_mxfp4)
- L = vllm/third_party/triton_kernels/tensor_details/layout_details/ (vendored from v0.12.0)
Tag commits: v0.10.2 26b999c71, v0.11.0 f71952c1c, v0.11.1 439368496, v0.11.2 275de3417,
v0.12.0 4fd9d6a85, v0.13.0 72506c983, v0.24.0 ee0da84ab, v0.25.0 dd10e03f9, v0.26.0 ffd46bfab,
v0.27.0 4bdc8a788, v0.33.0 4ba787ec9.
"""

import pytest

from vfleet.budget.compute import BudgetRequest, compute, fits
from vfleet.budget.params import Layout, rank_weight_bytes
from vfleet.budget.quant import gpu_capability, mxfp4_expert_bytes, mxfp4_moe_layout, weight_format
from vfleet.catalog.gpus import resolve_gpu
from vfleet.catalog.models import load_model
from vfleet.catalog.releases import parse_version, traits

GIB = 1 << 30
H100 = gpu_capability("H100-SXM-80GB", "hopper")
B200 = gpu_capability("B200", "blackwell")
B300 = gpu_capability("B300", "blackwell")
RTX5090 = gpu_capability("RTX-5090", "blackwell")


def _v(text):
    return parse_version(text)


def _weights_gib(version, gpu="H100-SXM-80GB", layout=None, **kw):
    spec = load_model("openai/gpt-oss-120b")
    fmt = weight_format(
        spec.quantization, spec.model_type, 2, version=_v(version), gpu=resolve_gpu(gpu), **kw
    )
    return sum(rank_weight_bytes(spec, fmt, layout or Layout(), 0).values()) / GIB


def test_capabilities_of_the_catalog_gpus():
    assert (H100, B200, B300, RTX5090) == ((9, 0), (10, 0), (10, 3), (12, 0))
    assert gpu_capability("A100-SXM-80GB", "ampere") < (9, 0)
    assert gpu_capability("MI300X", "cdna3") is None


def test_hopper_0102_and_0110_with_triton_kernels_installed_use_it_unpadded():
    # v0.10.2 Q L89-97: SM90 takes Triton when triton_kernels imports and torch >= 2.8.0;
    # Q L216-218: only the per-rank intermediate rounds up, to 64 (2880 stays 2880);
    # U L24-32 (v0.11.0 U L28-36): SM90 under torch < 2.8.1 (both pin torch 2.8.0) keeps the
    # checkpoint layout (StridedLayout), so nothing is re-padded; Q L573-574: fp32 biases.
    for version in ("0.10.2", "0.11.0"):
        layout = mxfp4_moe_layout(_v(version), H100, triton_kernels=True)
        assert layout.backend == "triton"
        assert (layout.hidden_align, layout.inter_align) == (1, 64)
        assert (layout.scale_rows_align, layout.scale_groups_align) == (1, 1)
        assert not layout.scales_kept
        assert layout.bias_bytes == 4


def test_a_stock_hopper_install_runs_marlin_until_012():
    # v0.10.2 Q L89-94: no triton_kernels -> Marlin; Q L184-195: hidden -> 256, I -> 128.
    # The wheels and images up to v0.11.2 do not install triton_kernels (vLLM PR #27370:
    # "users have to install triton_kernels manually"); v0.12.0 vendors it. The default is
    # the stock install.
    for version in ("0.10.2", "0.11.0", "0.11.2"):
        layout = mxfp4_moe_layout(_v(version), H100)
        assert (layout.backend, layout.hidden_align, layout.inter_align) == ("marlin", 256, 128)
    assert mxfp4_moe_layout(_v("0.12.0"), H100).backend == "triton"


def test_hopper_swizzle_from_0111_keeps_the_old_scales_until_025():
    # v0.11.1 pins torch 2.9.0, so U L28-36 swizzles on SM90: HopperMXScaleLayout pads scale
    # rows to 2*num_warps*2*8 = 256 and groups to 2 (L hopper_scale.py L25-29, v0.33.0).
    # Only the unswizzled values are freed (v0.11.0 Q L613-614, v0.24.0 O L1147-1148); v0.25.0
    # frees the checkpoint-layout scales too (O L1153-1156). v0.26.0 pads scale groups to 4
    # first on SM90 (U L94).
    swizzled = mxfp4_moe_layout(_v("0.11.1"), H100, triton_kernels=True)
    assert (swizzled.scale_rows_align, swizzled.scale_groups_align) == (256, 2)
    assert swizzled.scales_kept
    assert mxfp4_moe_layout(_v("0.24.0"), H100).scales_kept
    assert not mxfp4_moe_layout(_v("0.25.0"), H100).scales_kept
    assert mxfp4_moe_layout(_v("0.25.0"), H100).scale_groups_align == 2
    assert mxfp4_moe_layout(_v("0.26.0"), H100).scale_groups_align == 4
    newest = mxfp4_moe_layout(_v("0.33.0"), H100)
    # v0.33.0 O L402-435: Triton is the first SM90-capable backend; O L915-916: I -> 64.
    assert (newest.backend, newest.hidden_align, newest.inter_align) == ("triton", 1, 64)


def test_blackwell_flashinfer_trtllm_pads_256_then_128_for_the_intermediate():
    # v0.10.2 Q L74-80 picks FlashInfer MXFP4 x BF16 on SM100; Q L202-209: both dims -> 256.
    # Still 256/256 in v0.26.0 (O L655-657); v0.27.0 rounds I to 128 (O L656-658; v0.33.0
    # O L871-873). fp32 biases (v0.33.0 O L1026-1027).
    for version in ("0.10.2", "0.11.0", "0.18.0", "0.26.0"):
        layout = mxfp4_moe_layout(_v(version), B200)
        assert (layout.backend, layout.hidden_align, layout.inter_align) == (
            "flashinfer_trtllm",
            256,
            256,
        )
    for version in ("0.27.0", "0.33.0"):
        layout = mxfp4_moe_layout(_v(version), B200)
        assert (layout.hidden_align, layout.inter_align) == (256, 128)


def test_b300_joins_the_sm100_family_in_013():
    # v0.12.0 Q L134 tests is_device_capability(100) (SM100 only, so SM103 takes Triton with
    # the Blackwell layouts); v0.13.0 Q L133 tests the SM10x family.
    assert mxfp4_moe_layout(_v("0.12.0"), B300).backend == "triton"
    assert mxfp4_moe_layout(_v("0.12.0"), B300).value_k_align == 256  # blackwell_value.py L20
    assert mxfp4_moe_layout(_v("0.13.0"), B300).backend == "flashinfer_trtllm"


def test_sm120_and_pre_hopper_gpus_use_marlin():
    # v0.11.2 Q L134-145: any capability >= 9 with triton_kernels takes Triton; v0.12.0
    # Q L153-166 limits Triton to (9,0) <= cc < (11,0); v0.33.0 O L426-434 orders it after
    # Marlin on SM12x.
    assert mxfp4_moe_layout(_v("0.11.2"), RTX5090, triton_kernels=True).backend == "triton"
    assert mxfp4_moe_layout(_v("0.11.2"), RTX5090).backend == "marlin"
    for version in ("0.12.0", "0.20.0", "0.33.0"):
        assert mxfp4_moe_layout(_v(version), RTX5090).backend == "marlin"
        assert mxfp4_moe_layout(_v(version), (8, 0)).backend == "marlin"


def test_expert_bytes_follow_the_padded_shapes():
    # gpt-oss: H = I = 2880, so per expert w13 is [5760, 2880] and w2 [2880, 2880].
    triton = mxfp4_moe_layout(_v("0.10.2"), H100, triton_kernels=True)
    values, scales, biases = (5760 + 2880) * 2880 // 2, (5760 + 2880) * 90, (5760 + 2880) * 4
    assert mxfp4_expert_bytes(triton, 2880, 2880) == values + scales + biases
    marlin = mxfp4_moe_layout(_v("0.10.2"), H100)
    # Marlin: H 2880 -> 3072, I 2880 -> 2944; bf16 biases.
    h, i = 3072, 2944
    expected = (2 * i * h + h * i) // 2 + (2 * i * h + h * i) // 32 + (2 * i + h) * 2
    assert mxfp4_expert_bytes(marlin, 2880, 2880) == expected
    # TP4 splits I to 720, which Triton rounds to 768 (Q L216-218).
    assert mxfp4_expert_bytes(triton, 2880, 720) == mxfp4_expert_bytes(triton, 2880, 768)


@pytest.mark.parametrize(
    ("version", "gib"),
    [("0.10.2", 65.91), ("0.11.0", 65.91), ("0.14.1", 64.32), ("0.25.0", 60.98), ("0.33.0", 61.06)],
)
def test_gpt_oss_120b_weights_on_one_h100_per_release(version, gib):
    assert _weights_gib(version) == pytest.approx(gib, abs=0.01)


def test_weights_match_the_model_loading_logs():
    # vLLM issue 23278 (0.10.1, H100, Marlin warning): "Model loading took 65.9651 GiB".
    assert _weights_gib("0.10.2") == pytest.approx(65.97, abs=0.1)
    # With triton_kernels added by hand, 0.10.2 loads the checkpoint layout unpadded.
    assert _weights_gib("0.10.2", triton_kernels=True) == pytest.approx(60.86, abs=0.01)
    # vLLM issue 33155 (0.14.1, H100, "Using Triton backend"): "Model loading took 64.38 GiB".
    assert _weights_gib("0.14.1") == pytest.approx(64.38, abs=0.1)


def test_expert_parallel_keeps_whole_experts():
    tp4 = _weights_gib("0.33.0", layout=Layout(tp=4))
    ep4 = _weights_gib("0.33.0", layout=Layout(tp=4, enable_expert_parallel=True))
    assert ep4 < tp4  # whole experts skip the per-rank round-up of I = 720 to 768
    assert tp4 == pytest.approx(16.26, abs=0.01)


def test_gpt_oss_120b_fits_one_h100_at_32k_under_0102_defaults():
    # A stock 0.10.2 runs Marlin on SM90 (no triton_kernels), whose padded experts take 66 GiB
    # (vLLM issue 23278), and `vllm serve openai/gpt-oss-120b --max-model-len 32768` still fits
    # one H100 at utilization 0.9, with room for about one 32k request (GPUStack ran it so).
    req = BudgetRequest(
        spec=load_model("openai/gpt-oss-120b"),
        gpu=resolve_gpu("H100-SXM-80GB"),
        traits=traits("0.10.2"),
        max_model_len=32768,
    )
    budget = compute(req)
    assert budget.gpu_memory_utilization == 0.9
    assert budget.moe_backend == "marlin"
    assert budget.weights_gib == pytest.approx(65.97, abs=0.1)
    assert fits(budget)
    assert 1 <= budget.max_concurrency < 2


def test_the_budget_names_the_moe_layout_it_loaded():
    from support.cli_run import vfleet

    for version, backend, gib in (("0.10.2", "marlin", "65.91"), ("0.33.0", "triton", "61.06")):
        out = vfleet(
            "budget", "--model", "openai/gpt-oss-120b", "--gpu", "H100-SXM-80GB",
            "--vllm-version", version, "--max-model-len", "32768",
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        line = next(x for x in out.stdout.splitlines() if x.strip().startswith("- weights"))
        assert gib in line and f"mxfp4 ({backend} MoE layout)" in line
