"""`vfleet calibrate` on real measurements: a cluster's ledger made of one author's published
vLLM runs on an 8 x H100 node (gpt-oss-120b at TP1 and TP2, several workloads;
data/perf_cases/measured.json), on the facts of a real 8 x H100 NVSwitch capture,
written as the deploy writes ledger lines. The calibration must fit those runs at least as
well as the bundled fit, predict each run held out, and be what `plan-env` then plans with
and says so; too little data, or only stand-in engines, is refused with one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support.bundles import h100_context
from support.cli_run import vfleet
from support.ledger import ledger_line, published_runs
from vfleet.calibrate import calibration, points
from vfleet.calibrate.points import fitting_points, read_ledger
from vfleet.deploy import flow
from vfleet.errors import UserError
from vfleet.feedback import calibrate_env
from vfleet.health import probed as health_probed

MODEL = "openai/gpt-oss-120b"


def _write(ctx: Any, lines: list[dict[str, Any]]) -> Path:
    path = ctx.artifacts / "ledger.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture(scope="module")
def runs() -> list[Any]:
    found = published_runs()
    assert len(found) >= 5, [c.id for c in found]
    return found


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory, runs) -> tuple[Any, dict[str, Any], Path, list[str]]:
    """One calibration (a fit and one more per run held out: ~15 s), shared."""
    ctx = h100_context(tmp_path_factory.mktemp("calibrated"))
    _write(ctx, [ledger_line(c) for c in runs])
    return (ctx, *calibrate_env.calibrate_context(ctx))


def test_a_calibration_fits_the_clusters_runs_and_predicts_each_held_out(calibrated, runs):
    ctx, doc, path, left_out = calibrated
    assert path == ctx.artifacts / "calibration.json" and json.loads(path.read_text()) == doc
    assert doc["schema"] == calibration.SCHEMA and doc["runs"] == len(runs) and not left_out
    score = doc["score"]
    assert score["calibrated_median_abs_error"] <= score["bundled_median_abs_error"]
    assert score["held_out_median_abs_error"] is not None
    # Only Hopper's efficiencies and the V1 engine's overheads move, each within its bounds.
    assert {k.split("/")[1] for k in doc["changed"]} == {"hopper", "v1"}
    assert "efficiency/hopper/moe_gemm" in doc["changed"]  # gpt-oss has experts
    assert "efficiency/hopper/a2a" not in doc["changed"]  # no EP: no all-to-all
    assert any(abs(new / old - 1) > 0.01 for old, new in doc["changed"].values())
    for row in doc["runs_table"]:
        assert row["measured_tok_s"] > 0 and row["held_out_tok_s"] > 0


def test_plan_env_plans_with_the_calibration_and_the_report_shows_what_changed(calibrated, capsys):
    ctx = calibrated[0]
    probed = health_probed.probed_cluster(ctx, "plan-env", allow_partial=False)
    result = flow.plan(ctx, probed.cluster)
    assert "using the calibration artifacts/prod/calibration.json" in capsys.readouterr().out
    assert result.inputs.fit.source.endswith("calibration.json")
    rendered = flow.render(ctx, result.plan, probed.cluster)
    flow.write_report(ctx, result, rendered.endpoints)
    report = (ctx.artifacts / "report" / "report.md").read_text()
    section = report.split("## What the calibration changed")[1]
    assert "bundled fit | calibrated" in section and "predicted tokens/s" in section


def test_estimate_and_plan_take_a_calibration_file(calibrated, runs):
    ctx, _doc, path, _ = calibrated
    cluster = ctx.artifacts / "facts"
    args = ["--cluster", str(cluster), "--model", MODEL, "--layout", "TP2"]
    args += ["--input-len", "1000", "--output-len", "200", "--concurrency", "16", "--json"]
    plain = vfleet("estimate", *args)
    tuned = vfleet("estimate", *args, "--calibration", str(path))
    assert plain.returncode == tuned.returncode == 0, tuned.stderr
    assert f"calibrated on {len(runs)} run(s) of prod" in tuned.stderr
    before, after = json.loads(plain.stdout), json.loads(tuned.stdout)
    assert after["parameters"]["source"] == str(path)
    assert after["output_tokens_per_s"]["median"] != before["output_tokens_per_s"]["median"]
    planned = vfleet(
        "plan",
        "--cluster",
        str(cluster),
        "--model",
        MODEL,
        "--calibration",
        str(path),
        "--json",
    )
    assert planned.returncode == 0 and "using " + str(path) in planned.stderr


def test_too_few_runs_are_refused_with_what_is_missing(tmp_path, runs):
    ctx = h100_context(tmp_path)
    _write(ctx, [ledger_line(runs[0]), ledger_line(runs[0])])
    with pytest.raises(
        UserError,
        match=r"too little data to calibrate prod: 2 usable run\(s\) "
        r"at 1 operating point\(s\), need 3 at 2 or more",
    ):
        calibrate_env.calibrate_context(ctx)
    assert not (ctx.artifacts / "calibration.json").exists()


def test_stand_in_engines_are_not_calibrated_on(tmp_path, runs):
    ctx = h100_context(tmp_path)
    _write(ctx, [ledger_line(c, comparable=False) for c in runs])
    with pytest.raises(
        UserError,
        match=r"0 usable run.*left out: not comparable: the engines "
        r"are the vLLM CPU build standing in",
    ):
        calibrate_env.calibrate_context(ctx)


def test_a_broken_ledger_line_is_named(tmp_path, runs):
    ctx = h100_context(tmp_path)
    path = _write(ctx, [ledger_line(runs[0])])
    with path.open("a") as out:
        out.write('{"engine": "e", "comparable": "yes", "measured": {}}\n')
    with pytest.raises(UserError, match=r"ledger.jsonl:2: not a ledger line \(comparable"):
        read_ledger(path)


def test_the_cli_says_no_ledger_in_one_line(tmp_path):
    ctx = h100_context(tmp_path)
    got = vfleet("calibrate", "--env", "prod", "--root", str(ctx.root))
    assert got.returncode == 2 and got.stderr.count("\n") == 1, got.stderr


def test_runs_on_another_gpu_are_left_out(tmp_path, runs):
    ctx = h100_context(tmp_path)
    lines = [ledger_line(c) for c in runs]
    lines[0]["gpu"] = "H200-SXM-141GB"  # an earlier deploy on other machines
    cluster = health_probed.probed_cluster(ctx, "calibrate", allow_partial=False).cluster
    found = fitting_points(read_ledger(_write(ctx, lines)), cluster)
    assert len(found.usable) == len(runs) - 1
    assert "measured on H200-SXM-141GB, the cluster now has H100" in found.skipped[0][1]


def test_the_newest_runs_are_kept_within_the_replay_budget(tmp_path, runs, monkeypatch):
    ctx = h100_context(tmp_path)
    path = _write(ctx, [ledger_line(c) for c in runs])
    cluster = health_probed.probed_cluster(ctx, "calibrate", allow_partial=False).cluster
    whole = fitting_points(read_ledger(path), cluster)
    assert len(whole.usable) == len(runs)
    costs = [points._replay_cost(u.point) for u in whole.usable]
    # Room for the two newest runs and their three fits, not for a third.
    monkeypatch.setattr(points, "MAX_CALIBRATION_STEPS", (costs[-1] + costs[-2]) * 3)
    bounded = fitting_points(read_ledger(path), cluster)
    assert [u.line.line_number for u in bounded.usable] == [len(runs) - 1, len(runs)]
    assert [line.line_number for line, _ in bounded.skipped] == list(range(1, len(runs) - 1))
    assert all("step-replays a calibration allows" in why for _, why in bounded.skipped)
