"""The report's concurrency sweep and calibration sections.

The sweep: the ledger's sweep lines of each engine, output tok/s, TPOT p99 and preemptions
against the load test's concurrency, with the plan's max-num-seqs and the KV cache's
ceiling at the run's lengths marked; past that ceiling more concurrency buys only
preemption (docs/high-concurrency-rules.md#max-num-seqs-from-the-kv-budget). The
calibration: what planning with the cluster's own calibration changed, against the bundled
fit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vfleet.budget.compute import requests_held
from vfleet.documents.plan import Plan, Predicted
from vfleet.present.report import Block, Image, Section, Table, Text, cell


def kv_ceiling(kv_tokens: Any, block_size: Any, input_len: int, output_len: int) -> int | None:
    """Requests the KV cache holds at once when each grows to input + output tokens."""
    if not isinstance(kv_tokens, int | float) or not isinstance(block_size, int) or not kv_tokens:
        return None
    return requests_held(int(kv_tokens), block_size, input_len, output_len)


def sweep_lines(ledger: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """engine -> its sweep lines by concurrency."""
    out: dict[str, list[dict[str, Any]]] = {}
    for line in ledger:
        if line.get("sweep_level"):
            out.setdefault(line["engine"], []).append(line)
    return {e: sorted(lines, key=lambda x: x["sweep_level"]) for e, lines in out.items()}


def _ceilings(line: dict[str, Any]) -> tuple[int | None, int | None]:
    op = line.get("operating_point") or {}
    if not op:
        return None, None
    want, got = line["predicted"], line["measured"]
    lengths = (op["input_len"], op["output_len"])
    return (
        kv_ceiling(want.get("kv_tokens"), want.get("block_size"), *lengths),
        kv_ceiling(got.get("kv_tokens"), got.get("block_size") or want.get("block_size"), *lengths),
    )


def sweep_section(
    ledger: list[dict[str, Any]], plan: Plan, out_dir: Path
) -> tuple[Section, Path] | None:
    by_engine = sweep_lines(ledger)
    if not by_engine:
        return None
    rows = []
    for engine, lines in by_engine.items():
        for line in lines:
            want, got = line["predicted"], line["measured"]
            rows.append(
                [
                    engine,
                    str(line["sweep_level"]),
                    cell(got.get("output_tokens_per_s"), "{:,.1f}"),
                    cell(want.get("output_tokens_per_s"), "{:,.1f}"),
                    cell(got.get("tpot_ms_p99"), "{:,.2f}"),
                    cell(want.get("tpot_ms_p99"), "{:,.2f}"),
                    cell(got.get("preemptions"), "{:,.0f}"),
                ]
            )
    first = next(iter(by_engine.values()))[0]
    predicted_cap, measured_cap = _ceilings(first)
    marks = [f"max-num-seqs {plan.max_num_seqs}"]
    if measured_cap is not None:
        marks.append(f"the KV cache's ceiling, {measured_cap:,} requests (from its blocks)")
    if predicted_cap is not None and predicted_cap != measured_cap:
        marks.append(f"{predicted_cap:,} as the plan's KV budget predicts")
    path = out_dir / "sweep.png"
    _plot(by_engine, plan.max_num_seqs, predicted_cap, measured_cap, path)
    said = "Each engine again at rising concurrency. Marked: " + "; ".join(marks) + "."
    past = _past_the_ceiling(next(iter(by_engine.values())), measured_cap or predicted_cap)
    blocks: list[Block] = [
        Text([("", said + (" " + past if past else ""))]),
        Table(
            [
                "engine",
                "concurrency",
                "output tok/s",
                "predicted",
                "TPOT p99 ms",
                "predicted",
                "preemptions",
            ],
            rows,
        ),
        Image(path.name, "concurrency sweep"),
    ]
    if not first["comparable"]:
        blocks.append(Text([("", f"The predictions are no check here: {first['why_not']}.")]))
    return Section("Concurrency sweep", blocks), path


def _past_the_ceiling(lines: list[dict[str, Any]], cap: int | None) -> str:
    """What going past the ceiling bought, from the measurements (the chapter expects
    throughput to flatten and preemptions to grow)."""
    if cap is None:
        return ""
    below = [x for x in lines if x["sweep_level"] <= cap]
    above = [x for x in lines if x["sweep_level"] > cap]
    if not below or not above:
        return ""
    a, b = below[-1], above[-1]
    tok_a, tok_b = (
        a["measured"].get("output_tokens_per_s"),
        b["measured"].get("output_tokens_per_s"),
    )
    if not tok_a or not tok_b:
        return ""
    pre_a, pre_b = a["measured"].get("preemptions") or 0, b["measured"].get("preemptions") or 0
    return (
        f"From {a['sweep_level']} to {b['sweep_level']} requests in flight, past the ceiling, "
        f"output tok/s changed {tok_b / tok_a - 1:+.0%} and the preemptions a level added "
        f"went from {pre_a:,.0f} to {pre_b:,.0f}."
    )


def _plot(
    by_engine: dict[str, list[dict[str, Any]]],
    max_num_seqs: int,
    predicted_cap: int | None,
    measured_cap: int | None,
    path: Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("output_tokens_per_s", "output tokens/s"),
        ("tpot_ms_p99", "TPOT p99 (ms)"),
        ("preemptions", "preemptions"),
    )
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    top = max(line["sweep_level"] for lines in by_engine.values() for line in lines)
    for ax, (key, label) in zip(axes, panels, strict=True):
        for engine, lines in by_engine.items():
            x = [line["sweep_level"] for line in lines]
            ax.plot(x, [line["measured"].get(key) or 0 for line in lines], "o-", label=engine)
        for value, style, name in (
            (measured_cap, "--", "KV ceiling (measured)"),
            (predicted_cap if predicted_cap != measured_cap else None, ":", "KV ceiling (plan)"),
            (max_num_seqs if max_num_seqs <= top * 2 else None, "-.", "max-num-seqs"),
        ):
            if value:
                ax.axvline(value, linestyle=style, color="grey", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (--max-concurrency)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("Concurrency sweep (measured)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def calibration_section(summary: str, bundled: Plan, calibrated: Plan) -> Section:
    """The plan with the bundled fit next to the plan with the cluster's calibration."""
    plans = (bundled, calibrated)
    assert bundled.predicted is not None and calibrated.predicted is not None
    predicted: tuple[Predicted, ...] = (bundled.predicted, calibrated.predicted)
    rows = []
    for label, old, new in (
        ("layout", *(f"{d.layout} x{d.replicas}" for d in plans)),
        ("max-num-seqs", *(str(d.max_num_seqs) for d in plans)),
        ("max-num-batched-tokens", *(str(d.max_num_batched_tokens) for d in plans)),
        ("predicted tokens/s", *(f"{p.tokens_per_s:,.0f}" for p in predicted)),
        ("predicted TPOT ms", *(f"{p.tpot_ms:.1f}" for p in predicted)),
        ("predicted TTFT ms", *(f"{p.ttft_ms:.0f}" for p in predicted)),
    ):
        rows.append([label, old, new, "" if old == new else "changed"])
    return Section(
        "What the calibration changed",
        [
            Text([("", f"Planned with this cluster's calibration: {summary}.")]),
            Table(["", "bundled fit", "calibrated", ""], rows),
        ],
    )
