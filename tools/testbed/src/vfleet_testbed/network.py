"""Network namespaces, the hub bridge and link shaping for one testbed.

    netns vtb.<name>.hub:  br0 ──┬── v-ctl ── eth0 in vtb.<name>.ctl   10.213.0.2/24
                                 ├── v-h1  ── eth0 in vtb.<name>.h1    10.213.0.11/24
                                 └── v-h2  ── eth0 in vtb.<name>.h2    10.213.0.12/24

Testbed and host names never contain a dot, so `vtb.<name>.` names exactly one testbed's
namespaces.

Both ends of every veth pair are created inside the hub and the host namespace directly, so
nothing (not even a transient interface name) appears in the root namespace, and testbeds
with different names can come up side by side. No namespace gets a default route. Shaping
is a `tbf` qdisc on the hub's port towards each host: it limits what the host receives,
and the host cannot see or remove it.
"""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

from vfleet_testbed.errors import TestbedError

SUBNET = ipaddress.ip_network("10.213.0.0/24")
CONTROLLER_ADDRESS = "10.213.0.2"
FIRST_HOST = 11  # h1 is 10.213.0.11
MAX_HOSTS = 200
NETNS_DIR = Path("/run/netns")
PREFIX = "vtb."


def netns_name(testbed: str, tag: str) -> str:
    return f"{PREFIX}{testbed}.{tag}"


def host_address(index: int) -> str:
    """Address of the index-th host (0-based)."""
    return str(SUBNET.network_address + FIRST_HOST + index)


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if check and proc.returncode != 0:
        raise TestbedError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def list_netns() -> list[str]:
    """Names of every network namespace `ip netns` knows."""
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir())


def testbed_netns(testbed: str) -> list[str]:
    """This testbed's namespaces, hub last (deleting it last leaves no dangling veth ends)."""
    own = [n for n in list_netns() if n.startswith(netns_name(testbed, ""))]
    hub = netns_name(testbed, "hub")
    return sorted(n for n in own if n != hub) + ([hub] if hub in own else [])


def create_hub(testbed: str) -> str:
    hub = netns_name(testbed, "hub")
    ip("netns", "add", hub)
    ip("-n", hub, "link", "set", "lo", "up")
    ip("-n", hub, "link", "add", "br0", "type", "bridge")
    ip("-n", hub, "link", "set", "br0", "up")
    return hub


def attach(testbed: str, tag: str, address: str) -> str:
    """A namespace for `tag` with eth0 at `address`/24 on the hub's bridge; returns its name."""
    hub, ns = netns_name(testbed, "hub"), netns_name(testbed, tag)
    port = f"v-{tag}"
    if len(port) > 15:  # IFNAMSIZ
        raise TestbedError(f"host name {tag!r} is too long for an interface name")
    ip("netns", "add", ns)
    ip("-n", hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
    ip("-n", hub, "link", "set", port, "master", "br0", "up")
    ip("-n", ns, "link", "set", "lo", "up")
    ip("-n", ns, "addr", "add", f"{address}/{SUBNET.prefixlen}", "dev", "eth0")
    ip("-n", ns, "link", "set", "eth0", "up")
    return ns


def shape(testbed: str, tag: str, rate_mbit: int, both_ways: bool = False) -> None:
    """Limit what host `tag` receives to rate_mbit (tbf on the hub's port towards it); with
    both_ways, what it sends too (tbf on its own eth0), as a NIC that came up at a lower
    rate would."""
    _tbf(netns_name(testbed, "hub"), f"v-{tag}", rate_mbit)
    if both_ways:
        _tbf(netns_name(testbed, tag), "eth0", rate_mbit)


def _tbf(ns: str, dev: str, rate_mbit: int) -> None:
    # A bucket of 10 ms at the rate (at least 64 KiB, one GSO segment) keeps tbf accurate
    # with offloads; 50 ms of queue before drops.
    burst = max(rate_mbit * 1_000_000 // 8 // 100, 65536)
    proc = subprocess.run(
        [
            *("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf"),
            *("rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "50ms"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if proc.returncode != 0:
        raise TestbedError(f"tc tbf on {dev} in {ns}: {proc.stderr.strip()}")


def delete(ns: str) -> None:
    ip("netns", "del", ns, check=False)


def pids_in(ns: str) -> list[int]:
    """Processes whose network namespace is `ns` (what `ip netns pids` prints)."""
    proc = ip("netns", "pids", ns, check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]
