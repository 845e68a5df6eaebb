"""Refit the estimator's bundled parameters and bands on the measured development set.

Writes vfleet's data/perf_fit.json (the fitted kernel efficiencies and overheads, with their
in-sample score) and data/perf_bands.json (the p10-p90 ratios of leave-one-source-out
predictions per regime, and of same-group layout pairs). The fit starts from the documented
starting values (vfleet_devtools.perfscore.neutral_start), never from the last fit, so a
refit on unchanged data and code reproduces the committed files. It refits once per
publication for the bands: minutes.

    python controller/tools/refit.py            # refit and write both files
    python controller/tools/refit.py --check    # print what would change; write nothing

`--check` exits 1 when a fitted value differs from the committed files, 0 when none does;
the description and the date are provenance and are not compared.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from vfleet.calibrate.fitting import predict_all
from vfleet.perf import bands
from vfleet.perf.fit import FIT_FILE, Fit, default_fit
from vfleet_devtools.perfcases import load_cases
from vfleet_devtools.perfscore import (
    Scored,
    held_out_bands,
    leave_one_source_out,
    neutral_start,
    pair_ratio_errors,
    prepare_all,
    refit,
    stats,
)

PROVENANCE = ("description", "fitted_on")
# A value that moves less than this (relative) is the same fit on another BLAS build.
REL_TOL = 1e-9


def fit_document(fit: Fit, scored: list[Scored], today: str) -> dict[str, Any]:
    predict_all(scored, fit)
    score = stats(scored)
    return {
        "description": (
            "Fitted by controller/tools/refit.py on the measured development set "
            "(data/perf_cases/measured.json)"
        ),
        "fitted_on": today,
        "score": {k: round(v, 4) for k, v in score.items()},
        "fit": fit.to_dict(),
    }


def bands_document(fit: Fit, scored: list[Scored], today: str) -> dict[str, Any]:
    table = held_out_bands(leave_one_source_out(scored, neutral_start(fit)))
    # Pairs come from one publication, so both of a pair's predictions are held out.
    table[bands.COMPARISON] = bands.comparison_band(pair_ratio_errors(scored))
    return {
        "description": (
            "measured / predicted output tokens/s at the 10th and 90th percentiles of "
            "leave-one-source-out predictions, per regime; written by controller/tools/refit.py"
        ),
        "fitted_on": today,
        "bands": {k: v.to_json() for k, v in table.items()},
    }


def refit_documents() -> dict[Path, dict[str, Any]]:
    """Both documents, made in the order the bands need: the held-out predictions first,
    then the in-sample ones of the new fit."""
    start = default_fit()
    scored, _ = prepare_all(load_cases(start))
    fit = refit(scored, neutral_start(start))
    today = datetime.date.today().isoformat()
    bands_doc = bands_document(fit, scored, today)
    fit_doc = fit_document(fit, scored, today)
    return {FIT_FILE: fit_doc, bands.BANDS_FILE: bands_doc}


def differences(old: Any, new: Any, where: str = "") -> list[str]:
    """Each leaf that differs between two JSON documents, as 'path: old -> new'."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            if not where and key in PROVENANCE:
                continue
            out += differences(old.get(key), new.get(key), f"{where}.{key}" if where else key)
        return out
    numbers = (int, float)
    if isinstance(old, numbers) and isinstance(new, numbers) and not isinstance(old, bool):
        same = math.isclose(old, new, rel_tol=REL_TOL, abs_tol=0.0)
    else:
        same = old == new
    return [] if same else [f"{where}: {old!r} -> {new!r}"]


def check(documents: dict[Path, dict[str, Any]]) -> int:
    changed = 0
    for path, doc in documents.items():
        committed = json.loads(path.read_text())
        diff = differences(committed, doc)
        changed += len(diff)
        print(f"{path.name}: " + ("unchanged" if not diff else f"{len(diff)} values would change"))
        for line in diff:
            print(f"  {line}")
    return 1 if changed else 0


def write(documents: dict[Path, dict[str, Any]]) -> None:
    for path, doc in documents.items():
        # Whole or not at all: the estimator reads these files on every run.
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(doc, indent=2) + "\n")
        os.replace(partial, path)
        print(f"wrote {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="print what would change; write nothing"
    )
    args = parser.parse_args()
    documents = refit_documents()
    if args.check:
        return check(documents)
    write(documents)
    return 0


if __name__ == "__main__":
    sys.exit(main())
