"""What the firewall role does on the testbed: the cluster hosts h1 and h2 reach each other's
plan ports, the outsider h3 reaches only SSH and the API, and nobody reaches a port the plan
does not need. Every check runs on every host, each probing the others from where it sits."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

TIMEOUT_S = 3  # a dropped SYN: nc gives up after this


@pytest.fixture(scope="module")
def scenario(host: Any) -> dict[str, Any]:
    return host.ansible.get_variables()


def _cluster(scenario: dict[str, Any]) -> list[str]:
    return sorted(scenario["groups"]["gpu_hosts"])


def _in_cluster(scenario: dict[str, Any]) -> bool:
    return scenario["inventory_hostname"] in _cluster(scenario)


def _address(host: Any, name: str) -> str:
    """Another inventory host's address (the inventory is molecule's)."""
    return str(host.backend.ansible_runner.get_variables(name)["ansible_host"])


def _probe(host: Any, targets: list[tuple[str, int]]) -> dict[str, str]:
    """address:port -> open | closed, probed from this host, all at once."""
    script = " ".join(
        f"( if nc -z -w {TIMEOUT_S} {a} {p} 2>/dev/null; then echo {a}:{p} open; "
        f"else echo {a}:{p} closed; fi ) &"
        for a, p in targets
    )
    out = host.run(f"{script} wait")
    assert out.rc == 0, out.stderr
    return dict(line.split() for line in out.stdout.splitlines())


def _covered(port: int, opened: list[str], ephemeral: tuple[int, int]) -> bool:
    for entry in opened:
        low, _, high = ("{}-{}".format(*ephemeral) if entry == "ephemeral" else entry).partition(
            "-"
        )
        if int(low) <= port <= int(high or low):
            return True
    return False


def test_firewall_json_is_the_renders_and_names_the_test_ports(
    host: Any, scenario: dict[str, Any]
) -> None:
    doc = json.loads((Path(scenario["firewall_test_dir"]) / "firewall.json").read_text())
    low, high = host.file("/proc/sys/net/ipv4/ip_local_port_range").content_string.split()
    ephemeral = (int(low), int(high))
    for name, ports in scenario["firewall_test_ports"].items():
        rendered = doc["hosts"][name]
        assert [p["port"] for p in rendered["api"]] == ports["api"]
        opened = [p["ports"] for p in rendered["cluster"]]
        assert all(_covered(port, opened, ephemeral) for port in ports["cluster"]), name
        assert not any(_covered(port, opened, ephemeral) for port in ports["closed"]), name


def test_reachability_from_this_host(host: Any, scenario: dict[str, Any]) -> None:
    me = scenario["inventory_hostname"]
    inside = _in_cluster(scenario)
    expected: dict[str, str] = {}
    for target in _cluster(scenario):
        if target == me:
            continue
        address = _address(host, target)
        ports = scenario["firewall_test_ports"][target]
        expected[f"{address}:22"] = "open"
        for port in ports["api"]:
            expected[f"{address}:{port}"] = "open"  # a cluster host or an allowed client
        for port in ports["cluster"]:
            expected[f"{address}:{port}"] = "open" if inside else "closed"
        for port in ports["closed"]:
            expected[f"{address}:{port}"] = "closed"
    targets = [(k.rsplit(":", 1)[0], int(k.rsplit(":", 1)[1])) for k in expected]
    assert _probe(host, targets) == expected


def test_closed_means_firewalled_not_down(host: Any, scenario: dict[str, Any]) -> None:
    """Every listener answers on the host itself (loopback and its own address pass), so a
    closed port seen from elsewhere is the ruleset's doing."""
    me = scenario["inventory_hostname"]
    ports = scenario["firewall_test_ports"].get(me)
    if ports is None:
        assert not host.package("nftables").is_installed  # the outsider: untouched
        return
    own = _address(host, me)
    targets = [(a, p) for group in ports.values() for p in group for a in ("127.0.0.1", own)]
    assert set(_probe(host, targets).values()) == {"open"}


def test_outsider_is_dropped_not_refused(host: Any, scenario: dict[str, Any]) -> None:
    """From outside, a cluster port swallows the SYN (a timeout, not a reset)."""
    target = _cluster(scenario)[0]
    if _in_cluster(scenario):
        return  # only the outsider's view is asked for here
    port = scenario["firewall_test_ports"][target]["cluster"][0]
    out = host.run(
        f"timeout 10 bash -c 'time nc -z -w {TIMEOUT_S} {_address(host, target)} {port}'"
    )
    assert out.rc != 0
    assert f"real\t0m{TIMEOUT_S}." in out.stderr, out.stderr


def test_ruleset_is_loaded_and_persistent(host: Any, scenario: dict[str, Any]) -> None:
    if not _in_cluster(scenario):
        assert host.run("command -v nft").rc != 0
        return
    service = host.service("nftables")
    assert service.is_enabled and service.is_running
    before = host.check_output("nft list table inet vfleet")
    assert "policy drop;" in before
    assert 'comment "molecule: an extra rule"' in before
    conf = host.file("/etc/nftables.conf")
    assert (conf.user, conf.mode) == ("root", 0o644)
    assert "flush ruleset" not in conf.content_string.replace("No `flush ruleset`", "")
    # What boot would load: the same table, from the file alone.
    host.check_output("systemctl restart nftables.service")
    assert host.check_output("nft list table inet vfleet") == before


def test_icmp_passes(host: Any, scenario: dict[str, Any]) -> None:
    me = scenario["inventory_hostname"]
    for target in _cluster(scenario):
        if target != me:
            out = host.run(f"ping -c 1 -W 2 {shlex.quote(_address(host, target))}")
            assert out.rc == 0, out.stdout
