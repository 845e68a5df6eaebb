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
    from collections.abc import Callable

    from vfleet.catalog.flag_registry import FlagSet
    from vfleet.documents.lws import LwsOptions
    from vfleet.documents.plan import Plan, Speculative
    from vfleet.documents.render import RenderOptions
    from vfleet.documents.requests import SpeculativeOptions
    from vfleet.topology.cluster import Cluster


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
    lws = _lws_options(args, a.target)
    check_out(a.out, owns=_owns(a.target))
    plan = load_plan(a.plan)
    draft = from_namespace(SpeculativeOptions, args)
    if draft.given:
        plan = plan.model_copy(update={"speculative": _render_speculative(draft, plan)})
    cluster = load_cluster(a.source, allow_partial=a.allow_partial_facts)
    vllm_flags = flag_set(plan.vllm_version, cluster.vllm_flags if a.facts else ())
    given = {**flag_values(RenderOptions, args), "--plan": a.plan.name}
    opts = render_options(plan, given, "vfleet render")
    if lws is not None:
        return _render_lws(a.out, plan, cluster, opts, lws, vllm_flags)
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


def _lws_options(args: argparse.Namespace, target: str) -> LwsOptions | None:
    """The Kubernetes inputs with --target lws; refused without it, where they would be
    silently unused."""
    from vfleet.cli.from_model import flag_values, from_namespace
    from vfleet.documents.lws import LwsOptions

    given = flag_values(LwsOptions, args)
    defaults = {name: field.get_default() for name, field in LwsOptions.model_fields.items()}
    set_here = sorted(k for k, v in given.items() if v not in (defaults.get(k), [], ()))
    if target != "lws":
        if set_here:
            flag = "--" + set_here[0].replace("_", "-")
            raise UserError(f"{flag} is a Kubernetes input: add --target lws, or drop it")
        return None
    if getattr(args, "router_host", None):
        raise UserError(
            "--router-host places the router on a host: with --target lws the router is a "
            "Deployment of its own; drop it"
        )
    if getattr(args, "api_key_file", None):
        raise UserError(
            "--api-key-file names a file on hosts: with --target lws give --api-key-secret "
            "(a Secret whose key `key` holds the API key)"
        )
    return from_namespace(LwsOptions, args)


def _owns(target: str) -> Callable[[Path], bool]:
    from vfleet.kubernetes.lws_render import is_manifest
    from vfleet.render.write import host_render_owns

    return is_manifest if target == "lws" else host_render_owns


def _render_lws(
    out: Path, plan: Plan, cluster: Cluster, opts: RenderOptions, lws: LwsOptions, flags: FlagSet
) -> int:
    from vfleet.kubernetes.lws_render import render_lws

    pools = render_lws(out, plan, cluster, opts, lws, flags)
    print(
        f"rendered {len(pools)} LeaderWorkerSet(s) for vLLM {plan.vllm_version} (flag set "
        f"{flags.summary}), every manifest checked against its schema"
    )
    for g in pools:
        pool = f"{g.pool} pool, " if g.pool else ""
        print(
            f"  {g.name}: {pool}{g.replicas} group(s) of {g.size} pod(s) x {g.gpus} GPU(s), "
            f"{g.mode}"
        )
    print(f"files under {out}: kubectl apply -k {out}")
    return 0


def _render_speculative(draft: SpeculativeOptions, plan: Plan) -> Speculative | None:
    """`vfleet render --speculative-method ...` replaces the plan's choice; an MTP choice is
    checked against the model's layers (the plan's memory check did not include it)."""
    from vfleet.catalog.models import load_model
    from vfleet.documents.plan import Speculative

    chosen = draft.speculative(load_model(plan.model))
    return Speculative.model_construct(**chosen.to_json()) if chosen else None
