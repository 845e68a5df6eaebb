"""`vfleet plan` (layouts and scheduler knobs for a cluster) and `vfleet render` (the
per-host launch files from a plan).

plan's flags are generated from vfleet.spec.requests.PlanFlags; render's stay written out
here, and vfleet.render.request.render_options (spec.render.RenderArgs) checks them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vfleet.budget import speculative
from vfleet.cli.from_model import add_arguments, from_namespace
from vfleet.errors import UserError
from vfleet.spec import flags
from vfleet.spec.requests import PlanFlags


def add_plan_args(p: argparse.ArgumentParser) -> None:
    add_arguments(p, PlanFlags)


def run_plan(args: argparse.Namespace) -> int:
    from vfleet.calibrate import calibration
    from vfleet.catalog.models import load_model
    from vfleet.catalog.releases import traits
    from vfleet.perf.params import default_fit
    from vfleet.plan.make import PlanRequest, make_plan
    from vfleet.plan.search import parse_layout
    from vfleet.plan.workload import load_workload
    from vfleet.present.plan_table import table
    from vfleet.probe.load import load_cluster

    a = from_namespace(PlanFlags, args)
    cluster = load_cluster(a.cluster, allow_partial=a.allow_partial_facts)
    spec = load_model(a.model)
    fit = default_fit()
    if a.calibration:
        fit, line = calibration.load(a.calibration)
        print(f"vfleet: using {a.calibration}: {line}", file=sys.stderr)
    result = make_plan(
        PlanRequest(
            fit=fit,
            spec=spec,
            cluster=cluster,
            workload=load_workload(a.workload),
            traits=traits(a.vllm_version or cluster.vllm_version),
            gpu_memory_utilization=a.gpu_memory_utilization,
            kv_cache_dtype=a.kv_cache_dtype,
            speculative=speculative.from_args(
                a.speculative_method, a.num_speculative_tokens, a.draft_model, spec
            ),
            layout=parse_layout(a.layout) if a.layout is not None else None,
        )
    )
    if a.out:
        write_json(a.out, result.document, "the plan")
    if a.as_json:
        print(json.dumps(result.document, indent=2))
    else:
        print(table(cluster, result.inputs.workload, result.ranked, spec.name))
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


def add_render_args(rend: argparse.ArgumentParser) -> None:
    rend.add_argument("--plan", required=True, type=flags.path, help="plan JSON from vfleet plan")
    source = rend.add_mutually_exclusive_group(required=True)
    source.add_argument("--facts", type=flags.path, help="probe facts directory")
    source.add_argument("--cluster", type=flags.path, help="cluster spec YAML")
    rend.add_argument("--out", required=True, type=flags.path, help="e.g. artifacts/<env>/launch")
    rend.add_argument("--model-path", help="model folder on the hosts (default /srv/models/<name>)")
    rend.add_argument("--served-model-name", help="API model name (default: the model id)")
    rend.add_argument("--vllm-bin", default="/opt/vfleet/vllm/bin/vllm")
    rend.add_argument(
        "--port", type=flags.count(1, 65535), default=8000, help="first API port on each host"
    )
    rend.add_argument(
        "--backend",
        choices=("auto", "mp", "ray"),
        default="auto",
        help="multi-node TP/PP backend (auto: mp from vLLM 0.11.1, else ray)",
    )
    rend.add_argument("--api-key-file", help="file on the hosts holding the API key")
    rend.add_argument("--install-dir", default="/etc/vfleet", help="where units expect files")
    rend.add_argument(
        "--extra-arg",
        action="append",
        default=[],
        help="extra vllm serve argument, --flag=value or --flag then value (repeat); "
        "not one vfleet or the plan sets",
    )
    rend.add_argument(
        "--env",
        action="append",
        default=[],
        help="extra KEY=VALUE for vllm.env (repeat); not one vfleet sets per engine",
    )
    rend.add_argument("--allow-partial-facts", action="store_true")
    speculative.add_cli_args(rend)
    rend.add_argument(
        "--draft-model-path", help="EAGLE draft on the hosts (default /srv/models/<name>)"
    )


def run_render(args: argparse.Namespace) -> int:
    from vfleet.catalog.flags import flag_set
    from vfleet.probe.load import load_cluster
    from vfleet.render.request import default_values, render_into, render_options
    from vfleet.render.write import check_out
    from vfleet.spec.plan import load_plan

    check_out(args.out)
    plan = load_plan(args.plan)
    if args.speculative_method or args.num_speculative_tokens or args.draft_model:
        plan = {**plan, "speculative": _render_speculative(args, plan)}
    cluster = load_cluster(args.facts or args.cluster, allow_partial=args.allow_partial_facts)
    vllm_flags = flag_set(plan["vllm_version"], cluster.vllm_flags if args.facts else ())
    defaults = default_values(plan)  # the model path and name derive from the plan
    given = {
        "--model-path": args.model_path or defaults["--model-path"],
        "--served-model-name": args.served_model_name or defaults["--served-model-name"],
        "--vllm-bin": args.vllm_bin,
        "--port": args.port,
        "--backend": args.backend,
        "--api-key-file": args.api_key_file,
        "--install-dir": args.install_dir,
        # argparse turns `--extra-arg=--` into [] (it drops a lone "--"): keep it visible.
        "--extra-arg": [a if isinstance(a, str) else "--" for a in args.extra_arg],
        "--env": list(args.env),
        "--draft-model-path": args.draft_model_path,
        "--plan": args.plan.name,
    }
    opts = render_options(plan, given, "vfleet render")
    rendered = render_into(args.out, plan, cluster, opts, vllm_flags)
    modes = sorted(set(rendered.mode_by_replica.values()))
    print(
        f"rendered {len(rendered.endpoints)} engine(s) on {len(rendered.hosts)} host(s) "
        f"({', '.join(modes)}) for vLLM {plan['vllm_version']} (flag set {vllm_flags.summary})"
    )
    for ep in rendered.endpoints:
        print(f"  {ep['engine']}: {ep['url']}  ({ep['mode']}, hosts {', '.join(ep['hosts'])})")
    print(f"files under {args.out}")
    return 0


def _render_speculative(args: argparse.Namespace, plan: dict[str, Any]) -> dict[str, Any]:
    """`vfleet render --speculative-method ...` replaces the plan's choice; an MTP choice is
    checked against the model's layers (the plan's memory check did not include it)."""
    from vfleet.catalog.models import load_model

    spec = load_model(plan["model"])
    draft = speculative.from_args(
        args.speculative_method, args.num_speculative_tokens, args.draft_model, spec
    )
    return draft.to_json() if draft else {}
