"""The SSH known_hosts file the bundle manages for staging and prod.

Host key checking is on everywhere but the local testbed (whose hosts are rebuilt on every
boot). `vfleet known-hosts --env prod` scans the inventory's hosts once and prints the
fingerprints for the operator to compare with the hosts' consoles; every later deploy
refuses a host that is not in the file, and ssh refuses one whose key changed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from vfleet.environment.inventory import Host
from vfleet.errors import UserError

KEY_TYPES = "ed25519,ecdsa,rsa"


def _lookup_name(host: Host) -> str:
    return host.address if host.port == 22 else f"[{host.address}]:{host.port}"


def missing(path: Path, hosts: list[Host]) -> list[Host]:
    """The hosts `path` has no key for (ssh-keygen -F reads hashed entries too)."""
    if not path.is_file():
        return list(hosts)
    absent = []
    for host in hosts:
        found = subprocess.run(
            ["ssh-keygen", "-F", _lookup_name(host), "-f", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if found.returncode != 0:
            absent.append(host)
    return absent


def check(path: Path, hosts: list[Host], env: str, ssh_args: str) -> None:
    """Refuse to deploy to a host whose key the bundle does not hold."""
    if "StrictHostKeyChecking=yes" not in ssh_args.replace(" ", ""):
        raise UserError(
            f"host key checking is off for {env}: set ansible_ssh_common_args to "
            f"'-o StrictHostKeyChecking=yes -o UserKnownHostsFile=<repo>/{path.name}' "
            "in its group_vars (only the local testbed may turn it off)"
        )
    absent = missing(path, hosts)
    if absent:
        names = ", ".join(f"{h.name} ({h.address})" for h in absent[:3])
        more = f" and {len(absent) - 3} more" if len(absent) > 3 else ""
        raise UserError(
            f"{names}{more} not in {path}: run `make known-hosts ENV={env}` and compare "
            "the fingerprints it prints with the hosts' consoles"
        )


def scan(path: Path, hosts: list[Host], timeout_s: int = 5) -> list[str]:
    """Add each host's current keys to `path` (replacing older ones); return fingerprints."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o644, exist_ok=True)
    printed: list[str] = []
    for host in hosts:
        argv = ["ssh-keyscan", "-T", str(timeout_s), "-t", KEY_TYPES, "-p", str(host.port)]
        scanned = subprocess.run(
            [*argv, host.address],
            capture_output=True,
            text=True,
            check=False,
        )
        lines = [ln for ln in scanned.stdout.splitlines() if ln and not ln.startswith("#")]
        if not lines:
            raise UserError(
                f"no SSH host key from {host.name} ({host.address}:{host.port}): check "
                "that it is up and sshd listens, then run make known-hosts again"
            )
        subprocess.run(
            ["ssh-keygen", "-R", _lookup_name(host), "-f", str(path)],
            capture_output=True,
            check=False,
        )
        with path.open("a") as out:
            out.write("\n".join(lines) + "\n")
        fingerprints = subprocess.run(
            ["ssh-keygen", "-l", "-f", "-"],
            input="\n".join(lines) + "\n",
            capture_output=True,
            text=True,
            check=False,
        )
        for line in fingerprints.stdout.splitlines():
            printed.append(f"{host.name:<16} {line}")
    Path(f"{path}.old").unlink(missing_ok=True)  # ssh-keygen -R leaves a backup
    return printed
