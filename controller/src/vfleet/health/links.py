"""Which host a slow iperf3 run points at.

The probe's iperf3 is a ring: every host sends to the next one in rank order, and its
facts keep the result under the receiver's address (`bandwidth.iperf3_Gbps`). One run
measures the sender's way out and the receiver's way in at once, so a slow run alone
cannot say which end is slow. A host whose run out and run in are both slow is the end
the two runs share: that host's NIC, cable or switch port is the fault.

The bar for a run: a share (`expect.IPERF3_SHARE`) of the lower line rate of its two ends
where both NICs report one; otherwise, from three hosts up, the ring's fastest run (the
hosts are each other's reference, as for NVLink). Two hosts with virtual NICs have no bar.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vfleet.health import expect
from vfleet.health.checks import Check


@dataclass(frozen=True)
class Run:
    sender: str
    receiver: str
    Gbps: float
    bar: float | None
    """Gb/s a healthy pair reaches here (None: nothing to compare with)"""
    basis: str

    @property
    def share(self) -> float | None:
        return self.Gbps / self.bar if self.bar else None

    @property
    def slow(self) -> bool:
        share = self.share
        return share is not None and share < expect.WARN_SHARE

    def shown(self) -> str:
        share = self.share
        of = f" ({share:.0%} of {self.bar:.4g})" if share is not None and self.bar else ""
        return f"{self.sender}->{self.receiver} {self.Gbps:g} Gb/s{of}"


def ring_runs(facts: Sequence[dict[str, Any]]) -> list[Run]:
    """Every host's iperf3 run to a probed peer, with its bar."""
    by_address = {f["address"]: f for f in facts if f.get("address")}
    pairs = []
    for f in facts:
        for address, gbps in ((f.get("bandwidth") or {}).get("iperf3_Gbps") or {}).items():
            peer = by_address.get(address)
            if peer is not None and peer is not f:
                pairs.append((f, peer, float(gbps)))
    fastest = max((g for _, _, g in pairs), default=0.0)
    runs = []
    for sender, receiver, gbps in pairs:
        rates = [expect.bootstrap_nic_Gbps(sender), expect.bootstrap_nic_Gbps(receiver)]
        if all(rates):
            line = min(r for r in rates if r)
            bar, basis = expect.IPERF3_SHARE * line, f"{expect.IPERF3_SHARE:.0%} of {line:g} Gb/s"
        elif len(facts) >= 3 and fastest > 0:
            bar, basis = fastest, "the ring's fastest run"
        else:
            bar, basis = None, ""
        runs.append(Run(sender["host"], receiver["host"], gbps, bar, basis))
    return runs


def _sick(host: str, runs: Sequence[Run]) -> bool:
    out = [r for r in runs if r.sender == host]
    into = [r for r in runs if r.receiver == host]
    return bool(out and into) and all(r.slow for r in out + into)


def iperf3_checks(facts: Sequence[dict[str, Any]]) -> dict[str, Check]:
    """Each host's iperf3 verdict, from the runs it sent and received."""
    runs = ring_runs(facts)
    two = len(facts) == 2
    out: dict[str, Check] = {}
    for f in facts:
        host = f["host"]
        mine = [r for r in runs if host in (r.sender, r.receiver)]
        out[host] = _verdict(host, mine, runs, two)
    return out


def _verdict(host: str, mine: list[Run], runs: list[Run], two: bool) -> Check:
    if not mine:
        return Check(host, "iperf3", "skip", "no iperf3 run to or from this host")
    if all(r.bar is None for r in mine):
        return Check(
            host,
            "iperf3",
            "skip",
            "no bar: the NICs report no line rate and two hosts cannot be compared",
        )
    evidence = ", ".join(r.shown() for r in mine) + f"; bar: {mine[0].basis}"
    slow = [r for r in mine if r.slow]
    if not slow:
        return Check(host, "iperf3", "pass", evidence)
    worst = max((r.share or 0.0) for r in slow)
    if two:
        # Both hosts share both runs: the slow end cannot be told.
        return Check(
            host, "iperf3", "warn", evidence + "; with two hosts the slow end cannot be told"
        )
    if _sick(host, runs):
        verdict = "fail" if worst < expect.FAIL_SHARE else "warn"
        return Check(host, "iperf3", verdict, evidence + "; slow both ways: this host's link")
    others = {r.receiver if r.sender == host else r.sender for r in slow}
    if all(_sick(o, runs) for o in others):
        return Check(
            host, "iperf3", "pass", evidence + f"; the slow end is {', '.join(sorted(others))}"
        )
    return Check(
        host,
        "iperf3",
        "warn",
        evidence + "; slow one way only: this host or its peer, or the path between them",
    )
