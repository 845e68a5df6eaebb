"""The in-process middle of a deploy: the probe facts read once, checked against the
inventory, planned around the operator's pinned values, rendered, and reported, all on
the same typed objects (no `vfleet` subprocesses, no JSON read back from disk)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, cast

from vfleet.catalog.flag_registry import flag_set
from vfleet.catalog.models import load_model
from vfleet.catalog.releases import traits
from vfleet.documents.deploy import RENDER_FIELDS
from vfleet.documents.plan import Plan
from vfleet.documents.render import RenderOptions
from vfleet.environment.context import Context
from vfleet.errors import UserError
from vfleet.feedback import calibrate_env, ledger
from vfleet.health.probed import Probed
from vfleet.inputs.files import read_text
from vfleet.observe.doctor import Observation
from vfleet.plan.disaggregation import Mode
from vfleet.plan.make import PlanRequest, PlanResult, make_plan
from vfleet.plan.search import Pinned
from vfleet.plan.workload import load_workload
from vfleet.render.request import render_into, render_options
from vfleet.render.types import Rendered
from vfleet.topology.cluster import Cluster

HOST_API_KEY_FILE = "/etc/vfleet/secrets/api-key"  # vllm_launch_api_key_file's default
# The local default serves a two-layer model on CPU engines; the report also plans this real
# catalog model on the GPUs the test hosts stand in for, the numbers to read as a forecast.
REFERENCE_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
STAND_IN = (
    "the test hosts (systemd-nspawn machines with real systemd and SSH), Terraform, every "
    "Ansible role, the vLLM engines and the load test. Standing in: the NVIDIA packages and "
    "nvidia-smi, which replays a real H200 host, so the plan is for H200s; the engines are "
    "the vLLM CPU build serving a tiny locally made model with a pinned 4 MiB KV cache. "
    "The plan's predictions below are for that tiny model on H200s, not a forecast of these "
    "engines; the section after the plan shows a real model on the same GPUs."
)


# Aggregated unless group_vars say otherwise (vfleet_serving_mode): a disaggregated plan
# launches prefill, decode, then the router (ansible/playbooks/launch.yml), and the vllm
# role installs NIXL (ansible/playbooks/site.yml).
DEFAULT_MODE: Mode = "aggregated"


def serving_mode(ctx: Context) -> Mode:
    """The environment's vfleet_serving_mode (validated with the deploy vars). `auto` behind
    an API key is aggregated: vllm-router 0.1 cannot hand prefill/decode engines their key
    (vfleet.render.disaggregated.refuse_keyed_pools), and the deploy vars refuse an explicit
    `disaggregated` with a key before anything is installed."""
    mode = ctx.var("vfleet_serving_mode") or DEFAULT_MODE
    if mode not in ("auto", "aggregated", "disaggregated"):
        raise UserError(
            f"vfleet_serving_mode {str(mode)[:40]!r}: use auto, aggregated or disaggregated"
        )
    if mode == "auto" and ctx.api_key_file is not None:
        return "aggregated"
    return cast(Mode, mode)


def plan(ctx: Context, cluster: Cluster) -> PlanResult:
    """Plan for the environment's model and workload; write artifacts/<env>/plan.json."""
    start = time.monotonic()
    print("==> plan", flush=True)
    request, calibrated = plan_request(ctx, cluster)
    if calibrated:
        print(f"    using the calibration {calibrated}", flush=True)
    result = make_plan(request)
    path = ctx.artifacts / "plan.json"
    path.write_text(json.dumps(result.plan.document(), indent=2) + "\n")
    for line in plan_lines(result.plan):
        print(f"    {line}")
    print(f"    ({ctx.shown(path)})")
    _timed(ctx, "plan", start)
    return result


def plan_lines(made: Plan) -> list[str]:
    """The plan in a line per pool: one for an aggregated plan, prefill then decode for a
    disaggregated one (whose top level is only its decode pool)."""
    memory = f"gpu-memory-utilization {made.gpu_memory_utilization}"
    pools = made.disaggregation
    if (
        pools is None
        or pools.chosen != "disaggregated"
        or pools.prefill is None
        or pools.decode is None
    ):
        return [
            f"{made.layout} x {made.replicas}: max-num-seqs {made.max_num_seqs}, "
            f"max-num-batched-tokens {made.max_num_batched_tokens}, {memory}"
        ]
    return [
        f"{name} pool: {pool.layout} x {pool.engines}: max-num-seqs {pool.max_num_seqs}, "
        f"max-num-batched-tokens {pool.max_num_batched_tokens}, {memory}"
        for name, pool in (("prefill", pools.prefill), ("decode", pools.decode))
    ]


def plan_request(ctx: Context, cluster: Cluster) -> tuple[PlanRequest, str]:
    """How the environment is planned (group_vars, the probed cluster, its calibration),
    and how its calibration was made ("" without one)."""
    fit, calibrated = calibrate_env.fit_for(ctx)
    request = PlanRequest(
        fit=fit,
        spec=load_model(str(ctx.var("vfleet_model"))),
        cluster=cluster,
        workload=load_workload(str(ctx.var("vfleet_workload", "chat"))),
        traits=traits(ctx.var("vfleet_vllm_version") or cluster.vllm_version),
        kv_cache_dtype=ctx.var("vfleet_kv_cache_dtype"),
        pinned=Pinned(**(ctx.var("vfleet_plan_overrides") or {})),
        mode=serving_mode(ctx),
    )
    return request, calibrated


def render(ctx: Context, plan: Plan, cluster: Cluster) -> Rendered:
    """Launch scripts, units and env files for every host into artifacts/<env>/launch."""
    start = time.monotonic()
    print("==> render", flush=True)
    opts = render_options(plan, render_values(ctx), render_source(ctx))
    flags = flag_set(plan.vllm_version, cluster.vllm_flags)
    out = ctx.artifacts / "launch"
    rendered = render_into(out, plan, cluster, opts, flags)
    print(
        f"    {len(rendered.endpoints)} engine(s) on {len(rendered.hosts)} host(s), "
        f"flag set {flags.summary} ({ctx.shown(out)})"
    )
    _timed(ctx, "render", start)
    return rendered


def kubernetes(ctx: Context, plan: Plan, cluster: Cluster) -> None:
    """The same plan as LeaderWorkerSet manifests into artifacts/<env>/lws, from the
    environment's render values and its vfleet_kubernetes inputs."""
    from vfleet.documents.lws import LwsOptions
    from vfleet.kubernetes.lws_render import render_lws

    start = time.monotonic()
    print("==> kubernetes", flush=True)
    opts = render_options(plan, render_values(ctx), render_source(ctx))
    lws = LwsOptions.model_validate(ctx.var("vfleet_kubernetes") or {})
    flags = flag_set(plan.vllm_version, cluster.vllm_flags)
    out = ctx.artifacts / "lws"
    pools = render_lws(out, plan, cluster, opts, lws, flags)
    shapes = ", ".join(f"{g.name} {g.replicas} x {g.size} pod(s)" for g in pools)
    print(f"    {shapes}, every manifest checked ({ctx.shown(out)})")
    _timed(ctx, "kubernetes", start)


def render_values(ctx: Context) -> dict[str, Any]:
    """The render options group_vars set (spec.deploy.RENDER_FIELDS), by `vfleet render`
    flag as render_options takes them; the others keep RenderOptions' defaults."""
    given: dict[str, Any] = {}
    for name, (option, suffix) in RENDER_FIELDS.items():
        value = ctx.var(name)
        if value is not None:
            flag = RenderOptions.model_fields[option].alias or option
            given[flag] = list(value) if suffix is None else str(value) + suffix
    if ctx.api_key_file:
        # Where vllm_launch writes the key on the hosts; the unit reads it at start.
        on_hosts = str(ctx.var("vllm_launch_api_key_file", HOST_API_KEY_FILE))
        given["--api-key-file"] = HOST_API_KEY_FILE if "{{" in on_hosts else on_hosts
    return given


def render_source(ctx: Context) -> str:
    return f"inventories/{ctx.env}/group_vars"


def _timed(ctx: Context, name: str, start: float) -> None:
    elapsed = time.monotonic() - start
    ctx.timings.append((name, elapsed))
    print(f"    done in {elapsed:.1f} s", flush=True)


def pool_pages(run: Path | None) -> dict[str, str]:
    """The /metrics pages the load test read from each prefill and decode engine after its
    run through the router (`<engine>.prom` in the run's folder), by engine id. Read where
    the load test ran: the controller may have no route to the engines' ports."""
    pages = {}
    for path in sorted(run.glob("*.prom")) if run is not None else []:
        try:  # files fetched from the hosts: a broken one is left out and noted
            pages[path.stem] = read_text(path, "engine metrics", max_bytes=16 << 20)
        except UserError:
            continue
    return pages


def measured_pools(
    endpoints: list[dict[str, Any]], run: Path | None
) -> tuple[dict[str, Observation], str]:
    """Each prefill/decode pool as its engines measured it after the load test (from the
    pages the load test kept in `run`), and a note where that could not be read; empty for
    an aggregated deployment."""
    from vfleet.documents.endpoints import Endpoint, pool_urls
    from vfleet.observe.scrape import reduce_pools

    listed = [Endpoint.model_validate(e) for e in endpoints]
    by_engine = pool_pages(run)
    pages = {e.base_url: by_engine[e.engine] for e in listed if e.engine in by_engine}
    return reduce_pools(pool_urls(listed), pages, listed[0].model if listed else None)


def loadtest_results(report_dir: Path) -> list[dict[str, Any]]:
    """The load test's `vllm bench serve --save-result` files, one per endpoint."""
    results = []
    for path in sorted((report_dir / "loadtest").glob("**/*.json")):
        try:  # files fetched from the hosts: a broken or odd one is skipped, not trusted
            data = json.loads(read_text(path, "load-test result"))
        except (UserError, json.JSONDecodeError, RecursionError):
            continue
        if isinstance(data, dict) and "completed" in data and not ledger.is_sweep_result(path):
            data.setdefault("endpoint", path.stem)
            results.append(data)
    return results


def write_report(
    ctx: Context,
    result: PlanResult,
    endpoints: list[dict[str, Any]],
    cluster: Cluster | None = None,
    probed: Probed | None = None,
) -> Path:
    """report.md and report.html from the planner's own budget (nothing recomputed from JSON);
    with the cluster, this deploy's ledger lines too (vfleet.feedback.ledger)."""
    from vfleet.present import report
    from vfleet.present.budget_report import parse_range, sweep
    from vfleet.present.pool_report import pools_section

    start = time.monotonic()
    winner = result.winner
    assert winner.request is not None and winner.budget is not None
    points = sweep(winner.request, parse_range("0.6:0.95:0.05"))
    out = ctx.artifacts / "report"
    notes = []
    stand_in, reference = "", None
    if ctx.env == "local" and cluster is not None:
        stand_in = STAND_IN
        reference = make_plan(
            PlanRequest(
                spec=load_model(REFERENCE_MODEL),
                cluster=cluster,
                workload=result.inputs.workload,
                traits=result.inputs.traits,
                mode=serving_mode(ctx),
            )
        ).plan
    if result.plan.overrides:
        notes.append(f"Planned around pinned values from group_vars: {result.plan.overrides}")
    lines: list[dict[str, Any]] = []
    run = ledger.latest_run(out / "loadtest")
    if cluster is not None:
        lines = ledger.entries(
            ctx.env, result, cluster, endpoints, run, stand_in=ctx.env == "local"
        )
        ledger.append(ctx.artifacts / "ledger.jsonl", lines)
    more, more_plots = _sweep_and_calibration(ctx, result, lines, out)
    measured, unread = measured_pools(endpoints, run)
    if unread:
        notes.append(unread)
    pools = pools_section(result.plan, loadtest_results(out), measured)
    if pools is not None:
        more.insert(0, pools)
    if probed is not None:
        from vfleet.present.health_report import health_section

        links = result.plan.degraded_links or []
        more.insert(0, health_section(probed.verdicts, probed.why, links))
        notes += [f"Left out of the plan: {host}, {why}." for host, why in probed.why.items()]
    ctx.timings.append(("report", time.monotonic() - start))
    inputs = report.ReportInputs(
        ctx.env,
        result.plan,
        winner.budget,
        points,
        loadtest_results(out),
        endpoints,
        list(ctx.timings),
        notes,
        lines,
        stand_in,
        reference,
        more,
        more_plots,
    )
    laid_out = report.build(inputs, out)
    (out / "report.md").write_text(report.markdown(laid_out))
    (out / "report.html").write_text(report.html(laid_out))
    return out / "report.html"


def _sweep_and_calibration(
    ctx: Context, result: PlanResult, lines: list[dict[str, Any]], out: Path
) -> tuple[list[Any], list[Path]]:
    """The report's sweep section (this deploy's sweep lines) and, when the plan used the
    cluster's calibration, what it changed against the bundled fit."""
    from vfleet.perf.fit import default_fit
    from vfleet.present import sweep_report

    sections, plots = [], []
    swept = sweep_report.sweep_section(lines, result.plan, out)
    if swept:
        sections.append(swept[0])
        plots.append(swept[1])
    _fit, calibrated = calibrate_env.fit_for(ctx)
    if calibrated:
        i = result.inputs
        bundled = make_plan(
            PlanRequest(
                spec=i.spec,
                cluster=i.cluster,
                workload=i.workload,
                traits=i.traits,
                kv_cache_dtype=i.kv_cache_dtype,
                pinned=i.pinned,
                fit=default_fit(),
                mode=serving_mode(ctx),
            )
        ).plan
        sections.append(sweep_report.calibration_section(calibrated, bundled, result.plan))
    return sections, plots
