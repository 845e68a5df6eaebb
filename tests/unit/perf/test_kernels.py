"""The measured kernel tables and how the step cost model uses them."""

from __future__ import annotations

import numpy as np
import pytest

from vfleet.perf import kernels
from vfleet.perf.fit import FITTED_EFFICIENCY, default_fit


def test_hopper_efficiencies_come_from_the_tables_not_the_fit():
    table = kernels.kernel_table("hopper")
    assert table is not None and "aiconfigurator-core==" in table.source
    eff = default_fit().efficiency["hopper"]
    for name, value in table.measured_levels().items():
        assert getattr(eff, name) == value, name
        assert name not in FITTED_EFFICIENCY
    # The tables say what one fraction could not: bf16 GEMMs reach ~79% of the peak, not 95%.
    assert 0.7 < eff.gemm < 0.85 and 0.75 < eff.hbm < 0.9
    assert kernels.kernel_table("ampere") is None


def test_formats_and_widths_change_the_kernels_efficiency():
    t = kernels.shapes()
    assert t.gemm_ratio("bf16") == 1.0
    assert t.gemm_ratio("fp8") < 1.0  # a fraction of a peak twice as high
    # Block-scaled FP8 MoE reaches about half the bf16 kernel's fraction of its own peak,
    # which is about the same absolute speed.
    assert 0.4 < t.moe_ratio("fp8_block", "fp8") < 0.6
    assert t.moe_ratio("fp8_block", "bf16") == pytest.approx(2 * t.moe_ratio("fp8_block", "fp8"))
    # Expert parallelism over more GPUs keeps less of the single-GPU efficiency.
    factors = t.ep_factor("bf16", np.array([1.0, 2.0, 8.0]))
    assert factors[0] == 1.0 and factors[0] > factors[1] > factors[2]


def test_prefill_attention_is_slow_for_short_prompts():
    t = kernels.shapes()
    shape = t.prefill_shape(np.array([128.0, 1024.0, 8192.0, 16384.0, 65536.0]))
    assert list(shape) == sorted(shape)
    assert shape[0] < 0.05 and shape[-1] == 1.0


def test_the_sparse_module_costs_a_floor_then_a_price_per_prompt_token():
    sparse = kernels.shapes().sparse
    assert sparse is not None
    tokens = np.array([0.0, 16.0, 512.0, 65536.0, 131072.0])
    extra = sparse.extra_s(tokens, np.full(5, 2048.0), 16.0)
    assert extra[0] == 0.0  # no prompt tokens, no sparse prefill
    assert extra[1] == extra[2] == sparse.floor_s  # a few tokens pay the pass's floor
    assert extra[4] == pytest.approx(2 * extra[3])  # many pay per token
    # Longer prompts cost more per token (the indexer scores every earlier token).
    lengths = np.array([512.0, 2048.0, 8192.0, 32768.0])
    per_token = sparse.extra_s(np.full(4, 1e6), lengths, 16.0) / 1e6
    assert list(per_token) == sorted(per_token)
    # Heads between two timed counts fall between their costs.
    at = [float(sparse.extra_s(np.array(1e6), np.array(4096.0), h)) for h in (8.0, 12.0, 16.0)]
    assert min(at[0], at[2]) <= at[1] <= max(at[0], at[2])


def test_weight_only_experts_are_priced_by_the_kernel_vllm_runs():
    t = kernels.shapes()
    # Marlin's weight-only MoE (MXFP4 where triton_kernels is missing, INT4 from AWQ/GPTQ)
    # reaches well under half of what OpenAI's Triton MXFP4 kernel does; their dense layers
    # are bf16 GEMMs.
    assert t.moe_ratio("mxfp4_marlin", "bf16") < 0.5 * t.moe_ratio("mxfp4", "bf16")
    assert t.moe_ratio("int4_marlin", "bf16") < 0.5
    for fmt in kernels.WEIGHT_ONLY:
        assert fmt in t.moe and t.gemm_ratio(fmt) == 1.0


@pytest.mark.parametrize(
    ("weight_format", "backend", "expected"),
    [
        ("mxfp4", "marlin", "mxfp4_marlin"),
        ("mxfp4", "triton", "mxfp4"),
        ("int4", "", "int4_marlin"),
    ],
)
def test_the_plan_names_the_moe_kernel_the_release_picks(weight_format, backend, expected):
    from vfleet.plan.shape import kernel_format

    assert kernel_format(weight_format, {}, "hopper", backend) == expected
    assert expected in kernels.FORMATS
