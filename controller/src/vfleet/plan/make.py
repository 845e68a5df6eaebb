"""One plan from typed inputs: the search, then the typed plan. `vfleet plan` and the deploy
both call `make_plan`, so a deploy plans in process on the objects it already holds."""

from __future__ import annotations

from dataclasses import dataclass, field

from vfleet.budget.speculative import Speculative
from vfleet.catalog.model_shape import ModelShape
from vfleet.catalog.releases import VersionTraits
from vfleet.documents.plan import Plan
from vfleet.documents.plan import Speculative as PlanSpeculative
from vfleet.perf.fit import Fit, default_fit
from vfleet.plan import document
from vfleet.plan.candidate import Candidate
from vfleet.plan.disaggregation import Decision, Mode, decide, default_mode
from vfleet.plan.pool_document import disaggregated_plan, section
from vfleet.plan.search import Evaluated, Pinned, PlanInputs, plan
from vfleet.plan.workload import Workload
from vfleet.topology.cluster import Cluster


@dataclass(frozen=True)
class PlanRequest:
    spec: ModelShape
    cluster: Cluster
    workload: Workload
    traits: VersionTraits
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str | None = None
    speculative: Speculative | None = None
    layout: Candidate | None = None
    """evaluate only this layout (`--layout`)"""
    pinned: Pinned = field(default_factory=Pinned)
    fit: Fit = field(default_factory=default_fit)
    """the estimator's parameters: the bundled fit, or a cluster's calibration over it"""
    mode: Mode | None = None
    """aggregated, disaggregated or auto (None: auto from the first release with a P/D
    connector, aggregated before it and when one layout is asked for)"""


@dataclass(frozen=True)
class PlanResult:
    inputs: PlanInputs
    ranked: list[Evaluated]
    """every layout, best first; the rejected ones last, each with its reason"""
    plan: Plan
    """the plan `vfleet render` reads (`plan.document()` is its JSON)"""
    decision: Decision | None = None
    """aggregated or disaggregated, and the split compared (None: nothing fits)"""

    @property
    def winner(self) -> Evaluated:
        return self.ranked[0]


def make_plan(req: PlanRequest) -> PlanResult:
    if req.speculative:  # refuse a method the target release lacks before planning for it
        req.speculative.check(req.spec, req.traits.version)
    inputs = PlanInputs(
        spec=req.spec,
        cluster=req.cluster,
        workload=req.workload,
        traits=req.traits,
        gpu_memory_utilization=req.gpu_memory_utilization,
        kv_cache_dtype=req.kv_cache_dtype,
        speculative=req.speculative,
        pinned=req.pinned,
        fit=req.fit,
    )
    ranked = plan(inputs, req.layout)
    made = document.plan_document(
        req.cluster,
        req.workload,
        ranked,
        req.spec.name,
        req.traits.label,
        req.spec.model_type,
        speculative=_speculative(req.speculative),
    )
    pinned = req.pinned.given()
    if pinned:  # the values the operator fixed in group_vars, recorded with the plan
        update: dict[str, object] = {"overrides": pinned}
        if req.pinned.enable_chunked_prefill is not None:
            update["enable_chunked_prefill"] = req.pinned.enable_chunked_prefill
        made = made.model_copy(update=update)
    mode = req.mode or ("aggregated" if req.layout else default_mode(req.traits.version))
    decision = decide(inputs, ranked, mode) if not ranked[0].rejected else None
    if decision is not None and decision.chosen == "disaggregated":
        made = disaggregated_plan(made, decision, req.cluster)
    elif decision is not None and (decision.split is not None or req.mode):
        made = made.model_copy(update={"disaggregation": section(decision)})
    return PlanResult(inputs, ranked, made, decision)


def _speculative(chosen: Speculative | None) -> PlanSpeculative | None:
    """The plan's record of the speculative choice: its draft only where it has one."""
    return PlanSpeculative.model_construct(**chosen.to_json()) if chosen else None
