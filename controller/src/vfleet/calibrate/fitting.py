"""Fitting the cost model's physical parameters to measured serving runs.

Two users: controller/tools/refit.py refits the bundled table (`data/perf_fit.json`) on the
published development set, and `vfleet calibrate` refits one cluster's GPU generation and
engine generation on that cluster's own ledger. Both minimise log errors of output tokens/s
(and, at half weight, of median TPOT where the run held a fixed concurrency), with a weak
pull towards the starting values so that a parameter the data cannot see stays put; no
parameter belongs to one run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vfleet.perf.fit import (
    ENGINE_GENERATIONS,
    FITTED_EFFICIENCY,
    FITTED_OVERHEADS,
    Fit,
    engine_generation,
    with_values,
)
from vfleet.plan.estimate import Prepared, finish

TPOT_WEIGHT = 0.5  # TPOT residuals count half as much as throughput residuals
PRIOR_WEIGHT = 0.15  # pull (per log unit) towards the starting values
BOUNDS = {
    "gemm": (0.2, 0.95),
    "moe_gemm": (0.05, 0.9),
    "moe_narrow_cols": (1.0, 2048.0),
    "hbm": (0.3, 0.95),
    "kv_read": (0.1, 0.95),
    "attention": (0.05, 0.9),
    "a2a": (0.02, 1.0),
    "step_s": (1e-4, 0.1),
    "seq_s": (1e-7, 5e-4),
    "request_s": (1e-5, 0.05),
    "eager_kernel_s": (2e-7, 5e-5),
    "graph_kernel_s": (5e-7, 3e-5),
}


@dataclass(eq=False)  # compared by identity: a point holds arrays
class Point:
    """One measured run, prepared for the estimator (the scheduler replay done once)."""

    prepared: Prepared
    tok_s: float
    tpot_ms: float | None = None
    predicted: float = 0.0
    predicted_tpot: float | None = None

    @property
    def error(self) -> float:
        return self.predicted / self.tok_s - 1


def predict_all(points: Sequence[Point], fit: Fit) -> None:
    for p in points:
        est = finish(p.prepared, fit)
        p.predicted = est.output_tokens_per_s
        p.predicted_tpot = est.tpot_ms["median"]


def keys_for(
    points: Sequence[Point],
    efficiency: Sequence[str] = FITTED_EFFICIENCY,
    overheads: Sequence[str] = FITTED_OVERHEADS,
    points_per_key: int = 0,
) -> list[str]:
    """'efficiency/hopper/gemm'-style keys for the GPU and engine generations the runs use.

    With `points_per_key`, an engine generation with fewer runs than that many per overhead
    has only its per-step overhead fitted (the rest would follow noise to a bound)."""
    gens = sorted({p.prepared.request.cluster.gpu.arch for p in points})
    runs: dict[str, int] = {}
    for p in points:
        gen = engine_generation(p.prepared.request.traits.version)
        runs[gen] = runs.get(gen, 0) + 1
    keys = [f"efficiency/{g}/{name}" for g in gens for name in efficiency]
    for g in ENGINE_GENERATIONS:
        if g not in runs:
            continue
        few = runs[g] < points_per_key * len(overheads)
        keys += [f"overheads/{g}/{name}" for name in (["step_s"] if few else overheads)]
    return keys


def at_bounds(fit: Fit, keys: Sequence[str], margin: float = 0.02) -> list[str]:
    """The keys whose fitted value sits within `margin` (relative) of a bound."""
    out = []
    for key in keys:
        lo, hi = BOUNDS[key.split("/")[-1]]
        v = value(fit, key)
        if v <= lo * (1 + margin) or v >= hi * (1 - margin):
            out.append(key)
    return out


def value(fit: Fit, key: str) -> float:
    table, group, name = key.split("/")
    source = fit.efficiency if table == "efficiency" else fit.overheads
    if group in source:
        return float(getattr(source[group], name))
    return float(getattr(next(iter(source.values())), name))


def refit(
    points: Sequence[Point],
    start: Fit,
    keys: Sequence[str],
    prior_weight: float = PRIOR_WEIGHT,
    max_evaluations: int = 400,
) -> Fit:
    """`start` with `keys` moved to fit `points` (least squares in log space, bounded)."""
    from scipy.optimize import least_squares

    x0 = np.log([value(start, k) for k in keys])
    lo = np.log([BOUNDS[k.split("/")[-1]][0] for k in keys])
    hi = np.log([BOUNDS[k.split("/")[-1]][1] for k in keys])
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)
    # Request-rate runs replay on a clock (slow per evaluation): scored, not fitted.
    used = [p for p in points if p.prepared.trajectory is not None]

    def residuals(x: np.ndarray) -> np.ndarray:
        predict_all(used, with_values(start, dict(zip(keys, np.exp(x).tolist(), strict=True))))
        out = [math.log(max(p.predicted, 1e-9) / p.tok_s) for p in used]
        out += [
            TPOT_WEIGHT * math.log(max(p.predicted_tpot, 1e-6) / p.tpot_ms)
            for p in used
            if p.tpot_ms and p.predicted_tpot
        ]
        out += list(prior_weight * (x - x0))
        return np.asarray(out)

    result = least_squares(
        residuals, x0, bounds=(lo, hi), x_scale=1.0, diff_step=1e-3, max_nfev=max_evaluations
    )
    # exp(log(bound)) can land one rounding step outside the bound: a calibration must stay
    # within what its loader accepts.
    floor = [BOUNDS[k.split("/")[-1]][0] for k in keys]
    ceiling = [BOUNDS[k.split("/")[-1]][1] for k in keys]
    fitted = np.clip(np.exp(result.x), floor, ceiling)
    return with_values(start, dict(zip(keys, fitted.tolist(), strict=True)))
