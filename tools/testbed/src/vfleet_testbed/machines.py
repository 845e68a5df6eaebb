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

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from vfleet_testbed import base, network
from vfleet_testbed.access import stage_gpu, write_access
from vfleet_testbed.checks import NAME_RE, check_machine, parse_bind_ro, validate
from vfleet_testbed.errors import TestbedError, UsageError
from vfleet_testbed.processes import alive, children, send_signal, start_time
from vfleet_testbed.profiles import PROFILES, SHAPES
from vfleet_testbed.state import DEFAULT_NAME, Host, Testbed, load, run_root, state_dir

# What callers and tests reach through this module (the split modules hold them).
__all__ = [
    "DEFAULT_NAME",
    "Host",
    "Testbed",
    "alive",
    "all_names",
    "check_machine",
    "down",
    "load",
    "parse_bind_ro",
    "running",
    "start_host",
    "status",
    "stop_host",
    "up",
]

BOOT_DEADLINE_S = 60.0
STOP_DEADLINE_S = 20.0

# --- up --------------------------------------------------------------------------------


def gpu_dir(tb: Testbed, host: Host) -> Path:
    """The host's profile fixture as staged for its GPU_MOUNT (one folder per profile)."""
    return Path(tb.state_dir) / "gpu" / tb.host_profile(host)


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
        f"--bind-ro={gpu_dir(tb, host)}:{base.GPU_MOUNT}",
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
        kids = children(h.pid) if h.pid else []
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
    """Boot `count` hosts of `profile` (one for all, or one per host, comma-separated);
    returns the testbed (its state is on disk). The links take the first host's shape unless
    `shape` says otherwise."""
    names, profiles = validate(count, profile, name, shape, hosts)
    binds = parse_bind_ro(bind_ro or [])
    if rate_mbit is not None and rate_mbit < 1:
        raise UsageError(f"--rate-mbit must be at least 1 (got {rate_mbit})")
    shape = shape or PROFILES[profiles[0]].shape
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
                profile=host_profile,
            )
            for i, (h, host_profile) in enumerate(zip(names, profiles, strict=True))
        ],
        bind_ro=binds,
        created_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        image_build_seconds=built,
    )
    tb.save()
    try:
        for each in sorted(set(profiles)):
            stage_gpu(directory / "gpu" / each, each)
        write_access(tb)
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
        send_signal(h.pid or 0, signal.SIGTERM)  # nspawn powers the container off cleanly
    deadline = time.monotonic() + STOP_DEADLINE_S
    while any(alive(h.pid, h.start_time) for h in hosts) and time.monotonic() < deadline:
        time.sleep(0.1)
    for h in hosts:
        if alive(h.pid, h.start_time):
            for kid in children(h.pid or 0):
                send_signal(kid, signal.SIGKILL)  # the container's PID 1 takes its namespace along
            send_signal(h.pid or 0, signal.SIGKILL, group=True)


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
            send_signal(pid, signal.SIGKILL)
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
        send_signal(pid, signal.SIGKILL)
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
