"""The first pass of `vfleet preflight`: every inventory host over SSH at once (paramiko),
in seconds for a hundred hosts: reachable, host key as recorded, passwordless sudo, the OS,
free disk where the model goes, the GPUs `nvidia-smi -q -x` lists (the form every driver
and the testbed's stand-in answer).

Free disk is read on the model directory, or the nearest directory above it that exists
(the first deploy creates it), plus what a copy already there holds: a host fails when the
two together are short of the checkpoint (its weights as stored) and a margin of 10%, at
least 1 GiB, for the tokenizer, config and logs.

Each host is reached as Ansible reaches it: its `ansible_host`, `ansible_port`,
`ansible_user` and `ansible_ssh_private_key_file`, and, where `ansible_ssh_common_args`
names an ssh config (`-F FILE`, as the Terraform envs write it), that file's HostName,
User, IdentityFile, ProxyCommand and host key settings. Host keys are checked against the
environment's managed known_hosts; a config that turns checking off (the local testbed,
rebuilt on every boot) is reported as "not checked", never as a pass.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# One round trip on the host: key=value lines (sudo -n: no password prompt may hang it).
PROBE_SCRIPT = (
    'if [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; then echo sudo=yes; else echo sudo=no; fi; '
    '. /etc/os-release 2>/dev/null && echo "os=$ID $VERSION_ID"; '
    'd={disk}; while [ ! -e "$d" ]; do d=$(dirname "$d"); done; '
    'df -Pk "$d" 2>/dev/null | awk \'NR==2 {{print "disk_kb=" $4}}\'; '
    "if [ -d {disk} ]; then echo model_kb=$(du -sk {disk} 2>/dev/null | cut -f1); fi; "
    "if command -v nvidia-smi >/dev/null; then "
    "echo gpus=$(nvidia-smi -q -x 2>/dev/null | grep -c '<gpu id='); fi"
)


@dataclass(frozen=True)
class Target:
    host: str
    address: str
    port: int = 22
    user: str = "root"
    key_files: tuple[str, ...] = ()
    proxy_command: str | None = None
    known_hosts: Path | None = None
    """None: the host's config turns key checking off (reported as not checked)"""


@dataclass
class Reach:
    host: str
    reachable: bool
    host_key: str  # recorded | changed | not recorded | not checked | unknown
    seconds: float
    error: str = ""
    facts: dict[str, str] = field(default_factory=dict)
    need_kb: int | None = None
    """disk the model needs (checkpoint and margin); None: not known, not checked"""

    def _kb(self, name: str) -> int:
        value = self.facts.get(name, "")
        return int(value) if value.isdigit() else 0

    @property
    def disk_short(self) -> bool:
        """Free disk, with what a copy of the model already holds, short of `need_kb`."""
        if self.need_kb is None or not self.facts.get("disk_kb", "").isdigit():
            return False
        return self._kb("disk_kb") + self._kb("model_kb") < self.need_kb

    @property
    def verdict(self) -> str:
        if not self.reachable or self.host_key in ("changed", "not recorded"):
            return "fail"
        if self.facts.get("sudo") != "yes" or self.disk_short:
            return "fail"
        return "pass"

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "verdict": self.verdict,
            "reachable": self.reachable,
            "host_key": self.host_key,
            "seconds": round(self.seconds, 2),
            "error": self.error or None,
            "need_kb": self.need_kb,
            **self.facts,
        }


def _ssh_args(common_args: str) -> tuple[str | None, dict[str, str]]:
    """`-F FILE` and the `-o Key=value` options of ansible_ssh_common_args (keys lowered)."""
    words = shlex.split(common_args or "")
    config, options = None, {}
    for i, word in enumerate(words):
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if word == "-F":
            config = nxt
        elif word.startswith("-F") and len(word) > 2:
            config = word[2:]
        elif word == "-o" and "=" in nxt:
            key, value = nxt.split("=", 1)
            options[key.strip().lower()] = value.strip()
    return config, options


def target_for(
    name: str, address: str, port: int, hostvars: dict[str, Any], known_hosts: Path | None
) -> Target:
    """How Ansible would reach this host: its variables, then the ssh config they name
    (`-F`) and the `-o` options they pass, as ssh applies them."""
    import paramiko

    user = str(hostvars.get("ansible_user") or "root")
    key = hostvars.get("ansible_ssh_private_key_file")
    keys = [str(key)] if key else []
    config, options = _ssh_args(str(hostvars.get("ansible_ssh_common_args") or ""))
    if config and Path(config).is_file():
        found = paramiko.SSHConfig.from_path(config).lookup(name)
        address = found.get("hostname", address)
        user = found.get("user", user)
        port = int(found.get("port", port))
        keys = list(found.get("identityfile", [])) + keys
        options = {**{k: str(v) for k, v in found.items() if isinstance(v, str)}, **options}
    checked = known_hosts
    if options.get("stricthostkeychecking", "yes").lower() == "no":
        checked = None
    elif options.get("userknownhostsfile") and known_hosts is not None:
        checked = Path(options["userknownhostsfile"].split()[0])
    proxy = options.get("proxycommand")
    if proxy:
        proxy = proxy.replace("%h", address).replace("%p", str(port))
    return Target(name, address, port, user, tuple(keys), proxy, checked)


def need_kb(checkpoint_bytes: float) -> int:
    """Disk a model of this checkpoint size needs: it, and 10% (at least 1 GiB) over it."""
    margin = max(0.1 * checkpoint_bytes, float(2**30))
    return int((checkpoint_bytes + margin) / 1024)


def reach(target: Target, timeout_s: float, disk_path: str, need: int | None = None) -> Reach:
    """Connect, check the host key, run the one probe script; never raises. `need`: the
    KiB the model needs at `disk_path` (None: free disk is shown, not judged)."""
    import paramiko

    start = time.monotonic()

    def done(ok: bool, key: str, error: str = "", facts: dict[str, str] | None = None) -> Reach:
        row = Reach(target.host, ok, key, time.monotonic() - start, error, facts or {}, need)
        if need is not None and row.disk_short:
            row.error = (
                f"{row._kb('disk_kb') / 2**20:.1f} GiB free at {disk_path}, the model needs "
                f"{need / 2**20:.1f} GiB: free space or point vfleet_model_dir_on_hosts "
                "at a larger disk"
            )
        return row

    client = paramiko.SSHClient()
    if target.known_hosts is not None:
        if target.known_hosts.is_file():
            client.load_host_keys(str(target.known_hosts))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        key_state = "recorded"
    else:
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        key_state = "not checked"
    sock = None
    try:
        if target.proxy_command:
            sock = paramiko.ProxyCommand(target.proxy_command)
            sock.settimeout(timeout_s)
        client.connect(
            target.address,
            port=target.port,
            username=target.user,
            key_filename=list(target.key_files) or None,
            timeout=timeout_s,
            banner_timeout=timeout_s,
            auth_timeout=timeout_s,
            sock=sock,
            allow_agent=False,
            look_for_keys=not target.key_files,
        )
        _in, out, _err = client.exec_command(
            PROBE_SCRIPT.format(disk=shlex.quote(disk_path)), timeout=timeout_s
        )
        facts = dict(
            line.split("=", 1)
            for line in out.read().decode(errors="replace").splitlines()
            if "=" in line
        )
        return done(True, key_state, facts=facts)
    except paramiko.BadHostKeyException:
        return done(True, "changed", "the host key differs from the recorded one")
    except paramiko.SSHException as exc:
        if "not found in known_hosts" in str(exc):
            return done(True, "not recorded", f"no key recorded for {target.address}")
        return done(False, "unknown", f"ssh: {exc}")
    except (TimeoutError, OSError, EOFError) as exc:
        return done(
            False, "unknown", f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        )
    finally:
        client.close()
        if sock is not None:
            sock.close()


def sweep(
    targets: Sequence[Target],
    timeout_s: float = 10.0,
    workers: int = 64,
    disk_path: str = "/srv",
    need: int | None = None,
) -> list[Reach]:
    """Every target at once, in inventory order."""
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=min(workers, len(targets))) as pool:
        return list(pool.map(lambda t: reach(t, timeout_s, disk_path, need), targets))


def table(rows: Sequence[Reach]) -> str:
    width = max((len(r.host) for r in rows), default=4)
    lines = [
        f"{'host':{width}}  verdict reach  host key      sudo os              "
        "disk GiB need GiB gpus  s"
    ]
    for r in rows:
        disk = r.facts.get("disk_kb")
        gib = f"{int(disk) / 2**20:8.1f}" if disk and disk.isdigit() else f"{'?':>8}"
        need = f"{r.need_kb / 2**20:8.1f}" if r.need_kb is not None else f"{'-':>8}"
        lines.append(
            f"{r.host:{width}}  {r.verdict:7} {'yes' if r.reachable else 'no':5}  {r.host_key:13} "
            f"{r.facts.get('sudo', '?'):4} {r.facts.get('os', '?')[:15]:15} {gib} {need} "
            f"{r.facts.get('gpus', '?'):>4} {r.seconds:5.1f}" + (f"  {r.error}" if r.error else "")
        )
    return "\n".join(lines)
