"""`vfleet preflight`'s SSH sweep (paramiko) against real test hosts: three machines with
real sshd, their keys recorded as `vfleet known-hosts` records them; then one is powered
off and another's recorded key is replaced (a swapped machine). The sweep must say which
is which, each in its own row, within about its timeout, and the healthy host must pass.
Before that, the disk verdict on a real filesystem: a model bigger than the free space
fails, and a copy already on disk counts toward what the model needs."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from support.booted import booted, scan_keys, ssh
from vfleet.health import ssh_sweep

pytestmark = pytest.mark.testbed

NAME = f"pytest-pf-{os.getpid()}"


@pytest.fixture(scope="module")
def bed(testbed_cli):
    with booted(testbed_cli, 3, NAME) as described:
        yield described


def _targets(bed: dict, known_hosts: Path) -> list[ssh_sweep.Target]:
    """The hosts as the prod settings reach them: strict keys, the testbed's proxy."""
    hostvars = {
        "ansible_user": "root",
        "ansible_ssh_private_key_file": bed["key"],
        "ansible_ssh_common_args": f"-o ProxyCommand='{bed['proxy']} %h %p'",
    }
    return [
        ssh_sweep.target_for(h["name"], h["address"], 22, hostvars, known_hosts)
        for h in bed["hosts"]
    ]


def test_the_sweep_names_a_down_host_and_a_changed_key(bed, testbed_cli, tmp_path):
    known = tmp_path / "known_hosts"
    scan_keys(bed, known)
    h1, h2, h3 = (h["name"] for h in bed["hosts"])
    rows = {r.host: r for r in ssh_sweep.sweep(_targets(bed, known), timeout_s=10)}
    assert all(r.verdict == "pass" for r in rows.values()), ssh_sweep.table(list(rows.values()))
    assert rows[h1].host_key == "recorded" and rows[h1].facts["sudo"] == "yes"
    assert rows[h1].facts["os"].startswith("debian") and rows[h1].facts["gpus"] == "1"
    assert int(rows[h1].facts["disk_kb"]) > 0

    # The model directory does not exist yet: df reads the disk above it.
    targets = _targets(bed, known)[:1]
    free = int(rows[h1].facts["disk_kb"])
    short = ssh_sweep.sweep(targets, 10, disk_path="/srv/models/m", need=free + 2**20)[0]
    assert short.verdict == "fail" and "needs" in short.error, ssh_sweep.table([short])
    # 64 MiB of the model already there: needing 32 MiB more than is free now passes.
    rc, out = ssh(bed, h1, "mkdir -p /srv/models/m && head -c 64M /dev/zero > /srv/models/m/w")
    assert rc == 0, out
    row = ssh_sweep.sweep(targets, 10, disk_path="/srv/models/m", need=0)[0]
    have = int(row.facts["disk_kb"]) + int(row.facts["model_kb"])
    assert int(row.facts["model_kb"]) >= 64 * 1024, row.facts
    enough = ssh_sweep.sweep(targets, 10, disk_path="/srv/models/m", need=have - 32 * 1024)[0]
    assert enough.verdict == "pass", ssh_sweep.table([enough])

    # h2 answers with a key other than the recorded one; h3 is powered off.
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    fake = " ".join(other.with_suffix(".pub").read_text().split()[:2])
    h2_address = bed["hosts"][1]["address"]
    lines = [x for x in known.read_text().splitlines() if not x.startswith(h2_address + " ")]
    known.write_text("\n".join([*lines, f"{h2_address} {fake}"]) + "\n")
    stop = subprocess.run(
        [str(testbed_cli), "stop", h3, "--name", NAME], capture_output=True, text=True, check=False
    )
    assert stop.returncode == 0, stop.stderr

    start = time.monotonic()
    rows = {r.host: r for r in ssh_sweep.sweep(_targets(bed, known), timeout_s=5)}
    took = time.monotonic() - start
    shown = ssh_sweep.table(list(rows.values()))
    assert rows[h1].verdict == "pass", shown
    assert rows[h2].verdict == "fail" and rows[h2].host_key == "changed", shown
    assert rows[h3].verdict == "fail" and not rows[h3].reachable, shown
    assert took < 20, (took, shown)  # in parallel: about one timeout, not three
