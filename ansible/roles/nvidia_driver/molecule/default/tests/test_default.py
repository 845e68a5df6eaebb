"""What the nvidia_driver role leaves on a testbed host, checked over SSH.

The driver packages are stand-ins with the real names and versions (prepare.yml), so these
checks are about what the role controls: which versions are installed and held, what the
repository offers beyond the pin, the fabric manager's coupling to NVSwitch, the daemons,
the module built for the running kernel, and what nvidia-smi reports. The same tests run on
both hosts of the scenario: h1 (8 x H100 NVSwitch + InfiniBand, upgraded from 570.133.20)
and h2 (8 x L40S on PCIe, fresh install); each reads its own profile from the host.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

ROLE = Path(__file__).resolve().parents[3]
DEFAULTS: dict[str, Any] = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
PIN: str = DEFAULTS["nvidia_driver_version"]
PIN_DEB = f"{PIN}-1"  # NVIDIA's repository for Debian: <upstream>-1
NEWER_DEB = "580.178.04-1"  # also in the stand-in repository (prepare.yml)
OLDER = "570.133.20"
# The Debian compute-only set with open kernel modules (vars/Debian.yml).
DRIVER_PACKAGES = [
    "nvidia-kernel-open-dkms",
    "nvidia-driver-cuda",
    "libcuda1",
    "nvidia-persistenced",
]
PINNING = f"nvidia-driver-pinning-{PIN}"
FM = "nvidia-fabricmanager"
NVSWITCH_PROFILES = {"h100-sxm-8gpu"}
RDMA_PROFILES = {"h100-sxm-8gpu"}


def _profile(host: Any) -> str:
    return str(json.loads(host.file("/opt/vfleet/gpu/profile.json").content_string)["profile"])


def _version(host: Any, package: str) -> str:
    """The installed version, "" when not installed (Status-Abbrev: "ii " or, held, "hi ")."""
    out = host.run("dpkg-query -W -f='${db:Status-Abbrev} ${Version}' %s", package)
    if out.rc != 0 or out.stdout[1:2] != "i":
        return ""
    return out.stdout.split()[-1]


def _held(host: Any) -> set[str]:
    return set(host.check_output("apt-mark showhold").split())


@pytest.mark.parametrize("package", [*DRIVER_PACKAGES, PINNING])
def test_driver_packages_are_at_the_pin(host: Any, package: str) -> None:
    assert _version(host, package) == PIN_DEB


@pytest.mark.parametrize("package", [*DRIVER_PACKAGES, PINNING])
def test_driver_packages_are_held(host: Any, package: str) -> None:
    assert package in _held(host)


def test_the_newer_release_is_offered_but_not_installed(host: Any) -> None:
    """The repository has 580.178.04 (and its own pinning package); none of it got in."""
    offered = host.check_output("apt-cache madison nvidia-driver-cuda")
    assert NEWER_DEB in offered, offered
    assert PIN_DEB in offered, offered
    listing = host.check_output("dpkg-query -W -f='${Package} ${Version}\\n'")
    assert NEWER_DEB.split("-")[0] not in listing
    assert OLDER not in listing, "the older driver the host started from is gone"
    # NVIDIA's version-locking package makes the pin apt's candidate...
    policy = host.check_output("apt-cache policy nvidia-driver-cuda")
    assert f"Candidate: {PIN_DEB}" in policy, policy
    # ...and the holds keep an upgrade (unattended-upgrades, a stray dist-upgrade) off the driver.
    upgrade = host.check_output("apt-get -s -o Debug::NoLocking=1 dist-upgrade")
    moved = [line for line in upgrade.splitlines() if line.startswith(("Inst", "Remv"))]
    assert moved == [], moved


def test_fabric_manager_follows_nvswitch(host: Any) -> None:
    unit = host.service("nvidia-fabricmanager")
    if _profile(host) in NVSWITCH_PROFILES:
        assert _version(host, FM) == PIN_DEB, "fabric manager at the driver's version"
        assert FM in _held(host)
        assert unit.is_enabled
        assert unit.is_running
        assert PIN in host.check_output("nv-fabricmanager --version")
    else:
        assert _version(host, FM) == "", "no fabric manager without NVSwitch"
        assert host.run("systemctl cat nvidia-fabricmanager.service").rc != 0


def test_persistence_daemon_runs_in_persistence_mode(host: Any) -> None:
    unit = host.service("nvidia-persistenced")
    assert unit.is_enabled
    assert unit.is_running
    args = host.file("/run/nvidia-persistenced/args").content_string
    assert "--persistence-mode" in args.split()
    assert "--no-persistence-mode" not in args.split()


def test_nvidia_smi_reports_the_pinned_driver(host: Any) -> None:
    versions = host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert versions.split() == [PIN] * 8
    assert f"Driver Version: {PIN}" in host.check_output("nvidia-smi")
    xml = host.check_output("nvidia-smi -q -x")
    assert f"<driver_version>{PIN}</driver_version>" in xml


def test_kernel_module_is_built_for_the_running_kernel(host: Any) -> None:
    kernel = host.check_output("uname -r")
    assert host.check_output("modinfo -F vermagic nvidia").split()[0] == kernel
    assert host.check_output("modinfo -F version nvidia") == PIN


def test_peermem_follows_rdma(host: Any) -> None:
    conf = host.file("/etc/modules-load.d/60-vfleet-nvidia-peermem.conf")
    if _profile(host) in RDMA_PROFILES:
        assert conf.exists
        assert "nvidia-peermem" in conf.content_string.split()
    else:
        assert not conf.exists


def test_repository_is_signed_and_offline_apt_works(host: Any) -> None:
    source = host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").content_string
    assert "URIs: file:/srv/vfleet-nvidia-mirror" in source
    assert "Signed-By: /etc/apt/keyrings/nvidia-cuda.asc" in source
    assert "Trusted" not in source
    assert host.file("/etc/apt/keyrings/nvidia-cuda.asc").contains("BEGIN PGP PUBLIC KEY BLOCK")
    update = host.run("apt-get -q update")
    assert update.rc == 0, update.stdout + update.stderr
    assert "Err:" not in update.stdout
    assert "NO_PUBKEY" not in update.stderr and "not signed" not in update.stderr
