"""What `vfleet calibrate` buys on a cluster the bundled fit has never seen.

For each cluster of the measured development set (one author's runs on one GPU, model and
vLLM release, four runs or more): the bundled parameters are refitted without that
cluster's runs (the fit a new cluster meets), then the cluster is split in two by
alternate runs. One half calibrates, exactly as `vfleet calibrate` does on a ledger (same
parameters moved, same pull towards the starting values); the other half is predicted
both ways. Printed per cluster and overall: the held-out half's median |error| with the fit
alone and with the calibration, the cluster's runs on both sides. Where calibration makes
things worse, it says so.

    python bench/calibration_gain.py [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from vfleet.calibrate.calibration import PRIOR_WEIGHT, fitted_keys
from vfleet.calibrate.fitting import predict_all
from vfleet.calibrate.fitting import refit as refit_keys
from vfleet.perf.fit import default_fit
from vfleet_devtools.perfcases import load_cases
from vfleet_devtools.perfscore import Scored, prepare_all, refit

MIN_RUNS = 4


def clusters(scored: list[Scored]) -> dict[str, list[Scored]]:
    out: dict[str, list[Scored]] = {}
    for s in scored:
        raw = s.case.raw
        key = f"{raw.get('source_repo')} | {raw.get('gpu')} | {raw.get('model')} | "
        key += str(raw.get("engine_version"))
        out.setdefault(key, []).append(s)
    return {k: v for k, v in out.items() if len(v) >= MIN_RUNS}


def median_abs(points: list[Scored]) -> float:
    return statistics.median(abs(p.error) for p in points)


def gain(name: str, members: list[Scored], everyone: list[Scored]) -> dict[str, Any]:
    base = refit([s for s in everyone if s not in members], default_fit())
    train, test = members[::2], members[1::2]
    calibrated = refit_keys(train, base, fitted_keys(train), prior_weight=PRIOR_WEIGHT)
    predict_all(test, base)
    before = median_abs(test)
    base_tok = [p.predicted for p in test]
    predict_all(test, calibrated)
    after = median_abs(test)
    return {
        "cluster": name,
        "calibrated_on": len(train),
        "held_out": len(test),
        "fit_alone_median_abs_error": round(before, 4),
        "calibrated_median_abs_error": round(after, 4),
        "runs": [
            {
                "id": p.case.id,
                "measured": p.tok_s,
                "fit_alone": round(b, 1),
                "calibrated": round(p.predicted, 1),
            }
            for p, b in zip(test, base_tok, strict=True)
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    scored, _ = prepare_all(load_cases())
    scored = [s for s in scored if s.prepared.trajectory is not None]  # fitted runs only
    results = []
    for name, members in clusters(scored).items():
        print(f"  {name} ({len(members)} runs) ...", file=sys.stderr, flush=True)
        results.append(gain(name, members, scored))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{'cluster':78} {'held out':>8} {'fit alone':>10} {'calibrated':>10}")
    for r in results:
        verdict = (
            ""
            if r["calibrated_median_abs_error"] <= r["fit_alone_median_abs_error"]
            else ("  <- worse")
        )
        print(
            f"{r['cluster'][:78]:78} {r['held_out']:>8} {r['fit_alone_median_abs_error']:>10.1%} "
            f"{r['calibrated_median_abs_error']:>10.1%}{verdict}"
        )
        for run in r["runs"]:
            print(
                f"    {run['id'][-60:]:60} measured {run['measured']:9.1f}  fit alone "
                f"{run['fit_alone']:9.1f}  calibrated {run['calibrated']:9.1f}"
            )
    alone = [abs(x["fit_alone"] / x["measured"] - 1) for r in results for x in r["runs"]]
    tuned = [abs(x["calibrated"] / x["measured"] - 1) for r in results for x in r["runs"]]
    worse = sum(t > a for a, t in zip(alone, tuned, strict=True))
    worst = max(t - a for a, t in zip(alone, tuned, strict=True))
    print(
        f"\nall held-out runs ({len(alone)}): median |error| {statistics.median(alone):.1%} with "
        f"the fit alone, {statistics.median(tuned):.1%} calibrated; worse after calibrating: "
        f"{worse} of {len(alone)} (worst {worst:+.0%})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
