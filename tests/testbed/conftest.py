"""Fixtures for the testbed tests (marker `testbed`): real nspawn hosts in namespaces."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support import ci_gate
from support.paths import REPO
from vfleet_testbed import base


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "testbed: boots systemd-nspawn test hosts in network namespaces (root)"
    )


def require(ok: bool, reason: str) -> None:
    ci_gate.require(ok, reason, "testbed tests")


def _can_make_netns() -> str | None:
    """None if `ip netns add` works here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None:
        return "ip (iproute2) not installed"
    name = f"vtb-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


@pytest.fixture(scope="session")
def testbed_cli() -> Path:
    cli = Path(shutil.which("testbed") or REPO / ".venv" / "bin" / "testbed")
    require(cli.is_file(), f"{cli} missing; run `make setup`")
    why = _can_make_netns()
    require(why is None, f"cannot create network namespaces here ({why})")
    for tool, package in (
        ("systemd-nspawn", "systemd-container"),
        ("nc", "netcat-openbsd"),
        ("ssh", "openssh-client"),
        ("tc", "iproute2"),
    ):
        require(shutil.which(tool) is not None, f"{tool} missing; apt-get install {package}")
    require(
        base.image_is_current() or shutil.which("debootstrap") is not None,
        f"no base image at {base.image_dir()} and no debootstrap to build it",
    )
    return cli
