"""Host key checking for staging and prod, for real: `vfleet known-hosts`' scan records a
test host's key, Ansible with the staging/prod SSH settings reaches the host through it, and
refuses the host once the recorded key no longer matches (a replaced or spoofed machine)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from support.booted import booted, scan_keys
from support.paths import REPO

pytestmark = pytest.mark.testbed

NAME = f"pytest-kh-{os.getpid()}"


@pytest.fixture(scope="module")
def bed(testbed_cli):
    with booted(testbed_cli, 1, NAME) as described:
        yield described


def _ping(bed: dict, known_hosts: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """ansible -m ping with the SSH settings of inventories/prod/group_vars (strict checking
    against the managed file) plus the testbed's ProxyCommand."""
    host = bed["hosts"][0]
    inventory = tmp_path / "hosts.yml"
    # A fresh SSH master for every check: ansible.cfg multiplexes, and a master kept from the
    # first check would carry the second over the connection already trusted, where a
    # replaced machine would have dropped it. (A short directory: socket paths are limited.)
    control = tempfile.mkdtemp(prefix="vfkh-")
    args = (
        f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={known_hosts} "
        f"-o ControlPath={control}/%C -o ProxyCommand='{bed['proxy']} %h %p'"
    )
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {host["name"]: {"ansible_host": host["address"]}},
                    "vars": {
                        "ansible_user": "root",
                        "ansible_ssh_private_key_file": bed["key"],
                        "ansible_ssh_common_args": args,
                        "ansible_python_interpreter": "/usr/bin/python3",
                    },
                }
            }
        )
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible" / "ansible.cfg"))
    env.pop("ANSIBLE_HOST_KEY_CHECKING", None)
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "-i", str(inventory), "all", "-m", "ping"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_recorded_key_lets_ansible_in_and_a_changed_key_is_refused(bed, tmp_path):
    known = tmp_path / "known_hosts"
    printed = scan_keys(bed, known)
    host = bed["hosts"][0]
    assert host["name"] in printed and "SHA256:" in printed  # fingerprints for the operator
    assert host["address"] in known.read_text()

    ok = _ping(bed, known, tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "SUCCESS" in ok.stdout and "pong" in ok.stdout

    # Another machine answering at that address: its key differs from the recorded one.
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    fake = other.with_suffix(".pub").read_text().split()[:2]
    known.write_text(f"{host['address']} {' '.join(fake)}\n")
    refused = _ping(bed, known, tmp_path)
    assert refused.returncode != 0
    assert "UNREACHABLE" in refused.stdout
    assert "host key" in (refused.stdout + refused.stderr).lower()

    # And a host missing from the file is refused too (no trust on first use).
    known.write_text("")
    unknown = _ping(bed, known, tmp_path)
    assert unknown.returncode != 0
    assert "host key verification failed" in (unknown.stdout + unknown.stderr).lower()
