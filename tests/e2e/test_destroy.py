"""`make destroy` after the deploy tests and the fault tests (this file's name sorts after
theirs): it must leave no test host, namespace or artifact behind but the environment's
history (the ledger and the reports), which `make destroy PURGE=1` then removes. Only the
local default's testbed is checked: molecule's scenarios run their own testbeds beside this
tier."""

from __future__ import annotations

import json
import subprocess

import pytest

from .deployment import ARTIFACTS, REPO, TESTBED, make

pytestmark = pytest.mark.testbed


def test_destroy_leaves_nothing_but_the_history(deployed):
    assert deployed.returncode == 0
    out = make("destroy")
    assert out.returncode == 0, out.stdout[-2000:]
    assert sorted(p.name for p in ARTIFACTS.iterdir()) == ["ledger.jsonl", "report"]
    assert (ARTIFACTS / "ledger.jsonl").stat().st_size > 0
    purged = make("destroy", "PURGE=1")
    assert purged.returncode == 0, purged.stdout[-2000:]
    status = subprocess.run(
        [str(REPO / ".venv" / "bin" / "testbed"), "status", "--name", TESTBED, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout) == [{"name": TESTBED, "netns": [], "state": "absent"}]
    assert not ARTIFACTS.exists()
    netns = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=False
    ).stdout
    assert f"vtb.{TESTBED}." not in netns
