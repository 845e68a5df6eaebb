"""`vfleet estimate`: one layout at one operating point (see vfleet.plan.estimate)."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from typing import TYPE_CHECKING, Any

from vfleet.errors import UserError

if TYPE_CHECKING:
    from vfleet.budget.compute import Budget
    from vfleet.catalog.model_shape import ModelShape
    from vfleet.catalog.releases import VersionTraits
    from vfleet.documents.requests import EstimateFlags
    from vfleet.plan.estimate import EstimateRequest

# The replay's work is bounded so the worst accepted estimate ends in a few seconds on one
# core: decoded tokens over the run (MAX_REPLAY_TOKENS, ~0.2 us each) and the scheduler
# steps of one engine's replay (~3 us each; ~35 us with a request rate, where each step is
# costed as it runs).
MAX_REPLAY_STEPS = 1_000_000
MAX_TIMED_STEPS = 100_000
# Runtime quantizations vLLM applies to an unquantized (16-bit) checkpoint as it loads it:
# fp8 (dynamic FP8 weights) and bitsandbytes (in-flight 4-bit); 'none' and the 16-bit
# names keep it as it is. Every other method needs a checkpoint saved in it.
ONLINE_QUANTIZATIONS = ("fp8", "bitsandbytes", "none", "bf16", "fp16")

EXAMPLE = (
    "example: vfleet estimate --cluster examples/clusters/1x8-h200.yaml "
    "--model deepseek-ai/DeepSeek-R1 --layout 'TP1 DP8 EP' --input-len 1024 "
    "--output-len 1024 --concurrency 256"
)


def _check(args: EstimateFlags, spec: ModelShape) -> None:
    """Rules between flags (each flag's own range is its field's Rule)."""
    from vfleet.documents.flag_types import MAX_REPLAY_TOKENS, check_scheduler

    check_scheduler(args, spec)
    decode = _prompts(args) * args.output_len
    if decode > MAX_REPLAY_TOKENS:
        raise UserError(
            f"{_prompts(args)} prompts x {args.output_len} output tokens is {decode:,} tokens "
            f"to replay, more than the {MAX_REPLAY_TOKENS:,} an estimate takes: lower "
            "--num-prompts (10 x --concurrency reaches steady state) or --output-len"
        )


def _prompts(args: EstimateFlags) -> int:
    """The run's requests: vllm bench serve's ten rounds of the concurrency by default."""
    return int(args.num_prompts or max(10 * (args.concurrency or 100), 100))


def _check_replay(args: EstimateFlags, req: EstimateRequest) -> None:
    """Refuse a run whose replay would take more steps than an estimate allows, before it
    runs: its engines, KV cache and scheduler limits are the ones the estimate will use."""
    from vfleet.plan import shape
    from vfleet.plan.estimate import budget_for

    c = req.layout
    placed = req.cluster.for_engine(c.gpus, shape.heavy_traffic_crosses(req.spec, req.cluster, c))
    if c.gpus > placed.total_gpus:
        return  # the estimate refuses it, saying how many GPUs it needs
    budget = budget_for(req)
    if args.dataset == "random" and args.input_len + args.output_len > budget.max_model_len:
        return  # the estimate refuses it, naming max-model-len
    engines = (args.replicas or max(placed.total_gpus // c.gpus, 1)) * c.dp
    steps, batch = _replay_steps(args, req, budget, engines)
    cap = MAX_TIMED_STEPS if args.request_rate else MAX_REPLAY_STEPS
    if steps <= cap:
        return
    why = "as few as 1 at a request rate" if args.request_rate else f"{batch} at once"
    raise UserError(
        f"{_prompts(args)} prompts of {args.input_len}->{args.output_len} tokens over "
        f"{engines} engine(s) take up to {steps:,} scheduler steps per engine to replay "
        f"(decoding {why}), more than the {cap:,} an estimate takes: lower "
        "--num-prompts or --output-len (or raise --max-num-batched-tokens for long prompts)"
    )


def _replay_steps(
    args: EstimateFlags, req: EstimateRequest, budget: Budget, engines: int
) -> tuple[int, int]:
    """(steps one engine's replay takes at most, sequences decoding in each).

    The requests split evenly over the engines that get any (vfleet.plan.estimate). A
    prompt takes one step per chunk. Without a request rate the decoding sequences share
    steps, as many as the concurrency, max-num-seqs and the KV cache (at full length) let
    run; with one, arrivals may leave each request alone, so every output token counts.
    """
    from vfleet.plan.estimate import SHAREGPT_MAX_TOTAL, replay_kv_tokens

    prompts = _prompts(args)
    active = min(engines, args.concurrency or prompts, prompts)
    per_engine = math.ceil(prompts / active)
    chunk = budget.max_num_batched_tokens
    prefill = per_engine * math.ceil(args.input_len / chunk)
    batch = 1
    if not args.request_rate:
        concurrency = math.ceil(args.concurrency / active) if args.concurrency else per_engine
        longest = args.input_len + args.output_len
        if args.dataset == "sharegpt":
            longest = min(longest, SHAREGPT_MAX_TOTAL)
        fit = max(1, replay_kv_tokens(req, budget) // longest)
        batch = min(concurrency, budget.max_num_seqs, chunk, fit)
    return math.ceil(per_engine * args.output_len / batch) + prefill, batch


def check_quantization(spec: ModelShape, requested: str | None) -> str | None:
    """--quantization must be the checkpoint's own method (vLLM refuses any other), or one
    vLLM applies online to an unquantized checkpoint (ONLINE_QUANTIZATIONS). Returns what
    changes the weights: the online method, or None (a quantized checkpoint loads as saved)."""
    if requested is None:
        return None
    from vfleet.budget.quant import normalise_scheme, scheme_from_config

    shown = repr(requested[:40])
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", requested):
        raise UserError(f"--quantization {shown} is not a method name: pass it like fp8")
    wanted = normalise_scheme(requested)
    stored = scheme_from_config(spec.quantization, spec.model_type)[0]
    if stored == "none":
        if requested.lower() not in ONLINE_QUANTIZATIONS:
            raise UserError(
                f"--quantization {shown} needs a checkpoint saved in it and {spec.name} is "
                "unquantized: use fp8 or bitsandbytes (vLLM applies those as it loads), or "
                "a checkpoint quantized that way"
            )
        return requested
    method = str(spec.quantization.get("quant_method") or stored)[:40]
    if wanted != stored and requested.lower().replace("-", "_") != method.lower():
        raise UserError(
            f"--quantization {shown} does not match {spec.name}'s checkpoint, quantized as "
            f"{method}: drop --quantization (vLLM reads it from the checkpoint)"
        )
    return None


def check_all2all(backend: str | None, traits: VersionTraits) -> None:
    """--all2all-backend must be one of the release's own choices (the flag registry)."""
    if backend is None:
        return
    choices = _all2all_backends(traits.version)
    shown = repr(backend[:40])
    if not choices:
        raise UserError(
            f"--all2all-backend {shown}: vLLM {traits.label} has no --all2all-backend: drop "
            "it or target a release that has it with --vllm-version"
        )
    if backend not in choices:
        raise UserError(
            f"--all2all-backend {shown} is not a backend of vLLM {traits.label}: use one of "
            f"{', '.join(choices)}"
        )


def _all2all_backends(version: tuple[int, int, int]) -> list[str]:
    """--all2all-backend's choices in the newest recorded release at or before `version`
    (data/vllm_flags.json); none where that release has no such flag."""
    from vfleet.catalog.flag_registry import _registry, recorded_versions
    from vfleet.catalog.releases import parse_version

    older = [v for v in recorded_versions() if parse_version(v) <= version]
    if not older:
        return []
    record = _registry()["versions"][older[-1]]["flags"].get("--all2all-backend") or {}
    return [str(choice) for choice in record.get("choices") or []]


def run(namespace: argparse.Namespace) -> int:
    from vfleet.calibrate import calibration
    from vfleet.catalog.models import load_model
    from vfleet.catalog.releases import traits
    from vfleet.cli.from_model import from_namespace
    from vfleet.documents.requests import EstimateFlags
    from vfleet.perf.fit import default_fit
    from vfleet.plan.estimate import EstimateRequest, estimate
    from vfleet.plan.search import check_layout, parse_layout
    from vfleet.probe.load import load_cluster

    args = from_namespace(EstimateFlags, namespace)
    layout = parse_layout(args.layout)
    if args.vllm_version is not None:
        traits(args.vllm_version)  # a bad version is refused before any file is read
    cluster = load_cluster(args.cluster)
    spec = load_model(args.model)
    release = traits(args.vllm_version or cluster.vllm_version)
    check_layout(spec, cluster, release, layout)
    check_all2all(args.all2all_backend, release)
    _check(args, spec)
    quantization = check_quantization(spec, args.quantization)
    fit = default_fit()
    if args.calibration:
        fit, line = calibration.load(args.calibration)
        print(f"vfleet: using {args.calibration}: {line}", file=sys.stderr)
    req = EstimateRequest(
        fit=fit,
        spec=spec,
        cluster=cluster,
        layout=layout,
        traits=release,
        input_len=args.input_len,
        output_len=args.output_len,
        concurrency=args.concurrency,
        num_prompts=args.num_prompts,
        request_rate=args.request_rate,
        dataset=args.dataset,
        replicas=args.replicas,
        quantization=quantization,
        kv_cache_dtype=args.kv_cache_dtype,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        all2all_backend=args.all2all_backend,
        speculative=args.speculative(spec),
    )
    _check_replay(args, req)
    result = estimate(req).to_json()
    if args.as_json:
        print(json.dumps(result, indent=2))
    else:
        print(render_text(result))
    return 0


def render_text(r: dict[str, Any]) -> str:
    w, s = r["workload"], r["scheduler"]
    tok, ttft, tpot = r["output_tokens_per_s"], r["ttft_median_ms"], r["tpot_median_ms"]
    c = w["concurrency"] or "all at once"
    lines = [
        f"Estimate: {r['model']} on {r['gpus']} x {r['gpu']} as {r['replicas']} x {r['layout']} "
        f"(vLLM {r['vllm_version']}), {w['dataset']} {w['input_len']}->{w['output_len']} "
        f"tokens, {w['num_prompts']} prompts, concurrency {c}",
        "",
        f"  output tokens/s   {tok['median']:>12,.1f}   "
        f"({r['output_tokens_per_s_per_gpu']:,.1f} per GPU; p10-p90 {tok['p10']:,.0f} - "
        f"{tok['p90']:,.0f})",
        f"  requests/s        {r['request_throughput']:>12,.3f}",
        f"  TTFT ms           median {r['ttft_ms']['median']:,.1f}   "
        f"p99 {r['ttft_ms']['p99']:,.1f}   (median p10-p90 {ttft['p10']:,.0f} - "
        f"{ttft['p90']:,.0f})",
        f"  TPOT ms           median {r['tpot_ms']['median']:,.2f}   "
        f"p99 {r['tpot_ms']['p99']:,.2f}   (median p10-p90 {tpot['p10']:,.2f} - "
        f"{tpot['p90']:,.2f})",
        f"  running seqs      {r['running_seqs']:>12,.1f} per engine (max-num-seqs "
        f"{s['max_num_seqs']}, KV holds {s['kv_cap_seqs']:,} at full length)",
        f"  preemptions       {r['preemptions']:>12,}",
        "",
        "  Mean step, ms per engine rank:",
    ]
    for key, value in r["step_breakdown_ms"].items():
        lines.append(f"    {key.replace('_', ' '):20} {value:10.3f}")
    params = r["parameters"]
    note = f"fitted {params['gpu_generation']}"
    if params["source"] != "fit":
        note = f"{params['gpu_generation']} calibrated ({params['source']})"
    elif params["borrowed_from"]:
        note = f"no fit for {params['gpu_generation']}: {params['borrowed_from']}'s values"
    lines += [
        "",
        f"  Knobs: --max-num-seqs {s['max_num_seqs']} --max-num-batched-tokens "
        f"{s['max_num_batched_tokens']} --kv-cache-dtype {s['kv_cache_dtype']}"
        + (" --enable-chunked-prefill" if s["enable_chunked_prefill"] else ""),
        f"  Cost model: {note} efficiencies, {params['engine_generation']} engine overheads"
        + (", async scheduling" if params["async_scheduling"] else ""),
    ]
    if r.get("speculative"):
        sp = r["speculative"]
        lines.append(
            f"  Speculative {sp['method']} ({sp['num_speculative_tokens']} token(s)): its "
            f"{sp['draft_weights_gib']:.2f} GiB per GPU and draft KV layers are in the "
            "memory budget; the step model does not price drafting or acceptance"
        )
    if r["plan_would_reject"]:
        lines.append(f"  vfleet plan would not pick this layout: {r['plan_would_reject']}")
    return "\n".join(lines)
