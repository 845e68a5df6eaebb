"""scripts/system-packages.sh, which `make deploy` and `make test` run first: on a supported
OS it installs exactly the missing packages and says which; it refuses other systems, and
a missing package without root, in one line before anything is installed. dpkg-query,
apt-get and id are stand-ins on PATH that record how they were called."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from support.paths import REPO

SCRIPT = REPO / "scripts" / "system-packages.sh"


def _machine(tmp_path: Path, os_release: str, installed: set[str], uid: int = 0) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    (tmp_path / "installed").write_text("\n".join(sorted(installed)) + "\n")
    stand_ins = {
        # dpkg-query -W -f='${Status}' PACKAGE
        "dpkg-query": f'grep -qx "${{@: -1}}" {tmp_path}/installed && printf "install ok installed"'
        " || exit 1",
        "apt-get": f'echo "apt-get $*" >> {log}',
        "id": f"echo {uid}",
    }
    for name, body in stand_ins.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(0o755)
    (tmp_path / "os-release").write_text(os_release)
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "VFLEET_OS_RELEASE": str(tmp_path / "os-release"),
    }


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=30
    )


def _calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


DEBIAN = 'ID=debian\nVERSION_ID="12"\n'
ALL = {
    "make", "systemd-container", "debootstrap", "iproute2", "openssh-client",
    "netcat-openbsd", "curl", "nftables", "python3-venv",
}  # fmt: skip


def test_nothing_missing_installs_nothing(tmp_path):
    done = _run(_machine(tmp_path, DEBIAN, ALL))
    assert done.returncode == 0 and done.stdout == "" and _calls(tmp_path) == []


@pytest.mark.parametrize("os_release", [DEBIAN, 'ID=ubuntu\nVERSION_ID="24.04"\n'])
def test_the_missing_packages_are_installed_and_named(tmp_path, os_release):
    done = _run(_machine(tmp_path, os_release, ALL - {"debootstrap", "nftables"}))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "==> installing system packages: debootstrap nftables\n"
    assert _calls(tmp_path) == ["apt-get update -qq", "apt-get install -y -qq debootstrap nftables"]


def test_check_lists_what_is_missing_and_installs_nothing(tmp_path):
    done = _run(_machine(tmp_path, DEBIAN, ALL - {"curl"}), "--check")
    assert done.returncode == 1 and done.stdout == "missing system packages: curl\n"
    assert _calls(tmp_path) == []


@pytest.mark.parametrize(
    ("os_release", "named"),
    [('ID=fedora\nVERSION_ID="40"\n', "fedora 40"), ('ID=debian\nVERSION_ID="11"\n', "debian 11")],
)
def test_another_system_is_refused_in_one_line(tmp_path, os_release, named):
    done = _run(_machine(tmp_path, os_release, set()))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert named in done.stderr and "Debian 12 or Ubuntu 22.04/24.04" in done.stderr
    assert _calls(tmp_path) == []


def test_missing_packages_without_root_are_refused(tmp_path):
    done = _run(_machine(tmp_path, DEBIAN, ALL - {"make"}, uid=1000))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "(make) and not root" in done.stderr and _calls(tmp_path) == []


def test_the_ci_entry_point_uses_the_same_list():
    assert "scripts/system-packages.sh" in (REPO / ".ci" / "run").read_text()
    assert os.access(SCRIPT, os.X_OK)
