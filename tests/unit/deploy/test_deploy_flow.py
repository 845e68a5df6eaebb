"""The middle of a deploy, in process (vfleet.deploy.flow): the probe facts read once, the
plan made around the values group_vars pin (so its predictions are for the plan that will
run), the launch files rendered from that plan, and the report built from the planner's own
budget. No host is needed: the facts are the real H200 capture's, probed twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support.bundles import deploy_context
from vfleet.deploy import flow
from vfleet.environment.context import Context
from vfleet.health import probed as health_probed
from vfleet.probe import to_cluster

PINNED = {"max_model_len": 4096, "max_num_seqs": 48, "max_num_batched_tokens": 4096}


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every facts file the flow parses."""
    seen: list[Path] = []
    real = to_cluster.load_facts_file

    def counted(path: Path) -> dict[str, Any]:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(to_cluster, "load_facts_file", counted)
    return seen


def test_facts_are_read_once_and_the_plan_is_made_around_the_pins(tmp_path, reads):
    ctx = deploy_context(tmp_path, PINNED)
    probed = health_probed.probed_cluster(ctx, "deploy", allow_partial=False)
    result = flow.plan(ctx, probed.cluster)
    rendered = flow.render(ctx, result.plan, probed.cluster)
    flow.write_report(ctx, result, rendered.endpoints)

    assert len(reads) == 2  # two hosts, each file parsed once for the whole deploy
    doc = json.loads((ctx.artifacts / "plan.json").read_text())
    assert {k: doc[k] for k in PINNED} == PINNED and doc["overrides"] == PINNED
    # The predictions are the pinned plan's: its budget has the pinned context.
    winner = result.winner
    assert winner.budget is not None and winner.budget.max_model_len == 4096
    assert winner.max_num_seqs == 48 and winner.max_num_batched_tokens == 4096
    launch = next((ctx.artifacts / "launch").rglob("launch.sh")).read_text()
    assert "--max-num-seqs 48" in launch and "--max-model-len 4096" in launch
    assert "--enforce-eager" in launch
    report = (ctx.artifacts / "report" / "report.md").read_text()
    assert "Planned around pinned values from group_vars" in report and str(
        doc["kv_tokens_per_engine"]
    ) in report.replace(",", "")


def test_without_pins_the_search_chooses_other_knobs(tmp_path, reads):
    ctx = deploy_context(tmp_path, {})
    probed = health_probed.probed_cluster(ctx, "deploy", allow_partial=False)
    doc = flow.plan(ctx, probed.cluster).plan.document()
    assert "overrides" not in doc
    assert (doc["max_model_len"], doc["max_num_seqs"]) != (4096, 48)


def test_a_failed_probe_stops_the_plan_in_one_line(tmp_path, reads):
    ctx = deploy_context(tmp_path, {})
    path = ctx.artifacts / "facts" / "gpu-b.json"
    raw = json.loads(path.read_text())
    raw.update(probe_failed=True, errors=["nvidia-smi -q -x failed: Unknown Error"])
    path.write_text(json.dumps(raw))
    with pytest.raises(Exception, match=r"the probe failed on gpu-b \(nvidia-smi -q -x failed"):
        health_probed.probed_cluster(ctx, "deploy", allow_partial=False)


def test_the_phase_summary_lines_the_seconds_up_in_one_column(tmp_path, capsys):
    from vfleet.deploy.pipeline import print_summary

    ctx = Context(env="local", root=tmp_path)
    ctx.timings = [("plan", 0.1), ("install: common, nvidia_driver, nccl, vllm", 165.9)]
    print_summary(ctx, [])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.endswith(" s")]
    assert [row.split()[0] for row in rows] == ["plan", "install:", "total"]
    assert len({row.rindex(" s") for row in rows}) == 1, rows  # one column of seconds


def test_group_vars_engine_environment_reaches_the_rendered_env_files(tmp_path, reads):
    ctx = deploy_context(tmp_path, PINNED)
    ctx.group_vars["vfleet_render_env"] = ["VLLM_CPU_OMP_THREADS_BIND=nobind"]
    assert flow.render_values(ctx)["--env"] == ["VLLM_CPU_OMP_THREADS_BIND=nobind"]
    probed = health_probed.probed_cluster(ctx, "deploy", allow_partial=False)
    result = flow.plan(ctx, probed.cluster)
    flow.render(ctx, result.plan, probed.cluster)
    env_files = list((ctx.artifacts / "launch").rglob("vllm.env"))
    assert env_files
    for env_file in env_files:
        assert "VLLM_CPU_OMP_THREADS_BIND=nobind" in env_file.read_text().splitlines()
