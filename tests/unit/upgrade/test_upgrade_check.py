"""`vfleet upgrade-check`: the deployment as rendered for one release against the same
deployment rendered for another, with the facts recorded from the releases themselves."""

from __future__ import annotations

import itertools
import json

import pytest
import yaml

from support.cli_run import vfleet
from support.render_cases import CASES, RenderCase
from vfleet.catalog.flag_registry import exact_record, flag_set, recorded_versions
from vfleet.catalog.models import load_model
from vfleet.catalog.releases import parse_version, traits
from vfleet.plan.make import PlanRequest, make_plan
from vfleet.plan.search import parse_layout
from vfleet.plan.workload import PRESETS
from vfleet.topology.cluster import cluster_from_dict
from vfleet.upgrade import breaks, changes, observability
from vfleet.upgrade.check import Deployment, check
from vfleet.upgrade.release_facts import facts_for, recorded
from vfleet.upgrade.rendered import RenderedEngine

# Releases with both a flag record and a runtime record, oldest first.
RELEASES = sorted(set(recorded_versions()) & set(recorded()), key=parse_version)


def _deployment(case: RenderCase, version: str) -> Deployment:
    cluster = cluster_from_dict(yaml.safe_load(case.cluster))
    spec = load_model(case.model)
    request = PlanRequest(
        spec=spec,
        cluster=cluster,
        workload=PRESETS["chat"],
        traits=traits(version),
        layout=parse_layout(case.layout) if case.layout else None,
        mode="aggregated",
    )
    return Deployment(
        plan=make_plan(request).plan,
        cluster=cluster,
        spec=spec,
        plan_request=request,
        render_values=dict(zip(case.render_args[::2], case.render_args[1::2], strict=True)),
        render_source="test",
    )


def test_the_record_covers_0_8_5_to_0_33_from_the_releases_themselves():
    assert RELEASES[0] == "0.8.5.post1" and RELEASES[-1] == "0.33.0"
    assert len(RELEASES) >= 18
    facts = {v: facts_for(v) for v in ("0.11.0", "0.12.0", "0.33.0")}
    assert "VLLM_USE_V1" in facts["0.11.0"].envs and "VLLM_USE_V1" not in facts["0.12.0"].envs
    assert "vllm:gpu_cache_usage_perc" in facts["0.11.0"].metrics
    assert "vllm:gpu_cache_usage_perc" not in facts["0.12.0"].metrics
    assert "vllm:kv_cache_usage_perc" in facts["0.33.0"].metrics
    assert {"kv_connector", "kv_role"} <= facts["0.33.0"].config_fields["kv_transfer"]
    assert facts_for("0.21.0") is None  # no wheel on PyPI: no record, never a guess


PAIRS = list(itertools.pairwise(RELEASES))


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("single-replicas", "mp-tp8-pp2")])
def test_every_consecutive_release_pair_checks_the_golden_deployments(case):
    """Each step of an upgrade path from 0.8.5 to 0.33: the check runs, says something only
    where the releases differ, and its exit code follows its breaks."""
    seen_breaks = set()
    for old, new in PAIRS:
        report = check(_deployment(case, old), new)
        assert parse_version(report.from_version) == parse_version(old)
        assert report.to_version == new
        assert report.exit_code == (1 if report.part("breaks") else 0)
        doc = report.to_json()
        assert set(doc) == {
            "from",
            "to",
            "breaks",
            "changes",
            "observability",
            "notes",
            "exit_code",
        }
        json.dumps(doc)
        seen_breaks |= {f.item for f in report.part("breaks")}
        # The same release on both sides moves nothing.
    same = check(_deployment(case, "0.33.0"), "0.33.0")
    assert same.findings == [] and same.exit_code == 0
    # What vfleet renders for a release, that release accepts: a path through vfleet's own
    # renderings breaks only where a rendered flag is later removed.
    for item in seen_breaks:
        assert item.startswith(("--", "VLLM_")), item


def test_a_removed_flag_breaks_and_names_what_is_rendered_instead():
    engine = RenderedEngine("h1/engine-0", ("vllm", "serve", "m", "--swap-space", "4"), {})
    twin = RenderedEngine("h1/engine-0", ("vllm", "serve", "m"), {})
    assert flag_set("0.17.1").has("--swap-space") and not flag_set("0.18.1").has("--swap-space")
    found = breaks.flag_breaks([engine], [twin], flag_set("0.18.1"))
    assert [(f.part, f.item) for f in found] == [("breaks", "--swap-space")]
    assert (
        "unrecognized arguments" in found[0].detail and found[0].instead == "vfleet leaves it out"
    )
    assert breaks.flag_breaks([engine], [twin], flag_set("0.17.1")) == []


def test_an_extra_arg_the_target_removed_breaks_the_files_and_the_render():
    """An operator's --extra-arg is rendered as given: the target refuses it at start, and
    vfleet refuses to render it for the target."""
    case = CASES[0]
    dep = _deployment(case, "0.12.0")
    dep = Deployment(
        **{**dep.__dict__, "render_values": {"--extra-arg": ["--cuda-graph-sizes", "8"]}}
    )
    report = check(dep, "0.13.0")
    found = {(f.kind, f.item) for f in report.part("breaks")}
    assert ("flag", "--cuda-graph-sizes") in found and ("render", "render") in found
    assert report.exit_code == 1


@pytest.mark.parametrize(
    "name, old, new",
    [("VLLM_USE_V1", "0.11.0", "0.12.0"), ("VLLM_ATTENTION_BACKEND", "0.13.0", "0.15.1")],
)
def test_an_environment_variable_the_target_no_longer_reads_breaks(name, old, new):
    engine = RenderedEngine(
        "h1/engine-0", ("vllm", "serve", "m"), {name: "1", "HF_HUB_OFFLINE": "1"}
    )
    assert breaks.env_breaks([engine], [engine], facts_for(old)) == []
    found = breaks.env_breaks([engine], [engine], facts_for(new))
    assert [f.item for f in found] == [name]  # a variable that is not vLLM's is not checked
    assert "silently ignored" in found[0].detail


def test_a_kv_transfer_config_field_the_target_dropped_breaks():
    config = json.dumps({"kv_connector": "P2pNcclConnector", "kv_role": "kv_both", "kv_rank": 0})
    engine = RenderedEngine(
        "h1/engine-0", ("vllm", "serve", "m", "--kv-transfer-config", config), {}
    )
    assert breaks.config_breaks([engine], [engine], facts_for("0.31.0")) == []
    found = breaks.config_breaks([engine], [engine], facts_for("0.32.0"))
    assert [f.item for f in found] == ["--kv-transfer-config kv_rank"]


def test_counting_cuda_graphs_into_the_budget_moves_kv_capacity_with_the_same_flags():
    dep = _deployment(CASES[0], "0.19.1")
    found = changes.capacity_changes(dep.plan, dep.spec, dep.cluster.gpu, "0.20.0")
    kv = [f for f in found if f.item.startswith("KV tokens")]
    assert kv and "CUDA graphs 0.00 ->" in kv[0].detail
    old, new = (int(x.replace(",", "")) for x in kv[0].detail.split(" (")[0].split(" -> "))
    assert new < old


def test_the_async_scheduling_default_is_a_silent_change():
    engine = RenderedEngine("h1/engine-0", ("vllm", "serve", "m"), {})
    found = changes.default_changes([engine], "0.13.0", "0.15.1")
    assert any(f.item == "async scheduling" and "on by default" in f.detail for f in found)
    pinned = RenderedEngine("h1/engine-0", ("vllm", "serve", "m", "--no-async-scheduling"), {})
    assert not any(
        f.item == "async scheduling" for f in changes.default_changes([pinned], "0.13.0", "0.15.1")
    )


def test_a_renamed_metric_is_reported_for_doctor_and_for_the_bundles_files(tmp_path):
    old, new = facts_for("0.11.0"), facts_for("0.12.0")
    signals = observability.doctor_signals(old, new)
    kv = [f for f in signals if f.item == "vllm:gpu_cache_usage_perc"]
    assert kv and kv[0].instead == "vllm:kv_cache_usage_perc"
    dashboards = tmp_path / "dashboards"
    dashboards.mkdir()
    (dashboards / "vllm.json").write_text(
        '{"expr": "avg(vllm:gpu_cache_usage_perc)"}\n{"expr": "vllm:num_requests_running"}\n'
    )
    found = observability.bundle_metrics(tmp_path, old, new)
    assert [(f.item, f.where) for f in found] == [
        ("vllm:gpu_cache_usage_perc", "dashboards/vllm.json:1")
    ]
    assert "kv_cache_usage_perc" in found[0].instead


def _plan_files(tmp_path, version="0.11.0"):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CASES[0].cluster)
    plan = tmp_path / "plan.json"
    made = vfleet(
        "plan", "--cluster", str(cluster), "--model", CASES[0].model, "--vllm-version", version,
        "--mode", "aggregated", "--out", str(plan),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return plan, cluster


def test_the_command_exits_0_without_breaks_and_prints_json(tmp_path):
    plan, cluster = _plan_files(tmp_path)
    out = vfleet("upgrade-check", "--plan", str(plan), "--cluster", str(cluster), "--to", "0.12.0")
    assert out.returncode == 0, out.stderr
    assert "vLLM 0.11.0 -> 0.12.0" in out.stdout and "Result: nothing breaks" in out.stdout
    doc = json.loads(
        vfleet(
            "upgrade-check", "--plan", str(plan), "--cluster", str(cluster), "--to", "0.12.0",
            "--json",
        ).stdout
    )  # fmt: skip
    assert doc["exit_code"] == 0 and doc["breaks"] == []
    assert any(f["item"] == "vllm:gpu_cache_usage_perc" for f in doc["observability"])


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--to", "0.21.0"], "no record of vLLM 0.21.0"),
        (["--to", "0.34.0"], "outside the supported range"),
        (["--to", "banana"], "not a version number"),
        ([], "--plan needs --to"),
        (["--to", "0.33.0", "--gate"], "--gate is for --env"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, argv, says):
    plan, cluster = _plan_files(tmp_path)
    out = vfleet("upgrade-check", "--plan", str(plan), "--cluster", str(cluster), *argv)
    assert out.returncode == 2, out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], out.stderr


def test_a_release_recorded_for_flags_only_is_refused_as_a_target():
    flags_only = [v for v in recorded_versions() if facts_for(v) is None]
    assert "0.21.0" in flags_only and exact_record("0.21.0") == "0.21.0"
    out = vfleet("upgrade-check", "--env", "local", "--to", "0.21.0")
    assert out.returncode == 2 and "no record of vLLM 0.21.0" in out.stderr


def test_the_worked_example_in_the_docs_is_what_the_command_prints(tmp_path):
    """docs/upgrade.md's example: its cluster, its commands, and the lines of its output
    that do not depend on the estimator's fit (breaks and metric names) as printed today."""
    from support.paths import REPO

    doc = (REPO / "docs" / "upgrade.md").read_text()
    cluster = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "two-h200.yaml").write_text(cluster)
    plan = tmp_path / "plan-0.11.json"
    made = vfleet(
        "plan", "--cluster", str(tmp_path / "two-h200.yaml"), "--model", "deepseek-ai/DeepSeek-V3",
        "--vllm-version", "0.11.0", "--out", str(plan),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    out = vfleet(
        "upgrade-check", "--plan", str(plan), "--cluster", str(tmp_path / "two-h200.yaml"),
        "--to", "0.33.0",
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    printed = out.stdout.splitlines()
    start = printed.index(next(x for x in printed if x.startswith("Breaks:")))
    end = printed.index(next(x for x in printed if x.startswith("Changes silently:")))
    obs = printed.index(next(x for x in printed if x.startswith("Observability:")))
    for line in printed[start:end] + printed[obs:]:
        assert line in doc, line
    # The plan compared a prefill/decode split and serves from one pool (as the docs say):
    # neither the subject nor any change speaks of pools.
    assert json.loads(plan.read_text())["disaggregation"]["chosen"] == "aggregated"
    assert "serves from one pool" in doc
    assert "P(" not in printed[0] and not any("pool: " in line for line in printed)
