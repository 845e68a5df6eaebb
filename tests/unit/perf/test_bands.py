"""Prediction intervals: regimes, bands from held-out ratios, overlap and fallback."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vfleet.perf import bands


@pytest.mark.parametrize(
    "input_len, output_len, nodes, want",
    [
        (1000, 1000, 1, "decode-bound"),
        (3999, 1000, 1, "decode-bound"),
        (8000, 1000, 1, "prefill-bound"),
        (4000, 1000, 1, "decode-bound"),
        (32000, 100, 1, "prefill-bound"),
        (100, 1000, 2, "multi-node"),
    ],
)
def test_regime(input_len, output_len, nodes, want):
    assert bands.regime(input_len, output_len, nodes) == want


def test_bands_are_the_conformal_order_statistics_of_the_ratios_per_regime():
    ratios = [0.5 + i / 100 for i in range(101)]  # 0.50 .. 1.50, shuffled below
    ratios = ratios[::2] + ratios[1::2]
    table = bands.bands_from_residuals([("decode-bound", r) for r in ratios])
    band = table["decode-bound"]
    assert band.points == 101 and table[bands.POOLED].points == 101
    # n = 101: the floor(0.1 * 102) = 10th and the ceil(0.9 * 102) = 92nd smallest.
    assert (band.low, band.high) == (0.59, 1.41), band


@pytest.mark.parametrize(
    "n, ranks",
    [(1, (1, 1)), (5, (1, 5)), (9, (1, 9)), (19, (2, 18)), (38, (3, 36)), (82, (8, 75))],
)
def test_central_ratios_widen_towards_the_extremes_when_few_runs_are_held_out(n, ranks):
    ratios = [float(i) for i in range(1, n + 1)]
    assert bands.central_ratios(list(reversed(ratios))) == (float(ranks[0]), float(ranks[1]))


def test_the_order_statistics_cover_a_new_draw_at_least_as_often_as_asked():
    # Exchangeable draws: a new ratio falls inside the band with probability >= 80%
    # (split conformal), where interpolated percentiles of 20 draws fall short of it.
    rng = np.random.default_rng(7)
    inside = 0
    trials = 4000
    for _ in range(trials):
        draws = np.exp(rng.normal(0.0, 0.3, 21))
        low, high = bands.central_ratios(list(draws[:20]))
        inside += low <= draws[20] <= high
    assert 0.78 <= inside / trials <= 0.90, inside / trials


def test_a_thin_regime_borrows_the_pooled_band():
    residuals = [("decode-bound", 1.0 + i / 50) for i in range(-10, 11)]
    residuals += [("multi-node", 3.0)] * (bands.MIN_POINTS - 1)
    table = bands.bands_from_residuals(residuals)
    thin = bands.band_for("multi-node", table)
    assert (thin.low, thin.high) == (table[bands.POOLED].low, table[bands.POOLED].high)
    assert bands.band_for("decode-bound", table) == table["decode-bound"]


def test_latency_bands_invert_the_throughput_band():
    band = bands.Band("decode-bound", 0.8, 1.25, 20)
    tok = bands.throughput_interval(100.0, band)
    tpot = bands.latency_interval(10.0, band)
    assert (tok.p10, tok.p90) == (80.0, 125.0)
    assert math.isclose(tpot.p10, 8.0) and math.isclose(tpot.p90, 12.5)


def test_overlap_is_the_shared_share_of_the_narrower_band():
    a = bands.Interval(80, 100, 120)
    assert bands.Interval(100, 110, 140).overlap(a) == pytest.approx(0.5)
    assert bands.Interval(130, 140, 150).overlap(a) == 0.0
    assert bands.Interval(90, 100, 110).overlap(a) == 1.0


def test_the_bundled_bands_cover_every_regime_or_fall_back():
    table = bands.load_bands()
    assert bands.POOLED in table
    for name in bands.REGIMES:
        band = bands.band_for(name, table)
        assert 0 < band.low <= band.high, band


def test_the_comparison_band_is_symmetric_and_each_layout_carries_half_of_it():
    band = bands.comparison_band([1.1, 0.95, 1.02, 0.9, 1.2])
    assert band.low == pytest.approx(1 / band.high, rel=1e-3) and band.points == 5
    one = bands.comparison_interval(100.0, bands.Band(bands.COMPARISON, 0.81, 1.21, 40))
    assert one.p10 == pytest.approx(90.0) and one.p90 == pytest.approx(110.0)
