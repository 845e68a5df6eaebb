"""The report's health gate section: each check that did not pass, the hosts the plan left
out with why, and where the plan's engines stand to the degraded links."""

from __future__ import annotations

from collections.abc import Sequence

from vfleet.documents.plan import DegradedLink
from vfleet.health.gate import HostVerdict
from vfleet.present.report import Block, Bullets, Section, Table, Text


def health_section(
    verdicts: Sequence[HostVerdict],
    left_out: dict[str, str],
    degraded_links: Sequence[DegradedLink] = (),
) -> Section:
    """`degraded_links`: the plan's (host, why, in_multi_node_engines)."""
    rows = [
        [v.host, c.name, c.verdict, c.evidence]
        for v in verdicts
        for c in v.checks
        if c.verdict in ("fail", "warn")
    ]
    summary = ", ".join(f"{v.host} {v.verdict}" for v in verdicts)
    blocks: list[Block] = [Text([("", f"Every probed host's checks: {summary}.")])]
    if rows:
        blocks.append(Table(["host", "check", "verdict", "evidence"], rows))
    if left_out:
        blocks.append(Bullets([f"{h} left out of the plan: {why}" for h, why in left_out.items()]))
    if degraded_links:
        blocks.append(Bullets([_link_line(link) for link in degraded_links]))
    return Section("Health gate", blocks)


def _link_line(link: DegradedLink) -> str:
    if link.in_multi_node_engines:
        return (
            f"{link.host}'s link is degraded and an engine spanning nodes uses it, costed "
            "at the measured bandwidth (see the plan's reason)"
        )
    return f"{link.host}'s link is degraded: no engine that spans nodes runs on it"
