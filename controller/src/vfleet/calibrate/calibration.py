"""One cluster's calibration: the estimator's efficiencies for that cluster's GPU generation
and engine generation, refitted on its own ledger, and the file that carries them.

The fit starts from the bundled table and moves only the parameters the measured runs can
inform (the MoE ones only when the model has experts, the all-to-all only when experts
cross GPUs), with a stronger pull towards the bundled values than the development-set fit
uses: a cluster's ledger is a handful of runs of one layout. With four or more runs each is
also predicted by a fit made without it, the number to trust.
"""

from __future__ import annotations

import datetime
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vfleet.calibrate.fitting import Point, keys_for, predict_all, refit, value
from vfleet.calibrate.points import Usable
from vfleet.errors import UserError
from vfleet.perf.params import Fit, load_fit

SCHEMA = "vfleet.calibration/1"
MIN_POINTS = 3
"""Measured runs a calibration needs."""
MIN_DISTINCT = 2
"""Distinct operating points (lengths or concurrency) among them: one point repeated says
nothing about how the step cost splits between weights, KV and CPU."""
PRIOR_WEIGHT = 0.4
DENSE_KEYS = ("gemm", "hbm", "kv_read", "attention")
MOE_KEYS = ("moe_gemm", "moe_narrow_cols")
OVERHEAD_KEYS = ("step_s", "seq_s", "request_s", "graph_kernel_s")


def check_enough(usable: Sequence[Usable], skipped_reasons: Sequence[str], env: str) -> None:
    distinct = {_operating_key(u) for u in usable}
    if len(usable) >= MIN_POINTS and len(distinct) >= MIN_DISTINCT:
        return
    have = f"{len(usable)} usable run(s) at {len(distinct)} operating point(s)"
    need = f"need {MIN_POINTS} at {MIN_DISTINCT} or more"
    reasons = sorted(set(skipped_reasons))
    why = ""
    if reasons:
        why = f"; left out: {reasons[0]}" + (
            f" (and {len(reasons) - 1} more)" if reasons[1:] else ""
        )
    raise UserError(
        f"too little data to calibrate {env}: {have}, {need}{why}. "
        f"Deploy again (make deploy ENV={env}) with loadtest_sweep set, so the load test "
        "measures several concurrency levels"
    )


def _operating_key(u: Usable) -> tuple[Any, ...]:
    op = u.line.operating_point
    assert op is not None
    return (op.input_len, op.output_len, op.concurrency, op.layout)


def fitted_keys(points: Sequence[Point]) -> list[str]:
    reqs = [p.prepared.request for p in points]
    efficiency = list(DENSE_KEYS)
    if any(r.spec.is_moe for r in reqs):
        efficiency += MOE_KEYS
        if any(r.layout.ep or r.layout.dp > 1 for r in reqs):
            efficiency.append("a2a")
    return keys_for(points, efficiency, OVERHEAD_KEYS)


def calibrate(usable: Sequence[Usable], env: str, start: Fit | None = None) -> dict[str, Any]:
    """The calibration document for `env` from its usable ledger runs."""
    start = start or load_fit()
    points = [u.point for u in usable]
    keys = fitted_keys(points)
    predict_all(points, start)
    before = [p.error for p in points]
    fit = refit(points, start, keys, prior_weight=PRIOR_WEIGHT)
    predict_all(points, fit)
    after = [p.error for p in points]
    held_out = _leave_one_out(points, start, keys) if len(points) > MIN_POINTS else None
    arch = {k.split("/")[1] for k in keys if k.startswith("efficiency/")}
    engines = {k.split("/")[1] for k in keys if k.startswith("overheads/")}
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "env": env,
        "fitted_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "runs": len(points),
        "changed": {k: [value(start, k), value(fit, k)] for k in keys},
        "score": {
            "bundled_median_abs_error": _median_abs(before),
            "calibrated_median_abs_error": _median_abs(after),
            "held_out_median_abs_error": _median_abs(held_out) if held_out else None,
        },
        "runs_table": [
            {
                "engine": u.line.engine,
                "operating_point": u.line.operating_point.model_dump()
                if u.line.operating_point
                else None,
                "measured_tok_s": u.point.tok_s,
                "bundled_tok_s": round(u.point.tok_s * (1 + b), 1),
                "calibrated_tok_s": round(u.point.tok_s * (1 + a), 1),
                "held_out_tok_s": round(u.point.tok_s * (1 + h), 1) if held_out else None,
            }
            for u, b, a, h in zip(
                usable, before, after, held_out or [0.0] * len(points), strict=True
            )
        ],
        "fit": {
            "efficiency": {a: fit.to_dict()["efficiency"][a] for a in sorted(arch)},
            "overheads": {g: fit.to_dict()["overheads"][g] for g in sorted(engines)},
        },
    }
    return doc


def _leave_one_out(points: list[Point], start: Fit, keys: list[str]) -> list[float]:
    """Each point's error under a fit made without it (the caller has read the in-sample
    errors already; the points keep their held-out predictions)."""
    errors = []
    for i, held in enumerate(points):
        fit = refit(points[:i] + points[i + 1 :], start, keys, prior_weight=PRIOR_WEIGHT)
        predict_all([held], fit)
        errors.append(held.error)
    return errors


def _median_abs(errors: Sequence[float]) -> float:
    return round(statistics.median(abs(e) for e in errors), 4)


def write(doc: dict[str, Any], path: Path) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def load(path: Path) -> tuple[Fit, str]:
    """The bundled fit with a calibration laid over it, and the line that says so."""
    line = summary(path)
    return load_fit(path), line


def summary(path: Path) -> str:
    """One line for `plan`, `plan-env` and `estimate` to say which calibration they use."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read the calibration ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise UserError(f"{path}: not a vfleet calibration (schema {SCHEMA}); re-run calibrate")
    score = doc.get("score") or {}
    return (
        f"calibrated on {doc.get('runs')} run(s) of {doc.get('env')} at {doc.get('fitted_at')}"
        f" (median |error| {score.get('bundled_median_abs_error', 0):.0%} bundled, "
        f"{score.get('calibrated_median_abs_error', 0):.0%} calibrated)"
    )
