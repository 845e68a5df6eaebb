#!/usr/bin/env python3
"""The firewall role's helper, run on the host (standard library only).

It checks and merges what the role will put in the ruleset, and refuses a ruleset that would
lock the controller out:

- source addresses (CIDRs, addresses or host names, resolved here) per set, split into IPv4
  and IPv6 and collapsed, since an nftables interval set refuses overlapping elements;
- ports per rule: numbers, "lo-hi" ranges or "ephemeral" (this host's
  net.ipv4.ip_local_port_range, where NCCL, Gloo and vLLM's ZMQ sockets bind), merged;
- the SSH connection this very run came in on (SSH_CONNECTION of an ancestor process):
  its client must be inside the SSH sources and its port must be the SSH port.

Input, one JSON argument:
  {"ssh_port": 22, "guard": true,
   "sources": {"ssh": [...], "api": [...], "cluster": [...]},
   "ports": {"api": [...], "cluster": [...]}}
Output, JSON on stdout:
  {"sources": {name: {"v4": [...], "v6": [...]}}, "ports": {name: [...]},
   "ephemeral": "lo-hi", "controller": "address" or null}
Bad input, or a ruleset that would drop the controller's SSH: exit 2, one line on stderr.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys
from typing import Any

EPHEMERAL = "ephemeral"
RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Refused(Exception):
    """Input the role must not turn into a ruleset."""


def networks(entry: str) -> list[Network]:
    """A CIDR, an address or a host name, as networks (a name: every address it resolves to)."""
    text = str(entry).strip()
    try:
        return [ipaddress.ip_network(text, strict=False)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(text, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        raise Refused(
            f"{text!r} is neither an address, a CIDR nor a name this host resolves"
        ) from None
    return [ipaddress.ip_network(info[4][0]) for info in infos]


def split(entries: list[str]) -> dict[str, list[str]]:
    found: list[Network] = [net for entry in entries for net in networks(entry)]
    out: dict[str, list[str]] = {}
    for family, version in (("v4", 4), ("v6", 6)):
        nets = [n for n in found if n.version == version]
        out[family] = [str(n) for n in ipaddress.collapse_addresses(nets)]  # type: ignore[arg-type]
    return out


def ephemeral_range(path: str = RANGE_FILE) -> tuple[int, int]:
    with open(path, encoding="ascii") as handle:
        low, high = (int(x) for x in handle.read().split())
    return low, high


def parse_ports(entry: Any, ephemeral: tuple[int, int]) -> tuple[int, int]:
    text = str(entry).strip()
    if text == EPHEMERAL:
        return ephemeral
    low, sep, high = text.partition("-")
    try:
        span = (int(low), int(high) if sep else int(low))
    except ValueError:
        raise Refused(f"port {text!r}: write a number, a range lo-hi or {EPHEMERAL!r}") from None
    if not 1 <= span[0] <= span[1] <= 65535:
        raise Refused(f"port {text!r} is outside 1-65535 or reversed")
    return span


def merge_ports(entries: list[Any], ephemeral: tuple[int, int]) -> list[str]:
    """Sorted, with overlapping and adjacent ranges joined."""
    spans = sorted(parse_ports(e, ephemeral) for e in entries)
    merged: list[list[int]] = []
    for low, high in spans:
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return [str(low) if low == high else f"{low}-{high}" for low, high in merged]


def ssh_connection(pid: int | None = None) -> tuple[str, int] | None:
    """(client address, server port) of the SSH session this process runs under, read from
    the nearest ancestor whose environment has SSH_CONNECTION (sudo drops it from ours)."""
    pid = os.getpid() if pid is None else pid
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                env = dict(
                    item.split(b"=", 1) for item in handle.read().split(b"\0") if b"=" in item
                )
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        value = env.get(b"SSH_CONNECTION")
        if value:
            fields = value.decode(errors="replace").split()
            if len(fields) == 4:
                return fields[0], int(fields[3])
        pid = parent
    return None


def check_controller(
    connection: tuple[str, int] | None, ssh_port: int, ssh_sources: dict[str, list[str]]
) -> str | None:
    if connection is None:
        return None  # not over SSH (a local connection): nothing to lock out
    client, port = connection
    address = ipaddress.ip_address(client.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if port != ssh_port:
        raise Refused(
            f"this run came in over SSH on port {port} but firewall_ssh_port is {ssh_port}: "
            "the new ruleset would lock the controller out"
        )
    family = "v4" if address.version == 4 else "v6"
    if not any(address in ipaddress.ip_network(n) for n in ssh_sources[family]):
        raise Refused(
            f"the controller connects from {address}, which is not in firewall_ssh_sources: "
            "the new ruleset would lock it out (add it, or set firewall_ssh_guard: false)"
        )
    return str(address)


def plan(request: dict[str, Any], connection: tuple[str, int] | None) -> dict[str, Any]:
    ssh_port = int(request["ssh_port"])
    ephemeral = ephemeral_range(request.get("range_file", RANGE_FILE))
    sources = {name: split(list(entries)) for name, entries in request["sources"].items()}
    ports = {
        name: merge_ports(list(entries), ephemeral) for name, entries in request["ports"].items()
    }
    controller = (
        check_controller(connection, ssh_port, sources["ssh"])
        if request.get("guard", True)
        else None
    )
    return {
        "sources": sources,
        "ports": ports,
        "ephemeral": f"{ephemeral[0]}-{ephemeral[1]}",
        "controller": controller,
    }


def main(argv: list[str]) -> int:
    try:
        request = json.loads(argv[1])
        print(json.dumps(plan(request, ssh_connection()), indent=1, sort_keys=True))
    except (Refused, IndexError, KeyError, ValueError, OSError) as exc:
        print(f"vfleet_firewall: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
