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
import math
import statistics
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationError, model_validator

from vfleet.calibrate.fitting import BOUNDS, Point, keys_for, predict_all, refit, value
from vfleet.calibrate.points import (
    Amount,
    Env,
    Name,
    OperatingPoint,
    TokPerS,
    Usable,
    first_problem,
)
from vfleet.catalog.gpus import catalog
from vfleet.documents.flag_types import MAX_PARALLEL
from vfleet.errors import UserError
from vfleet.inputs.files import load_json
from vfleet.inputs.strict import StrictModel
from vfleet.perf.fit import ENGINE_GENERATIONS, Efficiency, Fit, Overheads, load_fit

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
    """Write the document whole (a temporary file renamed over the old one), after checking
    it is one `load` takes: a fit vfleet would refuse to read is never written."""
    CalibrationDoc.model_validate(doc)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def load(path: Path) -> tuple[Fit, str]:
    """The bundled fit with a calibration laid over it, and the line that says so."""
    doc = read(path)
    return load_fit(doc.fit.to_fit(str(path))), summary(doc)


def read(path: Path) -> CalibrationDoc:
    """A calibration file, every value checked against what the estimator can use."""
    data = load_json(path, "calibration").data
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UserError(
            f"{path}: not a vfleet calibration (schema {SCHEMA}): pass the calibration.json "
            "`vfleet calibrate` wrote, or re-run it"
        )
    try:
        return CalibrationDoc.model_validate(data)
    except ValidationError as exc:
        raise UserError(
            f"{path}: not a valid calibration ({first_problem(exc)}): re-run "
            "`vfleet calibrate --env ENV` or pass the file it wrote"
        ) from None


def summary(doc: CalibrationDoc) -> str:
    """One line for `plan`, `plan-env` and `estimate` to say which calibration they use."""
    score = doc.score
    return (
        f"calibrated on {doc.runs} run(s) of {doc.env} at {doc.fitted_at}"
        f" (median |error| {score.bundled_median_abs_error:.0%} bundled, "
        f"{score.calibrated_median_abs_error:.0%} calibrated)"
    )


# The document's models. Each value is held to what the estimator can take: the shares of a
# datasheet peak in (0, 1], everything the fitter moves within the fitter's own bounds.


def _within(name: str) -> Any:
    low, high = BOUNDS[name]
    return Field(ge=low, le=high)


Share = Annotated[float, Field(gt=0, le=1)]


class EfficiencyValues(StrictModel):
    """One GPU generation's efficiencies (vfleet.perf.fit.Efficiency, every field)."""

    gemm: Share
    moe_gemm: Share
    moe_narrow_cols: float = _within("moe_narrow_cols")
    hbm: Share
    kv_read: Share
    attention: Share
    a2a: float = _within("a2a")
    ep_imbalance: float = Field(ge=1, le=MAX_PARALLEL)
    """The busiest rank's load over the mean: at most the number of ranks."""


class OverheadValues(StrictModel):
    """One engine generation's overheads (vfleet.perf.fit.Overheads, every field)."""

    step_s: float = _within("step_s")
    seq_s: float = _within("seq_s")
    request_s: float = _within("request_s")
    eager_kernel_s: float = _within("eager_kernel_s")
    graph_kernel_s: float = _within("graph_kernel_s")


@cache
def gpu_generations() -> tuple[str, ...]:
    """The GPU generations vfleet knows: those of its GPU catalog."""
    return tuple(sorted({gpu.arch for gpu in catalog()} - {"unknown"}))


def _known_gpu_generation(name: str) -> str:
    if name not in gpu_generations():
        raise ValueError(
            f"unknown GPU generation {name[:40]!r} (known: {', '.join(gpu_generations())})"
        )
    return name


def _known_engine_generation(name: str) -> str:
    if name not in ENGINE_GENERATIONS:
        raise ValueError(
            f"unknown engine generation {name[:40]!r} (known: {', '.join(ENGINE_GENERATIONS)})"
        )
    return name


def _known_key(key: str) -> str:
    """A 'efficiency/hopper/gemm'-style key naming a value the fit section holds."""
    parts = key.split("/")
    tables: dict[str, type[StrictModel]] = {
        "efficiency": EfficiencyValues,
        "overheads": OverheadValues,
    }
    if len(parts) != 3 or parts[0] not in tables or parts[2] not in tables[parts[0]].model_fields:
        raise ValueError(
            f"{key[:60]!r} is not a key like 'efficiency/hopper/gemm' or 'overheads/v1/step_s'"
        )
    known = _known_gpu_generation if parts[0] == "efficiency" else _known_engine_generation
    known(parts[1])
    return key


GpuGeneration = Annotated[str, AfterValidator(_known_gpu_generation)]
EngineGeneration = Annotated[str, AfterValidator(_known_engine_generation)]
ChangedKey = Annotated[str, AfterValidator(_known_key)]
Positive = Annotated[float, Field(gt=0)]


class FitValues(StrictModel):
    efficiency: dict[GpuGeneration, EfficiencyValues] = Field(min_length=1)
    overheads: dict[EngineGeneration, OverheadValues] = Field(min_length=1)

    def to_fit(self, source: str) -> Fit:
        return Fit(
            efficiency={k: Efficiency(**v.model_dump()) for k, v in self.efficiency.items()},
            overheads={k: Overheads(**v.model_dump()) for k, v in self.overheads.items()},
            source=source,
        )

    def value(self, key: str) -> float | None:
        table, group, name = key.split("/")
        section = self.efficiency if table == "efficiency" else self.overheads
        held = section.get(group)
        return float(getattr(held, name)) if held is not None else None


class Score(StrictModel):
    bundled_median_abs_error: Amount
    calibrated_median_abs_error: Amount
    held_out_median_abs_error: Amount | None


class RunRow(StrictModel):
    engine: Name
    operating_point: OperatingPoint | None
    measured_tok_s: Annotated[TokPerS, Field(gt=0)]
    bundled_tok_s: Amount
    calibrated_tok_s: Amount
    held_out_tok_s: Amount | None


def _iso_time(text: str) -> str:
    try:
        datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("must be an ISO 8601 time such as 2026-01-31T12:00:00+00:00") from None
    return text


class CalibrationDoc(StrictModel):
    """artifacts/<env>/calibration.json, as `calibrate` writes it; nothing else is read."""

    calibration_schema: str = Field(alias="schema")  # checked to be SCHEMA before
    env: Env
    fitted_at: Annotated[str, Field(max_length=64), AfterValidator(_iso_time)]
    runs: int = Field(ge=MIN_POINTS)
    changed: dict[ChangedKey, Annotated[list[Positive], Field(min_length=2, max_length=2)]]
    score: Score
    runs_table: list[RunRow]
    fit: FitValues

    @model_validator(mode="after")
    def _consistent(self) -> CalibrationDoc:
        if self.runs != len(self.runs_table):
            raise ValueError(f"runs is {self.runs} but runs_table has {len(self.runs_table)}")
        for key, (_old, new) in self.changed.items():
            held = self.fit.value(key)
            if held is None or not math.isclose(held, new, rel_tol=1e-9):
                raise ValueError(f"changed[{key!r}] is not the value the fit section holds")
        return self
