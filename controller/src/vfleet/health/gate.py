"""The gate: every probed host's checks, one verdict per host, and the hosts the plan must
leave out. Hosts of the same GPU model are each other's bar for the relative checks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vfleet.health.checks import ORDER, Check, host_checks, peers_of
from vfleet.health.links import iperf3_checks


@dataclass(frozen=True)
class HostVerdict:
    host: str
    checks: list[Check]

    @property
    def verdict(self) -> str:
        return min((c.verdict for c in self.checks), key=lambda v: ORDER[v], default="skip")

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == "fail"]

    def reason(self) -> str:
        return "; ".join(f"{c.name}: {c.evidence}" for c in self.failed)

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "verdict": self.verdict,
            "checks": [c.to_json() for c in self.checks],
        }


def assess(
    facts: Sequence[dict[str, Any]], expected_gpus: Mapping[str, int | None] | None = None
) -> list[HostVerdict]:
    """Each host's checks; `expected_gpus`: host -> the inventory's GPU count, if it says."""
    out = []
    ring = iperf3_checks(facts)
    for host in facts:
        same = [f for f in facts if f.get("gpu_name") == host.get("gpu_name")]
        want = (expected_gpus or {}).get(host["host"])
        checks = host_checks(host, peers_of(same), want, ring[host["host"]])
        out.append(HostVerdict(host["host"], checks))
    return out


LINK_CHECKS = ("iperf3", "infiniband", "nic_pcie")
"""the checks of a host's link to the other hosts (NVLink and the intra all-reduce are inside
the host: they are costed at their measured bandwidth)"""


def degraded_links(verdicts: Sequence[HostVerdict]) -> dict[str, str]:
    """host -> why its link to the others is degraded: a link check that warned (or failed,
    on a host kept with --allow-degraded)."""
    out = {}
    for v in verdicts:
        bad = [c for c in v.checks if c.name in LINK_CHECKS and c.verdict in ("warn", "fail")]
        if bad:
            out[v.host] = "; ".join(f"{c.name}: {c.evidence}" for c in bad)
    return out


def table(verdicts: Sequence[HostVerdict], everything: bool = False) -> str:
    """The checks as a fixed-width table; without `everything`, only what is not a pass."""
    rows = [
        (v.host, c.name, c.verdict.upper(), c.evidence)
        for v in verdicts
        for c in v.checks
        if everything or c.verdict in ("fail", "warn")
    ]
    if not rows:
        return f"all {len(verdicts)} host(s) pass every check that had data"
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{h:{width}}  {n:15} {v:5} {e}" for h, n, v, e in rows)
