"""What `vfleet upgrade-check` finds, in the report's three parts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Part = Literal["breaks", "changes", "observability"]
PARTS: tuple[Part, ...] = ("breaks", "changes", "observability")


@dataclass(frozen=True)
class Finding:
    part: Part
    kind: str  # flag, env, config-field, render | plan, capacity, default, estimate | metric
    item: str  # the flag, variable, field, knob or metric name
    where: str  # the rendered file or bundle line it comes from
    detail: str  # what the target release does with it
    instead: str = ""  # what vfleet renders for the target, or the new name

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class UpgradeReport:
    from_version: str
    to_version: str
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # checks not made, and why

    def part(self, name: Part) -> list[Finding]:
        return [f for f in self.findings if f.part == name]

    @property
    def breaks(self) -> bool:
        return bool(self.part("breaks"))

    @property
    def exit_code(self) -> int:
        """0: nothing breaks; 1: something would (a CI gate stops the upgrade)."""
        return 1 if self.breaks else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.from_version,
            "to": self.to_version,
            "breaks": [f.to_json() for f in self.part("breaks")],
            "changes": [f.to_json() for f in self.part("changes")],
            "observability": [f.to_json() for f in self.part("observability")],
            "notes": self.notes,
            "exit_code": self.exit_code,
        }
