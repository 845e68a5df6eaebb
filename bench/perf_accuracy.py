"""The throughput estimator against measured vLLM serving runs.

For each published run in controller/src/vfleet/data/perf_cases/measured.json, `vfleet
estimate`'s prediction next to the measurement (output tokens/s, and median TPOT where the
run held a fixed concurrency); the median and mean |error|; and, inside each comparison
group (same author, hardware and workload), whether the estimator orders each pair of
layouts or settings as the measurements do, counted where the measured gap exceeds 5%.
Runs vfleet does not model are listed with the reason and not scored.

    python bench/perf_accuracy.py            # leave-one-source-out first, then the bundled fit
    python bench/perf_accuracy.py --quick    # the bundled fit only (in-sample: it saw every point)
    python bench/perf_accuracy.py --holdout  # also: each group predicted by a fit without it

The headline is leave-one-source-out: each publication's runs (one repository, or one site
elsewhere) predicted by a fit that never saw that publication, so what it reports is how the
estimator does on runs it was not fitted on. It refits once per source (minutes).

The fit adjusts physical parameters only (kernel efficiencies per GPU generation, CPU and
launch overheads per engine generation; vfleet.perf.fit), by least squares on log errors
with a weak pull towards their starting values; no parameter belongs to one case. This
script only prints: the refit tool, `python controller/tools/refit.py`, writes the bundled
fit and bands (data/perf_fit.json, data/perf_bands.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

from vfleet.calibrate.fitting import at_bounds, predict_all
from vfleet.perf import bands
from vfleet.perf.fit import FITTED_EFFICIENCY, Fit, default_fit
from vfleet.plan.estimate import finish
from vfleet_devtools.perfcases import Case, load_cases
from vfleet_devtools.perfscore import (
    Scored,
    band_coverage,
    by_group,
    fitted_keys,
    group_pairs,
    held_out_bands,
    holdout,
    leave_one_source_out,
    neutral_start,
    pair_ratio_errors,
    prepare_all,
    regime_of,
    source_of,
    stats,
)

MEASURED_LEVELS = ("gemm", "hbm", "kv_read", "attention", "moe_gemm", "moe_narrow_cols")


def print_cross_validated(held: list[tuple[Scored, float]]) -> None:
    errors = [abs(e) for _, e in held]
    by_source: dict[str, list[float]] = {}
    for s, e in held:
        by_source.setdefault(source_of(s.case), []).append(abs(e))
    print("leave-one-source-out (each publication predicted by a fit that never saw it):")
    for source, errs in sorted(by_source.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"  {source:58} {len(errs):3} runs  median |error| {statistics.median(errs):6.1%}")
    print(
        f"cross-validated: {len(errors)} points, median |error| {statistics.median(errors):.1%}, "
        f"mean {statistics.fmean(errors):.1%}, within 20%: "
        f"{sum(e <= 0.2 for e in errors) / len(errors):.0%}"
    )
    table = held_out_bands(held)
    for name in (*bands.REGIMES, bands.POOLED):
        if name not in table:
            continue
        b = table[name]
        errs = [abs(e) for s, e in held if name == bands.POOLED or regime_of(s) == name]
        print(
            f"  {name:14} {b.points:3} runs  median |error| {statistics.median(errs):6.1%}  "
            f"p10-p90 band x{b.low:.2f} .. x{b.high:.2f} of the estimate"
        )
    cmp_band = bands.comparison_band(pair_ratio_errors([s for s, _ in held]))
    print(
        f"  comparison     {cmp_band.points:3} pairs of layouts (one publication and setup): "
        f"predicted over measured ratio p10-p90 x{cmp_band.low:.2f} .. x{cmp_band.high:.2f}"
    )
    print(
        f"p10-p90 band coverage of held-out runs (band made without their source): "
        f"{band_coverage(held):.0%} (aim: 75-85%)\n"
    )


def print_table(scored: list[Scored], skipped: list[tuple[Case, str]]) -> None:
    print(
        f"{'run':58} {'layout':16} {'measured':>9} {'vfleet':>9} {'error':>7} "
        f"{'TPOT meas/vf ms':>17}"
    )
    for s in sorted(scored, key=lambda s: s.case.group):
        tpot = ""
        if s.case.measured_tpot_ms:
            tpot = f"{s.case.measured_tpot_ms:7.1f} /{s.predicted_tpot or 0:7.1f}"
        print(
            f"{s.case.id[:58]:58} {s.prepared.request.layout.label[:16]:16} "
            f"{s.case.measured_tok_s:9.0f} {s.predicted:9.0f} {s.error:+7.0%} {tpot:>17}"
        )
    print(f"\nshown, not scored ({len(skipped)}):")
    for case, why in skipped:
        print(f"  {case.id[:60]:60} {why[:90]}")


def print_groups(scored: list[Scored]) -> None:
    """Each comparison group's runs in measured order, with the estimator's rank beside."""
    groups = by_group(scored)
    print("\nlayout order inside each comparison group (measured rank : vfleet rank):")
    for group, members in sorted(groups.items()):
        if len(members) < 2:
            continue
        by_pred = sorted(members, key=lambda m: -m.predicted)
        print(f"  {group}")
        for rank, m in enumerate(sorted(members, key=lambda m: -(m.case.measured_tok_s or 0))):
            print(
                f"    {rank + 1:>2} : {by_pred.index(m) + 1:<2} {m.case.id[-44:]:44} "
                f"{m.case.measured_tok_s:9.0f} {m.predicted:9.0f}"
            )


def print_pairs(scored: list[Scored]) -> None:
    wrong = [(a, b) for a, b, ok in group_pairs(scored) if not ok]
    print(f"\npairs ordered wrongly ({len(wrong)}):")
    for a, b in wrong:
        print(
            f"  {a.case.group[:34]:34} {a.case.id[-28:]:28} vs {b.case.id[-28:]:28} "
            f"measured {a.case.measured_tok_s:.0f}/{b.case.measured_tok_s:.0f} "
            f"vfleet {a.predicted:.0f}/{b.predicted:.0f}"
        )


def print_stats(label: str, st: dict[str, float]) -> None:
    print(
        f"\n{label}: {st['points']} points, median |error| {st['median_abs_error']:.1%}, "
        f"mean {st['mean_abs_error']:.1%}, within 20%: {st['within_20pct']:.0%}; "
        f"TPOT ({st['tpot_points']} steady runs) median |error| {st['tpot_median_abs_error']:.1%}; "
        f"same-group pairs in the right order {st['pairs_right']:.0%} of {st['pairs']}"
    )


def print_fit(fit: Fit, scored: list[Scored]) -> None:
    print("\nmeasured kernel efficiencies (data/kernels/, not fitted):")
    for gen, eff in fit.efficiency.items():
        measured = ", ".join(
            f"{k} {getattr(eff, k):.3g}" for k in MEASURED_LEVELS if k not in FITTED_EFFICIENCY
        )
        print(f"  {gen:8} {measured}")
    print("fitted parameters:")
    for gen, eff in fit.efficiency.items():
        print(f"  {gen:8} " + ", ".join(f"{k} {getattr(eff, k):.3g}" for k in FITTED_EFFICIENCY))
    for gen, over in fit.overheads.items():
        print(
            f"  {gen:8} step {over.step_s * 1e3:.3g} ms, per seq {over.seq_s * 1e6:.3g} us, "
            f"per request {over.request_s * 1e3:.3g} ms, per kernel {over.graph_kernel_s * 1e6:.3g}"
            f" us (+{over.eager_kernel_s * 1e6:.3g} us without CUDA graphs)"
        )
    bound = at_bounds(fit, fitted_keys(scored))
    print("fitted parameters at a bound: " + (", ".join(bound) if bound else "none"))


def print_ttft(scored: list[Scored], fit: Fit) -> None:
    """Median TTFT, estimated against published, for fixed-concurrency runs and for bursts
    (a burst's TTFT is mostly its queue). Not fitted: a check of the replay's timing."""
    rows: dict[str, list[float]] = {"fixed concurrency": [], "burst": []}
    for s in scored:
        measured = ((s.case.raw.get("results") or {}).get("ttft_ms") or {}).get("median")
        if not measured or s.prepared.trajectory is None:
            continue
        predicted = finish(s.prepared, fit).ttft_ms["median"]
        kind = "fixed concurrency" if s.prepared.request.concurrency else "burst"
        rows[kind].append(predicted / float(measured) - 1)
    for kind, errors in rows.items():
        if errors:
            print(
                f"median TTFT, {kind} runs ({len(errors)}): median |error| "
                f"{statistics.median(abs(e) for e in errors):.0%}, median signed error "
                f"{statistics.median(errors):+.0%}"
            )


def plot(scored: list[Scored], st: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 6))
    models = sorted({s.prepared.request.spec.name for s in scored})
    for model in models:
        pts = [s for s in scored if s.prepared.request.spec.name == model]
        ax.scatter(
            [s.case.measured_tok_s for s in pts],
            [s.predicted for s in pts],
            label=model.split("/")[-1],
            s=24,
        )
    low, high = 20, 20000
    line = np.geomspace(low, high, 50)
    ax.plot(line, line, color="black", linewidth=1)
    ax.fill_between(line, line * 0.8, line * 1.2, color="grey", alpha=0.2, label="within 20%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("measured output tokens/s")
    ax.set_ylabel("vfleet estimate, output tokens/s")
    ax.set_title(
        f"vfleet estimate vs {st['points']} measured vLLM runs, bundled fit\n"
        f"(in-sample median |error| {st['median_abs_error']:.0%}; the held-out figure "
        "is the bench's first line)"
    )
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--holdout", action="store_true", help="leave-one-group-out check")
    parser.add_argument(
        "--quick", action="store_true", help="skip the leave-one-source-out refits (in-sample only)"
    )
    parser.add_argument(
        "--held-back", action="store_true", help="also score the runs marked held_back"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--plot", type=Path, help="write predicted vs measured as a PNG")
    args = parser.parse_args()
    fit = default_fit()
    scored, skipped = prepare_all(load_cases(fit, include_held_back=args.held_back))
    predict_all(scored, fit)
    st = stats(scored)
    if args.json:
        print(json.dumps({"stats": st, "fit": fit.to_dict()}, indent=2))
        return 0
    if not args.quick:
        # The held-out predictions overwrite each point's; the bundled fit's come back after.
        print_cross_validated(leave_one_source_out(scored, neutral_start(fit)))
        predict_all(scored, fit)
    print_table(scored, skipped)
    print_groups(scored)
    print_pairs(scored)
    print_fit(fit, scored)
    print_stats("development set, in-sample (the fit saw every point)", st)
    print_ttft(scored, fit)
    if args.plot:
        plot(scored, st, args.plot)
        print(f"plot: {args.plot}")
    if args.holdout:
        held = holdout(scored, neutral_start(fit))
        errors = [abs(e) for _, e in held]
        print(
            f"leave-one-group-out: median |error| {statistics.median(errors):.1%}, "
            f"mean {statistics.fmean(errors):.1%} over {len(errors)} points"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
