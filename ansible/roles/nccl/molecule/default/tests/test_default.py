"""What the nccl role leaves on the testbed hosts, checked over SSH.

NCCL, nvcc and the nccl-tests source are stand-ins with the real names and versions
(prepare.yml): these checks are about what the role controls. h1 has the CUDA compiler and
must have nccl-tests built against the pinned NCCL; h2 has none and must have no build.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROLE = Path(__file__).resolve().parents[3]
DEFAULTS: dict[str, Any] = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
PIN: str = DEFAULTS["nccl_version"]
NEWER = "2.30.4-1+cuda13.0"  # also in the stand-in repository (prepare.yml)
TESTS_VERSION: str = DEFAULTS["nccl_tests_version"]
TESTS_DIR = f"/opt/nccl-tests/{TESTS_VERSION}"


def _has_nvcc(host: Any) -> bool:
    return bool(host.ansible.get_variables().get("nccl_test_cuda", False))


def _version(host: Any, package: str) -> str:
    """The installed version, "" when not installed (Status-Abbrev "ii " or, held, "hi ")."""
    out = host.run("dpkg-query -W -f='${db:Status-Abbrev} ${Version}' %s", package)
    if out.rc != 0 or out.stdout[1:2] != "i":
        return ""
    return out.stdout.split()[-1]


@pytest.mark.parametrize("package", ["libnccl2", "libnccl-dev"])
def test_nccl_is_at_the_pin_and_held(host: Any, package: str) -> None:
    assert _version(host, package) == PIN
    assert package in host.check_output("apt-mark showhold").split()


def test_the_newer_nccl_is_offered_but_not_installed(host: Any) -> None:
    offered = host.check_output("apt-cache madison libnccl2")
    assert NEWER in offered and PIN in offered, offered
    upgrade = host.check_output("apt-get -s -o Debug::NoLocking=1 dist-upgrade")
    moved = [line for line in upgrade.splitlines() if line.startswith(("Inst", "Remv"))]
    assert moved == [], moved


def test_header_matches_the_pin(host: Any) -> None:
    major, minor, patch = PIN.split("-")[0].split(".")
    header = host.file("/usr/include/nccl.h").content_string
    assert f"#define NCCL_MAJOR {major}" in header
    assert f"#define NCCL_MINOR {minor}" in header
    assert f"#define NCCL_PATCH {patch}" in header


def test_nccl_tests_built_only_where_nvcc_is(host: Any) -> None:
    binary = host.file(f"{TESTS_DIR}/build/all_reduce_perf")
    if _has_nvcc(host):
        assert binary.is_file and binary.mode & 0o111
        assert host.file("/opt/nccl-tests/current").linked_to == TESTS_DIR
        assert host.file(f"{TESTS_DIR}/build/.vfleet-nccl-{PIN}").exists
        out = host.check_output("/opt/nccl-tests/current/build/all_reduce_perf")
        # The role's make call, as the stand-in nvcc recorded it.
        assert "-I/usr/include" in out and "-lnccl" in out
        assert "-DMPI_SUPPORT" not in out
        assert host.package("make").is_installed
    else:
        assert not host.file("/usr/local/cuda/bin/nvcc").exists
        assert not host.file("/opt/nccl-tests").exists
        assert not host.package("make").is_installed, "no build tools where nothing is built"
