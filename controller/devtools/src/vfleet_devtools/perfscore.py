"""The throughput estimator scored against the measured development set, and its refits.

Shared by bench/perf_accuracy.py (prints the scores), bench/calibration_gain.py and the refit
tool (controller/tools/refit.py, which writes data/perf_fit.json and data/perf_bands.json).
Every fit starts from `neutral_start`, never from the last fit, so a refit on the same data
reproduces the committed parameters.
"""

from __future__ import annotations

import itertools
import math
import statistics
import sys
from dataclasses import dataclass
from urllib.parse import urlparse

from vfleet.calibrate.fitting import Point, keys_for, predict_all
from vfleet.calibrate.fitting import refit as refit_keys
from vfleet.errors import UserError
from vfleet.perf import bands
from vfleet.perf.fit import Efficiency, Fit, Overheads, with_measured
from vfleet.plan.estimate import estimate_regime, prepare
from vfleet_devtools.perfcases import Case

GAP = 0.05  # pairs whose measured throughputs differ by more than this are scored
POINTS_PER_KEY = 3  # an engine generation needs this many runs per overhead to fit them all


@dataclass(kw_only=True, eq=False)
class Scored(Point):
    case: Case


def prepare_all(cases: list[Case]) -> tuple[list[Scored], list[tuple[Case, str]]]:
    """The runs vfleet models, prepared once; the others with the reason they are not."""
    scored, skipped = [], []
    for case in cases:
        if case.request is None:
            skipped.append((case, case.skip))
            continue
        try:
            scored.append(
                Scored(
                    prepared=prepare(case.request),
                    tok_s=case.measured_tok_s or 0.0,
                    tpot_ms=case.measured_tpot_ms,
                    case=case,
                )
            )
        except UserError as exc:
            skipped.append((case, str(exc)))
    return scored, skipped


def by_group(scored: list[Scored]) -> dict[str, list[Scored]]:
    groups: dict[str, list[Scored]] = {}
    for s in scored:
        groups.setdefault(s.case.group, []).append(s)
    return groups


def group_pairs(scored: list[Scored]) -> list[tuple[Scored, Scored, bool]]:
    """(a, b, right order) for each same-group pair whose measured gap exceeds GAP."""
    out = []
    for members in by_group(scored).values():
        for a, b in itertools.combinations(members, 2):
            if _inputs(a) == _inputs(b):
                continue  # the same launch measured twice: not a layout comparison
            ma, mb = a.case.measured_tok_s or 0, b.case.measured_tok_s or 0
            if abs(ma - mb) / max(min(ma, mb), 1e-9) <= GAP:
                continue
            out.append((a, b, (ma > mb) == (a.predicted > b.predicted)))
    return out


def _inputs(s: Scored) -> str:
    r = s.prepared.request
    return repr(
        (
            r.layout,
            r.traits.version,
            r.input_len,
            r.output_len,
            r.concurrency,
            r.num_prompts,
            r.request_rate,
            r.max_num_seqs,
            r.max_num_batched_tokens,
            r.all2all_backend,
            r.replicas,
            r.cluster.total_gpus,
            r.spec.name,
        )
    )


def stats(scored: list[Scored]) -> dict[str, float]:
    errors = [abs(s.error) for s in scored]
    tpot = [
        abs(s.predicted_tpot / s.case.measured_tpot_ms - 1)
        for s in scored
        if s.case.measured_tpot_ms and s.predicted_tpot
    ]
    pairs = group_pairs(scored)
    return {
        "points": len(scored),
        "median_abs_error": statistics.median(errors) if errors else math.nan,
        "mean_abs_error": statistics.fmean(errors) if errors else math.nan,
        "within_20pct": sum(e <= 0.2 for e in errors) / max(len(errors), 1),
        "tpot_points": len(tpot),
        "tpot_median_abs_error": statistics.median(tpot) if tpot else math.nan,
        "pairs": len(pairs),
        "pairs_right": sum(ok for *_, ok in pairs) / max(len(pairs), 1),
    }


def fitted_keys(scored: list[Scored]) -> list[str]:
    return keys_for(scored, points_per_key=POINTS_PER_KEY)


def neutral_start(fit: Fit) -> Fit:
    """Where every fit starts and what its prior pulls towards: the documented starting
    values of vfleet.perf.fit for each generation `fit` covers, with the measured kernel
    efficiencies laid over them. Starting here, not from the last fit, keeps the refit tool
    and the cross-validation reproducible."""
    return with_measured(
        Fit(
            efficiency={g: Efficiency() for g in fit.efficiency},
            overheads={g: Overheads() for g in fit.overheads},
            source=fit.source,
        )
    )


def refit(scored: list[Scored], start: Fit) -> Fit:
    return refit_keys(scored, start, fitted_keys(scored))


def holdout(scored: list[Scored], start: Fit) -> list[tuple[Scored, float]]:
    """Each comparison group predicted by a fit made without it."""
    out = []
    for group in sorted(by_group(scored)):
        train = [s for s in scored if s.case.group != group]
        test = [s for s in scored if s.case.group == group]
        predict_all(test, refit(train, start))
        out += [(s, s.error) for s in test]
    return out


def source_of(case: Case) -> str:
    """The publication a run comes from: its repository, else its site and first path part."""
    raw = case.raw
    if raw.get("source_repo"):
        return str(raw["source_repo"])
    url = urlparse(str(raw.get("source_url") or case.id))
    first = url.path.strip("/").split("/")[0]
    return f"{url.netloc}/{first}" if url.netloc else case.id


def leave_one_source_out(scored: list[Scored], start: Fit) -> list[tuple[Scored, float]]:
    """Each publication's runs predicted by a fit made without any of its runs."""
    out = []
    for source in sorted({source_of(s.case) for s in scored}):
        train = [s for s in scored if source_of(s.case) != source]
        test = [s for s in scored if source_of(s.case) == source]
        print(f"  refitting without {source} ({len(test)} runs)", file=sys.stderr, flush=True)
        predict_all(test, refit(train, start))
        out += [(s, s.error) for s in test]
    return out


def regime_of(s: Scored) -> str:
    return estimate_regime(s.prepared.request)


def held_out_bands(held: list[tuple[Scored, float]]) -> dict[str, bands.Band]:
    """Bands from the held-out ratios measured / predicted, per regime."""
    return bands.bands_from_residuals([(regime_of(s), 1 / (1 + e)) for s, e in held])


def pair_ratio_errors(scored: list[Scored]) -> list[float]:
    """(predicted a / predicted b) / (measured a / measured b) for each same-group pair of
    different layouts (the comparison the planner makes)."""
    out = []
    for members in by_group(scored).values():
        for a, b in itertools.combinations(members, 2):
            if a.case.layout_label != b.case.layout_label:
                out.append((a.predicted / b.predicted) / (a.tok_s / b.tok_s))
    return out


def band_coverage(held: list[tuple[Scored, float]]) -> float:
    """The share of held-out runs inside a p10-p90 band made without their publication's
    runs (so the band never saw the run it is checked on)."""
    inside = 0
    for source in {source_of(s.case) for s, _ in held}:
        others = [(s, e) for s, e in held if source_of(s.case) != source]
        table = held_out_bands(others)
        for s, e in held:
            if source_of(s.case) == source:
                band = bands.band_for(regime_of(s), table)
                inside += band.low <= 1 / (1 + e) <= band.high
    return inside / max(len(held), 1)
