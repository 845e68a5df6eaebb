"""`vfleet plan` (layouts and scheduler knobs for a cluster) and `vfleet render` (the
per-host launch files from a plan).

Their flags are generated (vfleet.cli.main): plan's from vfleet.documents.requests.PlanFlags,
render's from vfleet.documents.render (RenderFlags, RenderOptions) and SpeculativeOptions. The
render options are checked once the plan is read (vfleet.render.request.render_options):
the ports they allow depend on it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vfleet.errors import UserError

if TYPE_CHECKING:
    from vfleet.documents.plan import Plan, Speculative
    from vfleet.documents.requests import SpeculativeOptions


def run_plan(args: argparse.Namespace) -> int:
    from vfleet.catalog.models import load_model
    from vfleet.catalog.releases import traits
    from vfleet.cli.from_model import from_namespace
    from vfleet.documents.requests import PlanFlags
    from vfleet.plan.workload import load_workload
    from vfleet.probe.load import load_cluster

    # Every input is read and checked (in the order it always was) before the planner and
    # the estimator's numpy are imported, so a bad file is refused without paying for them.
    a = from_namespace(PlanFlags, args)
    cluster = load_cluster(a.cluster, allow_partial=a.allow_partial_facts)
    spec = load_model(a.model)
    fit = None
    if a.calibration:
        from vfleet.calibrate import calibration

        fit, line = calibration.load(a.calibration)
        print(f"vfleet: using {a.calibration}: {line}", file=sys.stderr)
    workload = load_workload(a.workload)
    version = traits(a.vllm_version or cluster.vllm_version)
    speculative = a.speculative(spec)

    from vfleet.perf.fit import default_fit
    from vfleet.plan.make import PlanRequest, make_plan
    from vfleet.plan.search import parse_layout
    from vfleet.present.plan_table import modes_table, table

    result = make_plan(
        PlanRequest(
            fit=fit if fit is not None else default_fit(),
            spec=spec,
            cluster=cluster,
            workload=workload,
            traits=version,
            gpu_memory_utilization=a.gpu_memory_utilization,
            kv_cache_dtype=a.kv_cache_dtype,
            speculative=speculative,
            layout=parse_layout(a.layout) if a.layout is not None else None,
            mode=a.mode,
        )
    )
    if a.out:
        write_json(a.out, result.plan.document(), "the plan")
    if a.as_json:
        print(json.dumps(result.plan.document(), indent=2))
    else:
        print(table(cluster, result.inputs.workload, result.ranked, spec.name))
        if result.plan.disaggregation is not None:
            print(modes_table(result.plan.disaggregation))
    return 0


def write_json(path: Path, doc: dict[str, Any], what: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise UserError(
            f"cannot write {what} to {path}: {exc.strerror or exc}: pass a file path "
            "in a folder you can write"
        ) from None


def run_render(args: argparse.Namespace) -> int:
    from vfleet.catalog.flag_registry import flag_set
    from vfleet.cli.from_model import flag_values, from_namespace
    from vfleet.documents.plan import load_plan
    from vfleet.documents.render import RenderFlags, RenderOptions
    from vfleet.documents.requests import SpeculativeOptions
    from vfleet.probe.load import load_cluster
    from vfleet.render.request import render_into, render_options
    from vfleet.render.write import check_out

    a = from_namespace(RenderFlags, args)
    check_out(a.out)
    plan = load_plan(a.plan)
    draft = from_namespace(SpeculativeOptions, args)
    if draft.given:
        plan = plan.model_copy(update={"speculative": _render_speculative(draft, plan)})
    cluster = load_cluster(a.source, allow_partial=a.allow_partial_facts)
    vllm_flags = flag_set(plan.vllm_version, cluster.vllm_flags if a.facts else ())
    given = {**flag_values(RenderOptions, args), "--plan": a.plan.name}
    opts = render_options(plan, given, "vfleet render")
    rendered = render_into(a.out, plan, cluster, opts, vllm_flags)
    modes = sorted(set(rendered.mode_by_replica.values()))
    print(
        f"rendered {len(rendered.endpoints)} engine(s) on {len(rendered.hosts)} host(s) "
        f"({', '.join(modes)}) for vLLM {plan.vllm_version} (flag set {vllm_flags.summary})"
    )
    for ep in rendered.endpoints:
        print(f"  {ep['engine']}: {ep['url']}  ({ep['mode']}, hosts {', '.join(ep['hosts'])})")
    print(f"files under {a.out}")
    return 0


def _render_speculative(draft: SpeculativeOptions, plan: Plan) -> Speculative | None:
    """`vfleet render --speculative-method ...` replaces the plan's choice; an MTP choice is
    checked against the model's layers (the plan's memory check did not include it)."""
    from vfleet.catalog.models import load_model
    from vfleet.documents.plan import Speculative

    chosen = draft.speculative(load_model(plan.model))
    return Speculative.model_construct(**chosen.to_json()) if chosen else None
