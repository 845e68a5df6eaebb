"""`vfleet calibrate --env ENV`: the estimator refitted on one environment's ledger, written
to artifacts/<env>/calibration.json, which `plan-env` (and so the next deploy) then plans
with. The cluster is the one the environment's probe saw (artifacts/<env>/facts), so the
runs are costed on the links and GPUs they ran on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vfleet.calibrate import calibration
from vfleet.calibrate.points import fitting_points, read_ledger
from vfleet.environment.context import Context, load_context
from vfleet.health.probed import probed_cluster
from vfleet.perf.fit import Fit, default_fit

FILE = "calibration.json"


def fit_for(ctx: Context) -> tuple[Fit, str]:
    """The fit an environment plans with: its calibration when there is one."""
    path = ctx.artifacts / FILE
    if not path.is_file():
        return default_fit(), ""
    fit, line = calibration.load(path)
    return fit, f"{ctx.shown(path)}: {line}"


def calibrate_env(env: str, root: Path | None) -> tuple[dict[str, Any], Path, list[str]]:
    return calibrate_context(load_context(env, root))


def calibrate_context(ctx: Context) -> tuple[dict[str, Any], Path, list[str]]:
    """Fit, write, and return the document, where it went and the runs left out (with why)."""
    env = ctx.env
    cluster = probed_cluster(ctx, "calibrate", allow_partial=False).cluster
    lines = read_ledger(ctx.artifacts / "ledger.jsonl")
    found = fitting_points(lines, cluster)
    reasons = [why for _line, why in found.skipped]
    calibration.check_enough(found.usable, reasons, env)
    doc = calibration.calibrate(found.usable, env, default_fit())
    path = ctx.artifacts / FILE
    calibration.write(doc, path)
    left_out = [
        f"{line.engine} ({line.sweep_level or 'main run'}): {why}" for line, why in found.skipped
    ]
    return doc, path, left_out


def print_summary(doc: dict[str, Any], path: Path, left_out: list[str], as_json: bool) -> None:
    if as_json:
        print(json.dumps(doc, indent=2, sort_keys=True))
        return
    score = doc["score"]
    print(f"calibrated {doc['env']} on {doc['runs']} run(s): {path}")
    print(
        f"  {'engine':14} {'in/out':>11} {'conc.':>6} {'measured':>10} {'bundled':>10} "
        f"{'calibrated':>10} {'held out':>10}"
    )
    for row in doc["runs_table"]:
        op = row["operating_point"] or {}
        held = row["held_out_tok_s"]
        print(
            f"  {row['engine'][:14]:14} {op.get('input_len')}/{op.get('output_len'):<5} "
            f"{op.get('concurrency') or 'all':>6} {row['measured_tok_s']:10,.1f} "
            f"{row['bundled_tok_s']:10,.1f} {row['calibrated_tok_s']:10,.1f} "
            f"{held if held is not None else 'n/a':>10}"
        )
    held = score["held_out_median_abs_error"]
    print(
        f"  median |error|: bundled {score['bundled_median_abs_error']:.1%}, calibrated "
        f"{score['calibrated_median_abs_error']:.1%}"
        + (
            f", each run held out {held:.1%}"
            if held is not None
            else " (too few runs to hold one out)"
        )
    )
    print("  parameters (bundled -> calibrated):")
    for key, (old, new) in doc["changed"].items():
        print(f"    {key:34} {old:10.4g} -> {new:10.4g}")
    if left_out:
        print(f"  left out {len(left_out)} ledger line(s):")
    for line in left_out:
        print(f"    {line}")
