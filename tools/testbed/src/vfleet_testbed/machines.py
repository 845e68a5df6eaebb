"""Bring a testbed up, take it down, report on it.

A testbed's state lives in `$VFLEET_TESTBED_RUN/<name>/` (default `/run/vfleet-testbed/`):
`state.json` (hosts, addresses, namespaces, the PID and start time of each host's nspawn),
`inventory.yml`, `ssh_config`, `proxy` (the ssh ProxyCommand), `gpu/` (the profile's
fixture and the nvidia-smi stand-in, bound read-only into every host) and one boot log per
host. `state.json` is written before the first host boots and after each one, so `down`
can clean up after a bring-up that failed half-way. `--bind-ro SRC[:DST]` binds more paths
of this machine read-only into every host (a cached venv, a model); the state records them
as `bind_ro`.

Hosts are `systemd-nspawn --boot --volatile=overlay` processes started in their own session
(`setsid`), so they hold no terminal and a process group of their own. `down` powers them off
with SIGTERM, waits, then kills whatever is left by process group and by network namespace,
deletes the namespaces and the state directory, and checks that no namespace, mount or
process of the testbed remains. `stop_host` and `start_host` power one host off and on again
(it comes back blank: the overlay was volatile), for fault tests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vfleet_testbed import base, network
from vfleet_testbed.errors import TestbedError, UsageError
from vfleet_testbed.profiles import PROFILES, SHAPES, fixtures_root

DEFAULT_NAME = "tb"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
HOST_RE = re.compile(r"^[a-z][a-z0-9-]{0,12}$")  # v-<host> must fit IFNAMSIZ
RESERVED_HOSTS = {"hub", "ctl"}
BOOT_DEADLINE_S = 60.0
STOP_DEADLINE_S = 20.0
TOOLS = {
    "ip": "iproute2",
    "tc": "iproute2",
    "systemd-nspawn": "systemd-container",
    "nc": "netcat-openbsd",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
}
SSH_OPTIONS = (
    "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o IdentitiesOnly=yes "
    "-o LogLevel=ERROR -o ControlMaster=no -o ControlPath=none"
)


def run_root() -> Path:
    return Path(os.environ.get("VFLEET_TESTBED_RUN", "/run/vfleet-testbed"))


def state_dir(name: str) -> Path:
    return run_root() / name


@dataclass
class Host:
    name: str
    address: str
    netns: str
    machine: str
    log: str
    pid: int | None = None
    start_time: int | None = None  # /proc/<pid>/stat field 22: guards against PID reuse
    leader_pid: int | None = None  # the container's PID 1 as this machine sees it
    system_state: str | None = None


@dataclass
class Testbed:
    name: str
    profile: str
    shape: str
    rate_mbit: int | None
    state_dir: str
    image: str
    key: str
    hub_netns: str
    controller_netns: str
    controller_address: str
    inventory: str
    ssh_config: str
    proxy: str
    hosts: list[Host] = field(default_factory=list)
    bind_ro: list[str] = field(default_factory=list)  # "SRC:DST", read-only in every host
    created_at: str = ""
    up_seconds: float | None = None
    image_build_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["hosts"] = [dict(h.__dict__) for h in self.hosts]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Testbed:
        hosts = [Host(**h) for h in data.get("hosts", [])]
        return cls(**{**data, "hosts": hosts})

    def save(self) -> None:
        path = Path(self.state_dir) / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        tmp.replace(path)


def load(name: str) -> Testbed | None:
    try:
        return Testbed.from_json(json.loads((state_dir(name) / "state.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


# --- processes -------------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    return fields[0], int(fields[19])


def start_time(pid: int) -> int | None:
    stat = _stat(pid)
    return stat[1] if stat else None


def alive(pid: int | None, started: int | None) -> bool:
    """The same process (not a reused PID) still runs; a zombie counts as gone."""
    if pid is None:
        return False
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z" and (started is None or stat[1] == started)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _signal(pid: int, sig: int, group: bool = False) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# --- validation ------------------------------------------------------------------------


def check_machine(need_debootstrap: bool) -> None:
    if os.geteuid() != 0:
        raise UsageError("testbed needs root (network namespaces, systemd-nspawn); run as root")
    tools = dict(TOOLS, debootstrap="debootstrap") if need_debootstrap else TOOLS
    missing = sorted({pkg for tool, pkg in tools.items() if shutil.which(tool) is None})
    if missing:
        raise UsageError(f"missing tools; apt-get install {' '.join(missing)}")


def validate(
    count: int, profile: str, name: str, shape: str | None, hosts: list[str] | None
) -> list[str]:
    """Host names for a valid request; UsageError (exit 2) with one line otherwise."""
    if count < 1:
        raise UsageError(f"N must be at least 1 (got {count})")
    if count > network.MAX_HOSTS:
        raise UsageError(f"N must be at most {network.MAX_HOSTS} (got {count})")
    if profile not in PROFILES:
        raise UsageError(f"unknown profile {profile!r}; choose one of: {', '.join(PROFILES)}")
    if shape is not None and shape not in SHAPES:
        raise UsageError(f"unknown shape {shape!r}; choose one of: {', '.join(SHAPES)}")
    if not NAME_RE.match(name):
        raise UsageError(f"bad name {name!r}: 1-32 of a-z 0-9 _ -, starting with a letter/digit")
    names = hosts or [f"h{i + 1}" for i in range(count)]
    if len(names) != count:
        raise UsageError(f"--hosts lists {len(names)} names for N={count}")
    for host in names:
        if not HOST_RE.match(host) or host in RESERVED_HOSTS:
            raise UsageError(
                f"bad host name {host!r}: 1-13 of a-z 0-9 -, starting with a letter; not hub or ctl"
            )
    if len(set(names)) != len(names):
        raise UsageError("--hosts repeats a name")
    return names


def parse_bind_ro(specs: list[str]) -> list[str]:
    """`SRC[:DST]` specs as "SRC:DST" (absolute, normalised); UsageError (exit 2) otherwise."""
    binds: list[str] = []
    targets: set[str] = set()
    gpu = Path(base.GPU_MOUNT)
    for spec in specs:
        src, sep, dst = spec.partition(":")
        dst = dst if sep else src
        # nspawn reads a further ':' as mount options; paths with one are not worth escaping.
        if not src or not dst or ":" in dst:
            raise UsageError(f"bad --bind-ro {spec!r}: want SRC[:DST], paths without ':'")
        if not (src.startswith("/") and dst.startswith("/")):
            raise UsageError(f"bad --bind-ro {spec!r}: SRC and DST must be absolute paths")
        src, dst = os.path.normpath(src), os.path.normpath(dst)
        if not Path(src).exists():
            raise UsageError(f"bad --bind-ro {spec!r}: {src} does not exist")
        target = Path(dst)
        # The GPU fixture is bound at GPU_MOUNT; a bind on, above or below it would hide it.
        if dst == "/" or target == gpu or gpu in target.parents or target in gpu.parents:
            raise UsageError(f"bad --bind-ro {spec!r}: {dst} is / or overlaps {base.GPU_MOUNT}")
        if dst in targets:
            raise UsageError(f"bad --bind-ro {spec!r}: another bind already targets {dst}")
        targets.add(dst)
        binds.append(f"{src}:{dst}")
    return binds


# --- files the testbed writes ----------------------------------------------------------


def _stage_gpu(directory: Path, profile: str) -> None:
    """The profile's fixture plus the stand-in, as the hosts will see it at GPU_MOUNT."""
    source = fixtures_root()
    fixture = source / PROFILES[profile].fixture
    if not fixture.is_dir() or not (source / base.STANDIN).is_file():
        raise TestbedError(
            f"GPU fixtures not found at {source}; set VFLEET_GPU_HOSTS to tests/data/gpu-hosts"
        )
    shutil.copytree(fixture, directory)
    shutil.copy2(source / base.STANDIN, directory / base.STANDIN)
    (directory / base.STANDIN).chmod(0o755)
    p = PROFILES[profile]
    (directory / "profile.json").write_text(
        json.dumps({"profile": p.name, "fixture": p.fixture, "gpu": p.gpu, "gpus": p.gpus}) + "\n"
    )


def _write_access(tb: Testbed) -> None:
    """proxy, ssh_config and inventory.yml: everything a tool needs to reach the hosts."""
    proxy = Path(tb.proxy)
    proxy.write_text(
        "#!/bin/sh\n"
        f"# ssh ProxyCommand for testbed {tb.name}: connect from its controller namespace,\n"
        "# the only one with a way onto the hosts' bridge. Usage: proxy HOST PORT\n"
        f'exec ip netns exec {tb.controller_netns} nc -q0 "$1" "$2"\n'
    )
    proxy.chmod(0o755)
    lines = [f"# Written by `testbed up` for testbed {tb.name}; use: ssh -F {tb.ssh_config} h1"]
    for h in tb.hosts:
        lines += [f"Host {h.name}", f"    HostName {h.address}"]
    lines += [
        "Host *",
        "    User root",
        f"    IdentityFile {tb.key}",
        "    IdentitiesOnly yes",
        "    BatchMode yes",
        "    StrictHostKeyChecking no",
        "    UserKnownHostsFile /dev/null",
        "    LogLevel ERROR",
        "    ControlMaster no",
        "    ControlPath none",
        "    ConnectTimeout 10",
        f"    ProxyCommand {tb.proxy} %h %p",
        "",
    ]
    Path(tb.ssh_config).write_text("\n".join(lines))
    inventory = {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": tb.key,
                "ansible_ssh_common_args": f'{SSH_OPTIONS} -o ProxyCommand="{tb.proxy} %h %p"',
                "ansible_python_interpreter": "/usr/bin/python3",
                "testbed_name": tb.name,
                "testbed_profile": tb.profile,
                "testbed_shape": tb.shape,
                "testbed_gpu_fixture": base.GPU_MOUNT,
            },
            "children": {
                "gpu_hosts": {"hosts": {h.name: {"ansible_host": h.address} for h in tb.hosts}}
            },
        }
    }
    header = (
        f"# Written by `testbed up` for testbed {tb.name} (profile {tb.profile}, "
        f"shape {tb.shape}); removed by `testbed down --name {tb.name}`.\n"
    )
    Path(tb.inventory).write_text(header + yaml.safe_dump(inventory, sort_keys=False))


# --- up --------------------------------------------------------------------------------


def _nspawn_argv(tb: Testbed, host: Host) -> list[str]:
    return [
        "systemd-nspawn",
        "--quiet",
        "--boot",
        "--volatile=overlay",
        f"--directory={tb.image}",
        f"--machine={host.machine}",
        f"--hostname={host.name}",
        "--register=no",  # this machine has no system bus and no machined
        "--keep-unit",
        f"--network-namespace-path={network.NETNS_DIR / host.netns}",
        "--console=passive",
        "--link-journal=no",
        # Each host owns its network namespace: the firewall role loads nftables rules there.
        "--capability=CAP_NET_ADMIN",
        *(f"--bind-ro={bind}" for bind in tb.bind_ro),
        f"--bind-ro={Path(tb.state_dir) / 'gpu'}:{base.GPU_MOUNT}",
    ]


def _boot(tb: Testbed, host: Host) -> None:
    with open(host.log, "wb") as log:
        proc = subprocess.Popen(
            _nspawn_argv(tb, host),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # setsid: own session and process group, no terminal
        )
    host.pid = proc.pid
    host.start_time = start_time(proc.pid)
    tb.save()


def _log_tail(host: Host) -> str:
    try:
        lines = Path(host.log).read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(lines[-3:])


def _wait_for_sshd(tb: Testbed, deadline: float, hosts: list[Host] | None = None) -> None:
    pending = list(tb.hosts if hosts is None else hosts)
    while pending:
        probes = [
            (
                h,
                subprocess.Popen(
                    [
                        "ip",
                        "netns",
                        "exec",
                        tb.controller_netns,
                        "nc",
                        "-z",
                        "-w1",
                        h.address,
                        "22",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                ),
            )
            for h in pending
        ]
        pending = [h for h, p in probes if p.wait() != 0]
        for h in pending:
            if not alive(h.pid, h.start_time):
                raise TestbedError(f"host {h.name} stopped while booting: {_log_tail(h)}")
        if pending and time.monotonic() > deadline:
            names = ", ".join(h.name for h in pending)
            raise TestbedError(f"sshd did not answer on {names} within {BOOT_DEADLINE_S:.0f} s")
        if pending:
            time.sleep(0.1)


def _wait_for_systemd(tb: Testbed, deadline: float, hosts: list[Host] | None = None) -> None:
    """Every host's boot finished (`is-system-running --wait`: running or degraded)."""
    booting = tb.hosts if hosts is None else hosts
    left = max(deadline - time.monotonic(), 5.0)
    procs = [
        (
            h,
            subprocess.Popen(
                ["ssh", "-F", tb.ssh_config, h.name, "systemctl is-system-running --wait"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for h in booting
    ]
    failed: list[str] = []
    for h, p in procs:
        try:
            out, err = p.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            failed.append(f"{h.name}: boot did not finish")
            continue
        h.system_state = out.strip() or None
        if h.system_state not in ("running", "degraded"):
            failed.append(f"{h.name}: {h.system_state or err.strip() or 'no answer over ssh'}")
        kids = _children(h.pid) if h.pid else []
        h.leader_pid = kids[0] if kids else None
    tb.save()
    if failed:
        raise TestbedError("hosts not up: " + "; ".join(failed))


def up(
    count: int,
    profile: str,
    name: str = DEFAULT_NAME,
    shape: str | None = None,
    hosts: list[str] | None = None,
    rate_mbit: int | None = None,
    bind_ro: list[str] | None = None,
) -> Testbed:
    """Boot `count` hosts of `profile`; returns the testbed (its state is on disk)."""
    names = validate(count, profile, name, shape, hosts)
    binds = parse_bind_ro(bind_ro or [])
    if rate_mbit is not None and rate_mbit < 1:
        raise UsageError(f"--rate-mbit must be at least 1 (got {rate_mbit})")
    shape = shape or PROFILES[profile].shape
    rate = rate_mbit if rate_mbit is not None else SHAPES[shape].rate_mbit
    check_machine(need_debootstrap=not base.image_is_current())
    existing = load(name)
    if existing and any(alive(h.pid, h.start_time) for h in existing.hosts):
        raise TestbedError(f"testbed {name} is already up; run `testbed down --name {name}` first")
    if existing or state_dir(name).exists() or network.testbed_netns(name):
        down(name)  # leftovers of a crashed run
    image, built = base.ensure_image(busy=running)
    start = time.monotonic()
    directory = state_dir(name)
    directory.mkdir(parents=True, mode=0o700)
    tb = Testbed(
        name=name,
        profile=profile,
        shape=shape,
        rate_mbit=rate,
        state_dir=str(directory),
        image=str(image),
        key=str(base.key_path()),
        hub_netns=network.netns_name(name, "hub"),
        controller_netns=network.netns_name(name, "ctl"),
        controller_address=network.CONTROLLER_ADDRESS,
        inventory=str(directory / "inventory.yml"),
        ssh_config=str(directory / "ssh_config"),
        proxy=str(directory / "proxy"),
        hosts=[
            Host(
                name=h,
                address=network.host_address(i),
                netns=network.netns_name(name, h),
                machine=f"{name}-{h}".replace("_", "-"),
                log=str(directory / f"{h}.log"),
            )
            for i, h in enumerate(names)
        ],
        bind_ro=binds,
        created_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        image_build_seconds=built,
    )
    tb.save()
    try:
        _stage_gpu(directory / "gpu", profile)
        _write_access(tb)
        network.create_hub(name)
        network.attach(name, "ctl", network.CONTROLLER_ADDRESS)
        for h in tb.hosts:
            network.attach(name, h.name, h.address)
            if rate is not None:
                network.shape(name, h.name, rate)
        for h in tb.hosts:
            _boot(tb, h)
        deadline = time.monotonic() + BOOT_DEADLINE_S
        _wait_for_sshd(tb, deadline)
        _wait_for_systemd(tb, deadline)
    except BaseException:
        down(name)
        raise
    tb.up_seconds = round(time.monotonic() - start, 2)
    tb.save()
    return tb


# --- down ------------------------------------------------------------------------------


def _mounts_of(name: str) -> list[str]:
    """Mount points in this mount namespace that belong to the testbed."""
    marks = (str(state_dir(name)) + "/", str(network.NETNS_DIR / network.netns_name(name, "")))
    found = []
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4]
            if point.startswith(marks) or point == str(state_dir(name)):
                found.append(point)
    except OSError:
        pass
    return found


def _power_off(hosts: list[Host]) -> None:
    """SIGTERM each host's nspawn, wait, then SIGKILL whatever still runs."""
    for h in hosts:
        _signal(h.pid or 0, signal.SIGTERM)  # nspawn powers the container off cleanly
    deadline = time.monotonic() + STOP_DEADLINE_S
    while any(alive(h.pid, h.start_time) for h in hosts) and time.monotonic() < deadline:
        time.sleep(0.1)
    for h in hosts:
        if alive(h.pid, h.start_time):
            for kid in _children(h.pid or 0):
                _signal(kid, signal.SIGKILL)  # the container's PID 1 takes its namespace along
            _signal(h.pid or 0, signal.SIGKILL, group=True)


def _forget_machine(host: Host) -> None:
    """nspawn leaves its per-machine directories behind when killed."""
    for leftover in ("propagate", "unix-export"):
        path = Path("/run/systemd/nspawn") / leftover / host.machine
        if path.is_dir() and not os.path.ismount(path):
            shutil.rmtree(path, ignore_errors=True)


def down(name: str = DEFAULT_NAME) -> list[str]:
    """Stop every host, delete the namespaces and the state; returns what was left (empty)."""
    if not NAME_RE.match(name):
        raise UsageError(f"bad name {name!r}")
    tb = load(name)
    hosts = tb.hosts if tb else []
    _power_off([h for h in hosts if alive(h.pid, h.start_time)])
    # Anything still inside the testbed's namespaces (a daemon started with `ip netns exec`,
    # processes of a host whose nspawn died) goes too: only this testbed's processes are there.
    namespaces = network.testbed_netns(name)
    for _ in range(50):
        stray = [pid for ns in namespaces for pid in network.pids_in(ns)]
        if not stray:
            break
        for pid in stray:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.1)
    for ns in namespaces:
        network.delete(ns)
    for h in hosts:
        _forget_machine(h)
    for point in reversed(_mounts_of(name)):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    shutil.rmtree(state_dir(name), ignore_errors=True)
    left = [f"netns {n}" for n in network.testbed_netns(name)]
    left += [f"process {h.pid}" for h in hosts if alive(h.pid, h.start_time)]
    left += [f"mount {m}" for m in _mounts_of(name)]
    if state_dir(name).exists():
        left.append(f"directory {state_dir(name)}")
    return left


# --- power one host off and on ---------------------------------------------------------


def _find_host(name: str, host: str) -> tuple[Testbed, Host]:
    tb = load(name)
    if tb is None:
        raise UsageError(f"no testbed {name!r} on this machine; bring it up with `testbed up`")
    for h in tb.hosts:
        if h.name == host:
            return tb, h
    names = ", ".join(h.name for h in tb.hosts)
    raise UsageError(f"testbed {name} has no host {host!r} (its hosts: {names})")


def stop_host(name: str, host: str) -> bool:
    """Power one host off; False when it was off already.

    Its processes and its volatile overlay go. Its network namespace stays, as the cable
    does, with the link down as a powered-off NIC's (peers time out instead of being
    refused) and no firewall rules (those lived in the host's kernel)."""
    tb, h = _find_host(name, host)
    if not alive(h.pid, h.start_time):
        return False
    _power_off([h])
    for pid in network.pids_in(h.netns):
        _signal(pid, signal.SIGKILL)
    _forget_machine(h)
    network.ip("-n", h.netns, "link", "set", "eth0", "down")
    if shutil.which("nft"):
        subprocess.run(
            ["ip", "netns", "exec", h.netns, "nft", "flush", "ruleset"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    h.system_state, h.leader_pid = None, None
    tb.save()
    return True


def start_host(name: str, host: str) -> Host:
    """Power a stopped host on: it boots the base image afresh, like a reimaged machine
    (everything installed on it went with its overlay)."""
    tb, h = _find_host(name, host)
    if alive(h.pid, h.start_time):
        raise TestbedError(f"{host} of testbed {name} is already on")
    if h.netns not in network.testbed_netns(name):
        raise TestbedError(
            f"the network of {host} is gone; run `testbed down --name {name}` and `testbed up`"
        )
    network.ip("-n", h.netns, "link", "set", "eth0", "up")
    _boot(tb, h)
    deadline = time.monotonic() + BOOT_DEADLINE_S
    _wait_for_sshd(tb, deadline, [h])
    _wait_for_systemd(tb, deadline, [h])
    return h


# --- status ----------------------------------------------------------------------------


def all_names() -> list[str]:
    """Testbeds with state on disk, plus any that left namespaces behind."""
    names = {p.name for p in run_root().glob("*") if p.is_dir()} if run_root().is_dir() else set()
    for ns in network.list_netns():
        if ns.startswith(network.PREFIX) and ns.count(".") >= 2:
            names.add(ns.split(".")[1])
    return sorted(names)


def running() -> list[str]:
    """Testbeds with at least one host still running."""
    return [
        n
        for n in all_names()
        if (tb := load(n)) is not None and any(alive(h.pid, h.start_time) for h in tb.hosts)
    ]


def status(name: str | None = None) -> list[dict[str, Any]]:
    out = []
    for n in [name] if name else all_names():
        tb = load(n)
        entry: dict[str, Any] = {"name": n, "netns": network.testbed_netns(n)}
        if tb is None:
            entry["state"] = "leftover" if entry["netns"] else "absent"
        else:
            entry.update(tb.to_json())
            up_hosts = [h for h in tb.hosts if alive(h.pid, h.start_time)]
            entry["state"] = (
                "up" if len(up_hosts) == len(tb.hosts) else "partial" if up_hosts else "down"
            )
            for h in entry["hosts"]:
                h["alive"] = alive(h["pid"], h["start_time"])
        out.append(entry)
    return out
