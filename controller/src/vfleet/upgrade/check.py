"""`vfleet upgrade-check`: the deployment as rendered today against the same deployment as
vfleet would plan and render it for another vLLM release.

Nothing is guessed: the target must be a release vfleet has recorded exactly (its flags in
data/vllm_flags.json and its environment variables, metrics and config fields in
data/vllm_release_facts.json, both read from the release itself). A current release without
a record still has its rendered files checked; the checks that need its record are named
in the report's notes.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfleet.catalog.flag_registry import exact_record, flag_set, recorded_versions
from vfleet.catalog.model_shape import ModelShape
from vfleet.catalog.releases import parse_version, traits
from vfleet.documents.plan import Plan
from vfleet.errors import UserError
from vfleet.plan.make import PlanRequest, make_plan
from vfleet.render.request import render_into, render_options
from vfleet.topology.cluster import Cluster
from vfleet.upgrade import breaks, changes, observability
from vfleet.upgrade.outcome import Finding, UpgradeReport
from vfleet.upgrade.release_facts import facts_for, recorded
from vfleet.upgrade.rendered import RenderedEngine, read_rendered


@dataclass(frozen=True)
class Deployment:
    """A deployment as it stands, and how vfleet plans and renders it."""

    plan: Plan
    cluster: Cluster
    spec: ModelShape
    plan_request: PlanRequest  # how it was planned (its traits are replaced for the target)
    render_values: dict[str, Any]  # the render options it was given, by flag
    render_source: str  # where those options came from, for error messages
    rendered: Path | None = None  # today's rendered files (None: render the plan)
    bundle: Path | None = None  # the bundle whose files are searched for metric names


def check_target(version: str) -> str:
    """The target as recorded, or one line saying vfleet has no record of it."""
    both = sorted(set(recorded_versions()) & set(recorded()), key=parse_version)
    try:
        parse_version(version)
    except UserError as exc:
        reason = str(exc).partition(":")[0]
        raise UserError(f"--to: {reason}: pick a recorded release ({', '.join(both)})") from None
    flags, facts = exact_record(version), facts_for(version)
    if flags is None or facts is None:
        raise UserError(
            f"vfleet has no record of vLLM {version}'s flags and runtime facts, so it cannot "
            f"say what the upgrade changes (recorded: {', '.join(both)}): check against a "
            "recorded release, or record it with controller/tools/flag_registry/generate.py "
            "and controller/tools/flag_registry/release_facts.py"
        )
    return flags


def _render(plan: Plan, dep: Deployment, version: str) -> list[RenderedEngine]:
    opts = render_options(plan, dep.render_values, dep.render_source)
    with tempfile.TemporaryDirectory(prefix="vfleet-upgrade-") as tmp:
        out = Path(tmp) / "launch"
        render_into(out, plan, dep.cluster, opts, flag_set(version))
        return read_rendered(out)


def _replan(dep: Deployment, version: str) -> Plan:
    request = dataclasses.replace(dep.plan_request, traits=traits(version))
    return make_plan(request).plan


def check(dep: Deployment, to_version: str) -> UpgradeReport:
    target = check_target(to_version)
    current = dep.plan.vllm_version
    report = UpgradeReport(current, target)
    before = read_rendered(dep.rendered) if dep.rendered else _render(dep.plan, dep, current)
    after_plan: Plan | None = None
    after: list[RenderedEngine] = []
    try:
        after_plan = _replan(dep, target)
        after = _render(after_plan, dep, target)
    except UserError as exc:
        step = "render" if after_plan is not None else "plan"
        report.findings.append(
            Finding("breaks", step, step, "plan.json", f"vfleet cannot {step} it: {exc}")
        )
    facts_from, facts_to = facts_for(current), facts_for(target)
    assert facts_to is not None  # check_target
    report.findings += breaks.flag_breaks(before, after, flag_set(target))
    report.findings += breaks.env_breaks(before, after, facts_to)
    report.findings += breaks.config_breaks(before, after, facts_to)
    if after_plan is not None:
        report.findings += changes.plan_changes(dep.plan, after_plan)
    report.findings += changes.capacity_changes(dep.plan, dep.spec, dep.cluster.gpu, target)
    if exact_record(current) is None:
        report.notes.append(
            f"no flag record of vLLM {current} itself: the defaults of flags the deployment "
            "leaves unset were not compared"
        )
    else:
        report.findings += changes.default_changes(before, current, target)
    if after_plan is not None:
        report.findings += changes.estimate_changes(dep.plan, after_plan)
    if facts_from is None:
        report.notes.append(
            f"no runtime record of vLLM {current}: which metric names the upgrade drops "
            "was not checked"
        )
    else:
        report.findings += observability.doctor_signals(facts_from, facts_to)
        if dep.bundle is not None:
            report.findings += observability.bundle_metrics(dep.bundle, facts_from, facts_to)
    return report
