"""Test hosts for one test module: boot them under their own name, scan their keys."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def booted(cli: Path, count: int, name: str, profile: str = "h200-1gpu") -> Iterator[dict]:
    """`testbed up COUNT` under its own name, its JSON description, and `down` afterwards."""
    up = subprocess.run(
        [str(cli), "up", str(count), "--profile", profile, "--name", name, "--json"],
        capture_output=True,
        text=True,
        timeout=300 + 200 * count,
        check=False,
    )
    assert up.returncode == 0, up.stderr
    try:
        yield json.loads(up.stdout)
    finally:
        subprocess.run([str(cli), "down", "--name", name], capture_output=True, check=False)


def scan_keys(bed: dict, known_hosts: Path) -> str:
    """`vfleet known-hosts`' scan of every host, from inside the testbed's controller
    namespace (the only one that reaches the hosts, as a site's controller reaches its
    nodes); what it printed for the operator."""
    code = (
        "import json, sys; from pathlib import Path; from vfleet.environment import known_hosts; "
        "from vfleet.environment.inventory import Host; "
        "hosts = [Host(h['name'], h['address'], 22, 'test', frozenset({'gpu_hosts'})) "
        "for h in json.loads(sys.argv[1])]; "
        "print('\\n'.join(known_hosts.scan(Path(sys.argv[2]), hosts)))"
    )
    argv = [sys.executable, "-c", code, json.dumps(bed["hosts"]), str(known_hosts)]
    out = subprocess.run(
        ["ip", "netns", "exec", bed["controller_netns"], *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def ssh(
    bed: dict[str, Any], host: str, command: str, timeout: float = 60, stdin: str = ""
) -> tuple[int, str]:
    """`command` on one test host over the testbed's ssh config: its rc and output."""
    proc = subprocess.run(
        ["ssh", "-F", bed["ssh_config"], host, command],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr
