"""Prediction intervals: how far measured runs fell from estimates made without them.

`controller/tools/refit.py` predicts each publication's runs with a fit that never saw
that publication (leave-one-source-out) and writes, per regime, the ratios measured /
predicted output throughput that bound the central 80% of those runs to
`data/perf_bands.json`. An estimate's p10-p90 band is its median times those two ratios: an
empirical interval from comparable runs, not a statistical guarantee.

The two ratios are order statistics, as a split-conformal interval takes them: of n
held-out ratios in order, the floor(0.1 (n + 1))-th and the ceil(0.9 (n + 1))-th. Interpolated
10th and 90th percentiles of the same ratios sit inside those and cover a new run less than
80% of the time when n is a few dozen (docs/accuracy.md gives both coverages). Regimes:

- multi-node: the engine spans more than one node (inter-node TP, PP or EP);
- prefill-bound: prompts at least 8 times longer than the outputs;
- decode-bound: everything else.

A regime with fewer than MIN_POINTS held-out runs uses the pooled band of all of them. TPOT
and TTFT bands are the throughput band inverted (a run that is 20% slower has 20% longer
steps); the development set holds too few measured latencies to fit their own.

Comparing two layouts is another question: most of an estimate's error (the model, the
release, the client) is shared by every layout of one plan and cancels in their ratio. The
planner's tie test therefore gives each layout a comparison band from how far measured
ratios between two layouts run by one publication on one setup fell from the predicted
ratios (the
`comparison` entry: p10 and p90 of (predicted a / predicted b) / (measured a / measured b)),
half of that spread on each side, and calls two layouts a tie when those bands overlap by
more than half of the narrower one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from vfleet.data import DATA_DIR
from vfleet.errors import UserError

BANDS_FILE = DATA_DIR / "perf_bands.json"
REGIMES = ("decode-bound", "prefill-bound", "multi-node")
POOLED = "all"
COMPARISON = "comparison"
MIN_POINTS = 8
PREFILL_RATIO = 8.0


def regime(input_len: float, output_len: float, nodes: int) -> str:
    if nodes > 1:
        return "multi-node"
    if input_len >= PREFILL_RATIO * max(output_len, 1.0):
        return "prefill-bound"
    return "decode-bound"


@dataclass(frozen=True)
class Band:
    """measured / predicted at the 10th and 90th percentiles, from `points` held-out runs."""

    regime: str
    low: float
    high: float
    points: int

    def to_json(self) -> dict[str, Any]:
        return {
            "regime": self.regime,
            "p10_ratio": self.low,
            "p90_ratio": self.high,
            "points": self.points,
        }


@dataclass(frozen=True)
class Interval:
    p10: float
    median: float
    p90: float

    def to_json(self, digits: int = 1) -> dict[str, float]:
        return {
            "p10": round(self.p10, digits),
            "median": round(self.median, digits),
            "p90": round(self.p90, digits),
        }

    def overlap(self, other: Interval) -> float:
        """The share of the narrower band that the two bands have in common."""
        common = min(self.p90, other.p90) - max(self.p10, other.p10)
        narrower = min(self.p90 - self.p10, other.p90 - other.p10)
        if narrower <= 0:
            return 1.0 if common >= 0 else 0.0
        return max(common, 0.0) / narrower


def comparison_interval(value: float, band: Band) -> Interval:
    """A layout's band for comparing it with another layout of the same plan."""
    return Interval(value * math.sqrt(band.low), value, value * math.sqrt(band.high))


def comparison_band(ratio_errors: list[float]) -> Band:
    """The comparison band from pairs' (predicted a / b) / (measured a / b), each pair
    counted in both orders so the band is symmetric."""
    logs = np.log(ratio_errors)
    both = np.concatenate([logs, -logs])
    low, high = np.exp(np.percentile(both, [10, 90]))
    return Band(COMPARISON, round(float(low), 4), round(float(high), 4), len(ratio_errors))


def throughput_interval(value: float, band: Band) -> Interval:
    return Interval(value * band.low, value, value * band.high)


def latency_interval(value: float, band: Band) -> Interval:
    """A time's band: slower runs (ratio below 1) take longer."""
    return Interval(value / band.high, value, value / band.low)


def central_ratios(ratios: list[float], share: float = 0.8) -> tuple[float, float]:
    """The order statistics that bound the central `share` of a new ratio drawn like these
    (the split-conformal choice; with few ratios, the smallest and the largest)."""
    ordered = sorted(ratios)
    n = len(ordered)
    tail = (1 - share) / 2
    # Rounded first: 0.9 * 20 is 18.000000000000004 in binary, and its ceiling 19.
    low_rank = min(max(math.floor(round(tail * (n + 1), 9)), 1), n)
    high_rank = max(min(math.ceil(round((1 - tail) * (n + 1), 9)), n), 1)
    return ordered[low_rank - 1], ordered[high_rank - 1]


def bands_from_residuals(residuals: list[tuple[str, float]]) -> dict[str, Band]:
    """Bands per regime (and pooled) from (regime, measured / predicted) pairs."""
    out: dict[str, Band] = {}
    groups: dict[str, list[float]] = {POOLED: [r for _, r in residuals]}
    for name, ratio in residuals:
        groups.setdefault(name, []).append(ratio)
    for name, ratios in groups.items():
        if not ratios:
            continue
        low, high = central_ratios(ratios)
        out[name] = Band(name, round(float(low), 4), round(float(high), 4), len(ratios))
    return out


def band_for(name: str, bands: dict[str, Band] | None = None) -> Band:
    table = bands if bands is not None else load_bands()
    if name == COMPARISON:
        return table[COMPARISON]
    band = table.get(name)
    if band is None or band.points < MIN_POINTS:
        pooled = table[POOLED]
        return Band(name, pooled.low, pooled.high, pooled.points)
    return band


@cache
def load_bands() -> dict[str, Band]:
    raw = json.loads(BANDS_FILE.read_text())
    out = {}
    for name, v in raw["bands"].items():
        low, high, points = float(v["p10_ratio"]), float(v["p90_ratio"]), int(v["points"])
        if not (0 < low <= high < math.inf) or points < 1:
            raise UserError(f"{BANDS_FILE.name}: band {name!r} is not a 0 < p10 <= p90 pair")
        out[name] = Band(name, low, high, points)
    for needed in (POOLED, COMPARISON):
        if needed not in out:
            raise UserError(f"{BANDS_FILE.name}: no band {needed!r}")
    return out
