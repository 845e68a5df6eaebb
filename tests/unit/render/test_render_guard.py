"""render trusts neither the plan document nor the path it writes to: a plan whose labels,
replicas, model, GPU or layout fields disagree with its ranks or hold shell text is refused
in one line, and a `--out` that is or lies under a symbolic link is refused unless the
resolved path is given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support.cli_run import Result, vfleet
from support.hostile import assert_one_line
from support.paths import REPO

CLUSTER = str(REPO / "examples/clusters/1x8-h200.yaml")
OTHER_GPU = str(REPO / "examples/clusters/1x8-h100.yaml")
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    made = vfleet("plan", "--cluster", CLUSTER, "--model", MODEL, "--out", str(path))
    assert made.returncode == 0, made.stderr
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def _render(plan: dict[str, Any], tmp_path: Path, cluster: str = CLUSTER) -> Result:
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(plan))
    return vfleet("render", "--plan", str(path), "--cluster", cluster, "--out", str(tmp_path / "o"))


def test_the_planners_plan_renders(plan: dict[str, Any], tmp_path: Path) -> None:
    result = _render(plan, tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "o" / "endpoints.json").is_file()


EDITS: dict[str, tuple[dict[str, Any], str]] = {
    "100 replicas on 8 GPUs": ({"replicas": 100}, "replicas is 100"),
    "layout other than its sizes": ({"layout": "TP4 PP2"}, "does not match"),
    "layout with shell text": ({"layout": "TP1 $(touch /tmp/x)"}, "does not match"),
    "model with shell text": ({"model": "x; touch /tmp/x"}, "model"),
    "model starting with a dash": ({"model": "--trust-remote-code"}, "model"),
    "gpu with shell text": ({"gpu": "H200`id`"}, "gpu"),
    "model type with a newline": ({"model_type": "llama\nx"}, "model_type"),
}


@pytest.mark.parametrize("case", EDITS)
def test_a_hand_edited_plan_is_refused(plan: dict[str, Any], tmp_path: Path, case: str) -> None:
    change, needle = EDITS[case]
    result = _render({**plan, **change}, tmp_path)
    assert result.returncode == 2, (case, result.stderr)
    assert_one_line(result.stderr.strip())
    assert needle in result.stderr
    assert not (tmp_path / "o").exists()


def test_a_plan_for_another_gpu_is_refused(plan: dict[str, Any], tmp_path: Path) -> None:
    result = _render(plan, tmp_path, OTHER_GPU)
    assert result.returncode == 2
    assert "plan is for H200" in result.stderr and "re-plan" in result.stderr


def test_an_out_that_is_a_symlink_is_refused(plan: dict[str, Any], tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("not vfleet's")
    link = tmp_path / "link"
    link.symlink_to(target)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    result = vfleet("render", "--plan", str(path), "--cluster", CLUSTER, "--out", str(link))
    assert result.returncode == 2
    assert_one_line(result.stderr.strip())
    assert "is a symbolic link" in result.stderr and str(target) in result.stderr
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt"]


def test_an_out_under_a_symlink_is_refused_and_the_resolved_path_accepted(
    plan: dict[str, Any], tmp_path: Path
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    under = tmp_path / "link" / "launch"
    refused = vfleet("render", "--plan", str(path), "--cluster", CLUSTER, "--out", str(under))
    assert refused.returncode == 2 and "lies under the symbolic link" in refused.stderr
    assert not (real / "launch").exists()
    resolved = vfleet(
        "render", "--plan", str(path), "--cluster", CLUSTER, "--out", str(real / "launch")
    )
    assert resolved.returncode == 0, resolved.stderr
    assert (real / "launch" / "endpoints.json").is_file()
