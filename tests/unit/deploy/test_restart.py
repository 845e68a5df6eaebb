"""`vfleet restart`'s command (vfleet.deploy.pipeline.restart): the launch playbook with every
engine asked to restart, one host at a time, or all hosts of an engine together when one spans
several. The rolling restart itself runs on the test hosts in tests/e2e/test_deploy.py (the
upgrade's restart: the same playbook and the same serial)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vfleet.deploy import pipeline
from vfleet.environment.context import Context
from vfleet.errors import UserError


def _deployed(tmp_path: Path, hosts_per_engine: list[list[str]]) -> Context:
    ctx = Context("prod", tmp_path, group_vars={})
    launch = ctx.artifacts / "launch"
    launch.mkdir(parents=True)
    endpoints = [
        {"engine": f"engine-{n}", "hosts": hosts, "host": hosts[0]}
        for n, hosts in enumerate(hosts_per_engine)
    ]
    (launch / "endpoints.json").write_text(json.dumps({"endpoints": endpoints}))
    return ctx


@pytest.fixture
def books(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, dict[str, Any]]]:
    """The playbooks restart runs: (phase, book, extra vars)."""
    ran: list[tuple[str, str, dict[str, Any]]] = []
    monkeypatch.setattr(
        pipeline, "playbook", lambda ctx, name, book, extra=None: ran.append((name, book, extra))
    )
    monkeypatch.setattr(pipeline, "print_summary", lambda ctx, endpoints: None)
    return ran


@pytest.mark.parametrize(
    ("hosts_per_engine", "serial"),
    [([["h1"], ["h2"]], 1), ([["h1", "h2"], ["h3", "h4"]], "100%")],
    ids=["one-host-engines", "multi-host-engines"],
)
def test_restart_runs_the_launch_playbook_restarting_every_engine(
    tmp_path, monkeypatch, books, hosts_per_engine, serial
):
    ctx = _deployed(tmp_path, hosts_per_engine)
    monkeypatch.setattr(pipeline, "load_context", lambda env, root=None: ctx)
    assert pipeline.restart("prod") == 0
    assert books == [
        (
            "rolling restart (health + completion)",
            "launch.yml",
            {"vfleet_launch_serial": serial, "vllm_launch_restart": True},
        )
    ]


def test_restart_with_nothing_deployed_says_what_to_run(tmp_path, monkeypatch, books):
    ctx = Context("prod", tmp_path, group_vars={})
    monkeypatch.setattr(pipeline, "load_context", lambda env, root=None: ctx)
    with pytest.raises(UserError, match="nothing is deployed in prod: run make deploy ENV=prod"):
        pipeline.restart("prod")
    assert books == []
