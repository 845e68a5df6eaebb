"""`vfleet upgrade-check`: what a vLLM upgrade breaks and changes, before it reaches a host.

Exit 0 when nothing breaks, 1 when something would (a CI job can gate an upgrade on it), 2
for bad input. Its flags are generated from vfleet.cli.env_flags.UpgradeCheckFlags.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from vfleet.errors import UserError

if TYPE_CHECKING:
    from vfleet.cli.env_flags import UpgradeCheckFlags
    from vfleet.documents.plan import Plan
    from vfleet.plan.make import PlanRequest
    from vfleet.upgrade.check import Deployment


def run(namespace: argparse.Namespace) -> int:
    from vfleet.cli.env_flags import UpgradeCheckFlags
    from vfleet.cli.from_model import from_namespace
    from vfleet.present.upgrade_report import report_text
    from vfleet.upgrade.check import check, check_target

    a = from_namespace(UpgradeCheckFlags, namespace)
    if a.to is not None:
        check_target(a.to)  # an unrecorded target is refused before anything is read
    deployment, subject, target = _from_env(a) if a.env else _from_plan(a)
    report = check(deployment, target)
    if a.as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report_text(report, subject))
    return report.exit_code


def _subject(deployment: Deployment) -> str:
    plan = deployment.plan
    prefill = plan.served_prefill_pool
    if prefill is not None:
        shape = f"{prefill.engines}P({prefill.layout}) {plan.replicas or 1}D({plan.layout})"
    else:
        shape = f"{plan.layout} x {plan.replicas or 1}"
    return f"{plan.model}, {shape} on {deployment.cluster.gpu.name}"


def _from_env(a: UpgradeCheckFlags) -> tuple[Deployment, str, str]:
    from vfleet.deploy import flow
    from vfleet.documents.plan import load_plan
    from vfleet.environment.context import load_context
    from vfleet.probe.load import load_cluster
    from vfleet.upgrade.check import Deployment

    if a.plan or a.cluster:
        raise UserError("--env reads the environment's own plan: drop --plan and --cluster")
    assert a.env is not None
    ctx = load_context(a.env, a.root)
    pinned = str(ctx.var("vfleet_vllm_version") or "")
    target = a.to or pinned
    if not target:
        raise UserError(
            f"inventories/{a.env}/group_vars pin no vfleet_vllm_version: say the release with --to"
        )
    if a.gate and target != pinned:
        raise UserError(
            f"VLLM_VERSION={target} but inventories/{a.env}/group_vars pin {pinned or 'none'}: "
            f"set vfleet_vllm_version and vllm_package to {target} there first (the rollout "
            "installs the pin)"
        )
    plan_file, launch = ctx.artifacts / "plan.json", ctx.artifacts / "launch"
    if not plan_file.is_file() or not (launch / "endpoints.json").is_file():
        raise UserError(
            f"ENV={a.env} has no deployment to check ({ctx.shown(plan_file)} or its rendered "
            f"files are missing): run make deploy ENV={a.env} first, or check a plan with "
            "--plan FILE --cluster FILE"
        )
    plan = load_plan(plan_file)
    cluster = load_cluster(ctx.artifacts / "facts", allow_partial=True)
    request, _ = flow.plan_request(ctx, cluster)
    deployment = Deployment(
        plan=plan,
        cluster=cluster,
        spec=request.spec,
        plan_request=_pinned(request, plan),
        render_values=flow.render_values(ctx),
        render_source=flow.render_source(ctx),
        rendered=launch,
        bundle=ctx.root,
    )
    return deployment, f"ENV={a.env}: {_subject(deployment)}", target


def _from_plan(a: UpgradeCheckFlags) -> tuple[Deployment, str, str]:
    from vfleet.catalog.models import load_model
    from vfleet.catalog.releases import traits
    from vfleet.documents.plan import load_plan
    from vfleet.plan.make import PlanRequest
    from vfleet.plan.workload import PRESETS, Workload
    from vfleet.probe.load import load_cluster
    from vfleet.upgrade.check import Deployment

    if a.plan is None or a.cluster is None:
        raise UserError(
            "say what to check: --env ENV (a deployed environment), or --plan FILE with "
            "--cluster FILE"
        )
    if a.to is None or a.gate:
        raise UserError("--plan needs --to VERSION (--gate is for --env)")
    plan = load_plan(a.plan)
    cluster = load_cluster(a.cluster)
    spec = load_model(plan.model)
    # The plan records the workload it was made for; a hand-written plan may not.
    workload = Workload(**plan.workload.model_dump()) if plan.workload else PRESETS["chat"]
    request = PlanRequest(
        spec=spec,
        cluster=cluster,
        workload=workload,
        traits=traits(plan.vllm_version),
        kv_cache_dtype=plan.kv_cache_dtype,
    )
    deployment = Deployment(
        plan=plan,
        cluster=cluster,
        spec=spec,
        plan_request=_pinned(request, plan),
        render_values={"--plan": a.plan.name},
        render_source="vfleet upgrade-check",
    )
    return deployment, _subject(deployment), a.to


def _pinned(request: PlanRequest, plan: Plan) -> PlanRequest:
    """The same deployment on the target: its layout kept (aggregated) or its mode
    (prefill/decode pools), so the check compares releases, not the planner's choices."""
    import dataclasses

    from vfleet.plan.search import parse_layout

    if plan.serves_disaggregated or plan.layout is None:
        return dataclasses.replace(request, mode="disaggregated", layout=None)
    return dataclasses.replace(request, mode="aggregated", layout=parse_layout(plan.layout))
