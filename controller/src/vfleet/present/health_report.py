"""The report's health gate section: each check that did not pass, and the hosts the plan
left out with why."""

from __future__ import annotations

from collections.abc import Sequence

from vfleet.health.gate import HostVerdict
from vfleet.present.report import Block, Bullets, Section, Table, Text


def health_section(verdicts: Sequence[HostVerdict], left_out: dict[str, str]) -> Section:
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
    return Section("Health gate", blocks)
