"""What the common role leaves on a host, checked over SSH on the testbed hosts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROLE = Path(__file__).resolve().parents[3]
DEFAULTS: dict[str, Any] = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def _time_sync(host: Any) -> str:
    return str(host.ansible.get_variables().get("common_time_sync", "systemd-timesyncd"))


@pytest.mark.parametrize("package", DEFAULTS["common_packages"])
def test_base_packages_are_installed(host: Any, package: str) -> None:
    assert host.package(package).is_installed


def test_service_user(host: Any) -> None:
    user = host.user("vllm")
    assert user.exists
    assert user.group == "vllm"
    assert user.uid < 1000, "a system user"
    assert user.home == "/var/lib/vllm"
    assert user.shell == "/usr/sbin/nologin"
    assert user.password in ("!", "*", "!*"), "no password login"
    home = host.file("/var/lib/vllm")
    assert home.is_directory
    assert (home.user, home.group, home.mode) == ("vllm", "vllm", 0o750)


def test_sysctl_file(host: Any) -> None:
    conf = host.file("/etc/sysctl.d/60-vfleet-common.conf")
    assert (conf.user, conf.mode) == ("root", 0o644)
    lines = {line.strip() for line in conf.content_string.splitlines()}
    for key, value in DEFAULTS["common_sysctl"].items():
        assert f"{key} = {value}" in lines


def test_login_limits_apply_to_the_service_user(host: Any) -> None:
    """pam_limits gives a vllm session what the file says, and the session is not refused."""
    conf = host.file("/etc/security/limits.d/60-vfleet-common.conf").content_string
    rows = [line.split() for line in conf.splitlines() if line and not line.startswith("#")]
    memlock = {r[0]: r[3] for r in rows if r[2] == "memlock"}
    nofile = {r[0]: r[3] for r in rows if r[2] == "nofile"}
    assert set(memlock) == set(nofile) == {"*", "vllm"}
    # The file holds unlimited where the host can grant it, else the host's hard limit.
    assert memlock["vllm"] == "unlimited" or memlock["vllm"].isdigit()
    session = host.run("su -s /bin/sh vllm -c 'ulimit -H -l; ulimit -H -n'")
    assert session.rc == 0, session.stderr
    hard_memlock, hard_nofile = session.stdout.split()
    assert hard_memlock == memlock["vllm"]
    assert hard_nofile == nofile["vllm"]


def test_root_can_still_log_in(host: Any) -> None:
    # Every check here runs over a fresh SSH login as root (multiplexing is off).
    assert host.run("true").rc == 0


def test_time_sync_daemon(host: Any) -> None:
    chosen = _time_sync(host)
    other = "systemd-timesyncd" if chosen == "chrony" else "chrony"
    assert host.package(chosen).is_installed
    assert not host.package(other).is_installed, "one time daemon only"
    unit = "chrony" if chosen == "chrony" else "systemd-timesyncd"
    assert host.service(unit).is_enabled
    if chosen == "chrony":
        conf = host.file("/etc/chrony/chrony.conf").content_string
        assert "pool 0.debian.pool.ntp.org iburst" in conf
    else:
        conf = host.file("/etc/systemd/timesyncd.conf.d/60-vfleet-common.conf").content_string
        assert "NTP=0.debian.pool.ntp.org 1.debian.pool.ntp.org" in conf


def test_apt_uses_only_the_local_mirror(host: Any) -> None:
    active = [
        line
        for line in host.file("/etc/apt/sources.list").content_string.splitlines()
        if line.startswith("deb")
    ]
    assert active == []
    assert "Enabled: no" in host.file("/etc/apt/sources.list.d/debian.sources").content_string
    mirror = host.file("/etc/apt/sources.list.d/vfleet-test-mirror.sources").content_string
    assert "URIs: file:/srv/vfleet-mirror" in mirror
    # Offline, apt update succeeds only if no unreachable source is left enabled.
    update = host.run("apt-get -q update")
    assert update.rc == 0, update.stdout + update.stderr
    assert "Err:" not in update.stdout
