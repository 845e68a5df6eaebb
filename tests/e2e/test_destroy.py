"""`make destroy` after the deploy tests and the fault tests (this file's name sorts after
theirs): it must leave no test host, namespace or artifact behind."""

from __future__ import annotations

import subprocess

import pytest

from .deployment import ARTIFACTS, REPO, make

pytestmark = pytest.mark.testbed


def test_destroy_leaves_nothing(deployed):
    assert deployed.returncode == 0
    out = make("destroy")
    assert out.returncode == 0, out.stdout[-2000:]
    status = subprocess.run(
        [str(REPO / ".venv" / "bin" / "testbed"), "status"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "no testbeds" in status.stdout
    assert not ARTIFACTS.exists()
    netns = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=False
    ).stdout
    assert "vtb.local" not in netns
