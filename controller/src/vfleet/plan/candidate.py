"""One parallel layout the planner may choose: TP x PP x DP, with or without EP, and DCP."""

from __future__ import annotations

from dataclasses import dataclass

from vfleet.budget.params import Layout


@dataclass(frozen=True)
class Candidate:
    tp: int
    pp: int
    dp: int
    ep: bool
    dcp: int

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def layout(self) -> Layout:
        return Layout(
            tp=self.tp, pp=self.pp, dp=self.dp, enable_expert_parallel=self.ep, dcp=self.dcp
        )

    @property
    def label(self) -> str:
        return self.layout().label
