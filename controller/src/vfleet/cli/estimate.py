"""`vfleet estimate`: one layout at one operating point (see vfleet.plan.estimate)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TYPE_CHECKING, Any

from vfleet.budget import speculative
from vfleet.errors import UserError
from vfleet.spec import flags

if TYPE_CHECKING:
    from vfleet.catalog.modelspec import ModelSpec

_TOKENS = flags.count(1, flags.MAX_TOKENS, "a token count")
_REQUESTS = flags.count(1, flags.MAX_REQUESTS)
MAX_REPLAY_TOKENS = 10_000_000  # ~20 s of replay on one core
MAX_PREFILL_STEPS = 1_000_000

EXAMPLE = (
    "example: vfleet estimate --cluster examples/clusters/1x8-h200.yaml "
    "--model deepseek-ai/DeepSeek-R1 --layout 'TP1 DP8 EP' --input-len 1024 "
    "--output-len 1024 --concurrency 256"
)


def add_args(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLE
    p.add_argument("--cluster", required=True, type=flags.path, help="cluster YAML or probe facts")
    p.add_argument("--model", required=True, help="catalog id, model folder or config.json")
    p.add_argument("--layout", required=True, help="e.g. 'TP8', 'TP1 DP8 EP', 'TP8 PP2'")
    p.add_argument("--input-len", required=True, type=_TOKENS, help="prompt tokens (mean)")
    p.add_argument("--output-len", required=True, type=_TOKENS, help="completion tokens (mean)")
    p.add_argument(
        "--concurrency",
        type=_REQUESTS,
        help="requests in flight (vllm bench serve --max-concurrency); omit for all at once",
    )
    p.add_argument("--num-prompts", type=_REQUESTS, help="requests in the run (default 10 x C)")
    p.add_argument(
        "--request-rate",
        type=flags.number(0, 1e6, example="20"),
        help="requests/s for the cluster (default: all at once)",
    )
    p.add_argument(
        "--dataset",
        choices=("random", "sharegpt"),
        default="random",
        help="random: fixed lengths; sharegpt: its length spread around these means",
    )
    p.add_argument(
        "--replicas",
        type=flags.count(1, flags.MAX_PARALLEL),
        help="engine copies (default: as many as fit)",
    )
    p.add_argument(
        "--vllm-version", help="target vLLM release (default: the probed one, else 0.33.0)"
    )
    p.add_argument("--quantization", help="runtime quantization, e.g. fp8")
    p.add_argument("--kv-cache-dtype", type=flags.kv_dtype, help="auto | fp8 | ...")
    p.add_argument(
        "--max-num-seqs",
        type=flags.count(1, flags.MAX_SEQS),
        help="default: the release's own default",
    )
    p.add_argument("--max-num-batched-tokens", type=_TOKENS, help="default: the release's own")
    p.add_argument(
        "--max-model-len",
        type=_TOKENS,
        help="default: the model's context window (past it only with "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, as vLLM)",
    )
    p.add_argument("--gpu-memory-utilization", type=flags.fraction)
    p.add_argument("--all2all-backend", help="EP dispatch, e.g. deepep_low_latency")
    speculative.add_cli_args(p)
    p.add_argument(
        "--calibration",
        type=flags.path,
        help="a cluster's calibration.json from `vfleet calibrate` (default: the bundled fit)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _check(args: argparse.Namespace, spec: ModelSpec) -> None:
    """Rules between flags (each flag's own range is its argparse type's)."""
    flags.check_scheduler(args, spec)
    # The estimate replays every request step by step (~2 us per decoded token, ~20 us per
    # step): bound the work, so a large but valid product of flags cannot run for hours.
    prompts = args.num_prompts or max(10 * (args.concurrency or 100), 100)
    decode = prompts * args.output_len
    if decode > MAX_REPLAY_TOKENS:
        raise UserError(
            f"{prompts} prompts x {args.output_len} output tokens is {decode:,} tokens to "
            f"replay, more than the {MAX_REPLAY_TOKENS:,} an estimate takes: lower "
            "--num-prompts (10 x --concurrency reaches steady state) or --output-len"
        )
    steps = prompts * math.ceil(args.input_len / (args.max_num_batched_tokens or 2048))
    if steps > MAX_PREFILL_STEPS:
        raise UserError(
            f"{prompts} prompts of {args.input_len} tokens in chunks of "
            f"{args.max_num_batched_tokens or 2048} is {steps:,} prefill steps, more than the "
            f"{MAX_PREFILL_STEPS:,} an estimate takes: raise --max-num-batched-tokens or "
            "lower --num-prompts"
        )


def run(args: argparse.Namespace) -> int:
    from vfleet.calibrate import calibration
    from vfleet.catalog.models import load_model
    from vfleet.catalog.releases import traits
    from vfleet.perf.params import default_fit
    from vfleet.plan.estimate import EstimateRequest, estimate
    from vfleet.plan.search import parse_layout
    from vfleet.probe.load import load_cluster

    cluster = load_cluster(args.cluster)
    spec = load_model(args.model)
    _check(args, spec)
    fit = default_fit()
    if args.calibration:
        fit, line = calibration.load(args.calibration)
        print(f"vfleet: using {args.calibration}: {line}", file=sys.stderr)
    req = EstimateRequest(
        fit=fit,
        spec=spec,
        cluster=cluster,
        layout=parse_layout(args.layout),
        traits=traits(args.vllm_version or cluster.vllm_version),
        input_len=args.input_len,
        output_len=args.output_len,
        concurrency=args.concurrency,
        num_prompts=args.num_prompts,
        request_rate=args.request_rate,
        dataset=args.dataset,
        replicas=args.replicas,
        quantization=args.quantization,
        kv_cache_dtype=args.kv_cache_dtype,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        all2all_backend=args.all2all_backend,
        speculative=speculative.from_args(
            args.speculative_method, args.num_speculative_tokens, args.draft_model, spec
        ),
    )
    result = estimate(req).to_json()
    if args.json:
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
