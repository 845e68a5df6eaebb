"""vfleet's plan next to NVIDIA AIConfigurator's (AIC 0.12.0, vLLM 0.24.0 data).

For each scenario on a system AIC has silicon data for:
  - vfleet's layout and knobs (`vfleet plan --json`, the controller's own venv);
  - AIC's best aggregated layout under the same ISL/OSL and TTFT/TPOT targets (the agg half
    of `aiconfigurator cli default`, one TPOT target, no Pareto sweep: its fastest mode);
  - vfleet's layout scored by AIC twice: with the batch per rank AIC picks under the SLO
    (the layout ratio) and at vfleet's own max-num-seqs (SLO not enforced).
Every AIC score comes from a single-candidate sweep (`cli_exp`), the path AIC's own default
sweep takes; `cli_estimate` disagrees with it for EP layouts (docs: field-practices §11).

Run from the repository root: `python bench/plan_vs_aiconfigurator.py`. AIC lives in its own
venv (scripts/install-aiconfigurator.sh, run here when missing); the script re-executes
itself under that venv's python and calls vfleet through /work/main/.venv/bin/vfleet.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
AIC_VERSION = "0.12.0"
DEFAULT_AIC_VENV = Path("/var/cache/vfleet") / f"aic-{AIC_VERSION}"
REEXEC_MARK = "VFLEET_AIC_BENCH_REEXEC"
RATIO_TARGET = 0.95
LOOSE_SLO_MS = 1e9  # "no SLO" for the score at vfleet's own batch
AIC_MAX_BATCH = 512  # sweep_agg's max_batch_size default in 0.12.0


@dataclass(frozen=True)
class Scenario:
    name: str
    cluster: str  # examples/clusters/*.yaml
    model: str  # vfleet catalog id
    aic_model: str  # AIC's bundled config of the same architecture
    aic_system: str
    gpus: int
    moe: bool
    ethernet: bool = False  # AIC has no model of this fabric: score vfleet's layout only


SCENARIOS = (
    Scenario(
        "DeepSeek-V3, 8 x H200",
        "1x8-h200.yaml",
        "deepseek-ai/DeepSeek-V3",
        "deepseek-ai/DeepSeek-V3",
        "h200_sxm",
        8,
        True,
    ),
    Scenario(
        "Llama-3.1-70B, 8 x H100",
        "1x8-h100.yaml",
        "meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Meta-Llama-3.1-70B",
        "h100_sxm",
        8,
        False,
    ),
    Scenario(
        "Llama-3.1-8B, 4 x H100",
        "1x4-h100.yaml",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Meta-Llama-3.1-8B",
        "h100_sxm",
        4,
        False,
    ),
    Scenario(
        "Qwen3-235B-A22B-FP8, 8 x H200",
        "1x8-h200.yaml",
        "Qwen/Qwen3-235B-A22B-FP8",
        "Qwen/Qwen3-235B-A22B-FP8",
        "h200_sxm",
        8,
        True,
    ),
    Scenario(
        "DeepSeek-V3, 2 x 8 H200 IB",
        "2x8-h200-ib.yaml",
        "deepseek-ai/DeepSeek-V3",
        "deepseek-ai/DeepSeek-V3",
        "h200_sxm",
        16,
        True,
    ),
    # AIC models inter-node links as one 50 GB/s scalar: no Ethernet.
    Scenario(
        "DeepSeek-V3, 2 x 8 H100 25GbE",
        "2x8-h100-25gbe.yaml",
        "deepseek-ai/DeepSeek-V3",
        "deepseek-ai/DeepSeek-V3",
        "h100_sxm",
        16,
        True,
        ethernet=True,
    ),
)


# ---------------------------------------------------------------- environment


def _reexec_under_aic(venv: Path) -> None:
    """Run this script again under the AIC venv's python (installing it when missing)."""
    python = venv / "bin" / "python"
    if os.environ.get(REEXEC_MARK):
        sys.exit(f"aiconfigurator is not importable under {sys.executable}")
    if not (venv / ".vfleet-ready").is_file():
        print(f"AIC venv {venv} missing: running scripts/install-aiconfigurator.sh", flush=True)
        subprocess.run([str(REPO / "scripts" / "install-aiconfigurator.sh"), str(venv)], check=True)
    env = {**os.environ, REEXEC_MARK: "1"}
    os.execve(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]], env)


# ---------------------------------------------------------------- vfleet side


def run_vfleet(vfleet: Path, sc: Scenario, workload: str) -> tuple[dict[str, Any], float]:
    cmd = [
        str(vfleet),
        "plan",
        "--cluster",
        str(REPO / "examples" / "clusters" / sc.cluster),
        "--model",
        sc.model,
        "--workload",
        workload,
        "--json",
    ]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - start
    if out.returncode:
        raise RuntimeError(f"vfleet plan failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout), elapsed


def fixed_length_workload(path: Path, preset: dict[str, Any]) -> None:
    """AIC's closed loop has fixed lengths: p99 = mean (JSON is valid YAML)."""
    doc = {
        "input_len": {"mean": preset["input_mean"], "p99": preset["input_mean"]},
        "output_len": {"mean": preset["output_mean"], "p99": preset["output_mean"]},
        "concurrency": preset["concurrency"],
        "slo": {"ttft_p99_ms": preset["ttft_p99_ms"], "tpot_p99_ms": preset["tpot_p99_ms"]},
    }
    path.write_text(json.dumps(doc))


def vfleet_label(plan: dict[str, Any]) -> str:
    return f"{plan['layout']} x{plan['replicas']}, {plan['max_num_seqs']} seqs"


# ---------------------------------------------------------------- AIC side


def aic_parallel(plan: dict[str, Any], is_moe: bool) -> dict[str, list[int]]:
    """vfleet's layout as AIC search candidates. vLLM: with --enable-expert-parallel
    moe_ep = tp x dp, else moe_tp = tp x dp; -dp is attention DP for MoE models."""
    tp, pp, dp = (
        plan["tensor_parallel_size"],
        plan["pipeline_parallel_size"],
        plan["data_parallel_size"],
    )
    width = tp * dp
    ep = bool(plan["enable_expert_parallel"]) and is_moe
    return {
        "agg_num_gpu_candidates": [tp * pp * dp],
        "agg_tp_candidates": [tp],
        "agg_pp_candidates": [pp],
        "agg_dp_candidates": [dp],
        "agg_moe_tp_candidates": [1 if ep or not is_moe else width],
        "agg_moe_ep_candidates": [width if ep else 1],
    }


def aic_label(row: dict[str, Any], total_gpus: int) -> str:
    """An AIC result row in vLLM terms (the same words as vfleet's labels)."""
    tp, pp, dp, moe_tp, moe_ep = (row[k] for k in ("tp", "pp", "dp", "moe_tp", "moe_ep"))
    text = f"TP{tp}" + (f" PP{pp}" if pp > 1 else "") + (f" DP{dp}" if dp > 1 else "")
    if moe_ep > 1 and moe_tp == 1:
        text += " EP"
    elif moe_ep > 1:
        text += f" (MoE TP{moe_tp} EP{moe_ep}: no vLLM flag)"
    replicas = max(1, total_gpus // max(row["num_total_gpus"], 1))
    return f"{text} x{replicas}, bs {row['bs']}"


class _FailureLog(logging.Handler):
    """AIC logs why an experiment failed and then raises a generic error; keep the why."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.errors: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "failed" in str(record.msg) and isinstance(record.args, tuple):
            self.errors += [a for a in record.args if isinstance(a, BaseException)]


def _short(exc: BaseException) -> str:
    text = str(exc).replace("sweep_agg: ", "").strip()
    text = text.split(". Try")[0].split("\n")[0]
    return f"{type(exc).__name__}: {text}"[:140]


def _best_row(config: dict[str, Any], failures: _FailureLog) -> dict[str, Any]:
    """One agg experiment; the best row by cluster tok/s/GPU, or the reason there is none."""
    from aiconfigurator.cli.api import cli_exp

    failures.errors.clear()
    start = time.perf_counter()
    try:
        result = cli_exp(config={"agg": config}, top_n=3)
    except Exception as exc:
        why = failures.errors[-1] if failures.errors else exc
        return {"error": _short(why), "seconds": round(time.perf_counter() - start, 1)}
    df = result.best_configs.get("agg")
    if df is None or df.empty:
        return {"error": "no feasible row", "seconds": round(time.perf_counter() - start, 1)}
    key = "tokens/s/gpu_cluster" if "tokens/s/gpu_cluster" in df.columns else "tokens/s/gpu"
    top = df.sort_values(key, ascending=False).iloc[0]
    row = {
        k: top[k].item() if hasattr(top[k], "item") else top[k]
        for k in (
            "tp",
            "pp",
            "dp",
            "moe_tp",
            "moe_ep",
            "bs",
            "global_bs",
            "ctx_tokens",
            "num_total_gpus",
            "ttft",
            "tpot",
            "kvcache",
            "memory",
        )
    }
    row["tok_s_gpu"] = float(top[key])
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def aic_job(job: dict[str, Any]) -> dict[str, Any]:
    """All AIC calls of one scenario (runs in a child process)."""
    import aiconfigurator.sdk.sweep as sweep

    failures = _FailureLog()
    logging.getLogger("aiconfigurator").addHandler(failures)
    base = {
        "serving_mode": "agg",
        "model_path": job["aic_model"],
        "system_name": job["system"],
        "backend_name": "vllm",
        "total_gpus": job["gpus"],
        "isl": job["isl"],
        "osl": job["osl"],
        "ttft": job["ttft"],
        "tpot": job["tpot"],
        "pareto_sweep": False,  # one TPOT target: ~3x faster, same pick
    }
    if job["kv_fp8"]:
        base["kvcache_quant_mode"] = "fp8"
    out: dict[str, Any] = {}
    if job["best"]:
        out["best"] = _best_row(base, failures)
    ours = {**base, **job["parallel"]}
    out["ours"] = _best_row(ours, failures)
    # vfleet's own batch: the sweep's batch schedule pinned to it, SLOs lifted.
    if job["bs"] > AIC_MAX_BATCH:
        out["at_bs"] = {"error": f"{job['bs']} seqs: above AIC's agg batch cap {AIC_MAX_BATCH}"}
        return out
    schedule = sweep._DEFAULT_AGG_BATCH_SCHEDULE
    sweep._DEFAULT_AGG_BATCH_SCHEDULE = [job["bs"]]
    try:
        pinned = {**ours, "ttft": LOOSE_SLO_MS, "tpot": LOOSE_SLO_MS}
        out["at_bs"] = _best_row(pinned, failures)
    finally:
        sweep._DEFAULT_AGG_BATCH_SCHEDULE = schedule
    return out


def _child(job: dict[str, Any], log_path: str, conn: Any) -> None:
    # AIC prints deprecation notes and data-fallback warnings: keep them in the log.
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    print(f"==== {job['name']}", flush=True)
    try:
        conn.send(aic_job(job))
    except BaseException as exc:
        traceback.print_exc()
        conn.send({"error": _short(exc)})
    finally:
        conn.close()


def run_aic(job: dict[str, Any], log_path: str, timeout_s: float) -> dict[str, Any]:
    """AIC in a child process: a crash or a hang costs one row, not the bench."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(job, log_path, child))
    proc.start()
    child.close()
    result: dict[str, Any] = {"error": f"timed out after {timeout_s:.0f} s"}
    if parent.poll(timeout_s):
        try:
            result = parent.recv()
        except EOFError:
            result = {"error": "AIC process died (see the log)"}
    elif not proc.is_alive():
        result = {"error": f"AIC process exited with {proc.exitcode} (see the log)"}
    if proc.is_alive():
        proc.terminate()
    proc.join(10)
    return result


# ---------------------------------------------------------------- report


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'scenario':<31} {'vfleet layout':<26} {'vfleet':>7} {'AIC best layout':<26} "
        f"{'AIC best':>8} {'AIC ours':>8} {'ours bs':>7} {'ratio':>6}  "
        f"{'AIC @ vfleet seqs':<34}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        plan, aic = r.get("plan"), r.get("aic") or {}
        if plan is None:
            lines.append(f"{r['name']:<31} vfleet failed: {r['error']}")
            continue
        ours_label = vfleet_label(plan)
        pred = plan["predicted"]["tokens_per_s_per_gpu"]
        if r["ethernet"]:
            continue  # the Ethernet line follows the table
        if "error" in aic and "best" not in aic:
            lines.append(
                f"{r['name']:<31} {ours_label:<26} {_fmt(pred):>7} AIC failed: {aic['error']}"
            )
            continue
        best, ours, at_bs = aic.get("best", {}), aic.get("ours", {}), aic.get("at_bs", {})
        best_label = best.get("error") or aic_label(best, r["gpus"])
        best_tok = best.get("tok_s_gpu")
        ours_tok = ours.get("tok_s_gpu")
        ratio = ours_tok / best_tok if ours_tok is not None and best_tok else None
        ratio_txt = (
            "-" if ratio is None else f"{ratio:.2f}" + ("" if ratio >= RATIO_TARGET else "!")
        )
        if "error" in ours:
            ours_txt, ours_bs = "-", ours["error"][:60]
        else:
            ours_txt, ours_bs = _fmt(ours_tok), str(ours["bs"])
        if "error" in at_bs:
            at_txt = at_bs["error"][:60]
        else:
            slo = at_bs["tpot"] <= r["tpot"] and at_bs["ttft"] <= r["ttft"]
            at_txt = f"{_fmt(at_bs['tok_s_gpu'])} tok/s/GPU, TPOT {at_bs['tpot']:.0f} ms" + (
                "" if slo else " (SLO miss)"
            )
        lines.append(
            f"{r['name']:<31} {ours_label:<26} {_fmt(pred):>7} {best_label:<26} "
            f"{_fmt(best_tok):>8} {ours_txt:>8} {ours_bs:>7} {ratio_txt:>6}  {at_txt}"
        )
    return "\n".join(lines)


def ethernet_lines(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        plan = r.get("plan")
        if not r["ethernet"] or plan is None:
            continue
        p = plan["predicted"]
        out.append(
            f"{r['name']}: AIC has no Ethernet model (inter-node links are one 50 GB/s-per-GPU "
            f"scalar: no TCP/RoCE, no congestion), so no AIC best. vfleet chose "
            f"{vfleet_label(plan)}: {p['tokens_per_s_per_gpu']:,.0f} tok/s/GPU predicted, "
            f"TPOT {p['tpot_ms']:.1f} ms, PP {p['comm_ms_per_step']['pp']:.2f} ms/step over "
            f"the 2.9 GB/s link; TP and expert traffic stay inside each NVLink node."
        )
        ours = (r.get("aic") or {}).get("ours", {})
        if "tok_s_gpu" in ours:
            out.append(
                f"  AIC scores that layout {ours['tok_s_gpu']:,.0f} tok/s/GPU "
                f"(bs {ours['bs']}/rank) as if the link were its 50 GB/s one: an upper bound, "
                "though only PP's small hidden-state sends cross it."
            )
        elif ours or "aic" in r:
            out.append(f"  AIC on that layout: {ours.get('error') or r['aic'].get('error')}")
    return out


def details(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        plan, aic = r.get("plan"), r.get("aic") or {}
        if plan is None:
            continue
        p = plan["predicted"]
        parts = [
            f"  {r['name']}: vfleet {r['vfleet_s']:.2f} s, predicts TPOT {p['tpot_ms']:.1f} ms "
            f"TTFT p99 {p['ttft_ms']:.0f} ms at {plan['max_num_seqs']} seqs/rank "
            f"(kv {plan['kv_cache_dtype']})"
        ]
        for key, what in (("best", "AIC best"), ("ours", "AIC ours"), ("at_bs", "AIC @seqs")):
            row = aic.get(key)
            if not row:
                continue
            if "error" in row:
                parts.append(f"    {what:<9} {row['error']} ({row.get('seconds', 0)} s)")
                continue
            parts.append(
                f"    {what:<9} {aic_label(row, r['gpus']):<34} TTFT {row['ttft']:6.0f} ms  "
                f"TPOT {row['tpot']:5.1f} ms  ctx_tokens {row['ctx_tokens']:>5}  "
                f"concurrency {row['global_bs'] * max(1, r['gpus'] // row['num_total_gpus']):>5}"
                f"  mem {row['memory']:.0f} GB  kv {row['kvcache']}  ({row['seconds']} s)"
            )
        if "error" in aic and len(aic) == 1:
            parts.append(f"    AIC: {aic['error']}")
        out += parts
    return out


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run scenarios whose name contains this text")
    ap.add_argument("--workload", default="chat", help="vfleet workload: preset or file")
    ap.add_argument(
        "--fixed-lengths",
        action="store_true",
        help="give vfleet p99 = mean lengths, like AIC's fixed ISL/OSL closed loop",
    )
    ap.add_argument("--timeout", type=float, default=240, help="AIC seconds per scenario")
    ap.add_argument(
        "--aic-venv", type=Path, default=Path(os.environ.get("AIC_VENV", DEFAULT_AIC_VENV))
    )
    ap.add_argument("--vfleet", type=Path, default=REPO / ".venv" / "bin" / "vfleet")
    ap.add_argument("--log", help="AIC log file (default: a temp file)")
    ap.add_argument("--json", help="also write the raw results here")
    args = ap.parse_args()

    import importlib.util

    if importlib.util.find_spec("aiconfigurator") is None:
        _reexec_under_aic(args.aic_venv)

    from importlib.metadata import version

    found = version("aiconfigurator")
    if found != AIC_VERSION:
        print(f"warning: aiconfigurator {found}, this bench was written for {AIC_VERSION}")
    tmp = Path(tempfile.mkdtemp(prefix="vfleet-aic-"))
    log_path = args.log or str(tmp / "aic.log")
    scenarios = [s for s in SCENARIOS if not args.only or args.only.lower() in s.name.lower()]
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for sc in scenarios:
        row: dict[str, Any] = {"name": sc.name, "ethernet": sc.ethernet, "gpus": sc.gpus}
        rows.append(row)
        workload = args.workload
        try:
            if args.fixed_lengths:
                preset, _ = run_vfleet(args.vfleet, sc, args.workload)
                workload = str(tmp / "workload.yaml")
                fixed_length_workload(Path(workload), preset["workload"])
            plan, row["vfleet_s"] = run_vfleet(args.vfleet, sc, workload)
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
            row["error"] = str(exc)
            print(f"[{sc.name}] {exc}", flush=True)
            continue
        row["plan"] = plan
        w = plan["workload"]
        row.update(ttft=w["ttft_p99_ms"], tpot=w["tpot_p99_ms"], ethernet=sc.ethernet)
        job = {
            "name": sc.name,
            "aic_model": sc.aic_model,
            "system": sc.aic_system,
            "gpus": sc.gpus,
            "isl": w["input_mean"],
            "osl": w["output_mean"],
            "ttft": w["ttft_p99_ms"],
            "tpot": w["tpot_p99_ms"],
            "kv_fp8": plan["kv_cache_dtype"] == "fp8",
            "parallel": aic_parallel(plan, sc.moe),
            "bs": plan["max_num_seqs"],
            "best": not sc.ethernet,  # AIC's best would be for a fabric that is not there
        }
        t0 = time.perf_counter()
        print(f"[{sc.name}] vfleet: {vfleet_label(plan)}; AIC sweeping ...", flush=True)
        row["aic"] = run_aic(job, log_path, args.timeout)
        row["aic_s"] = round(time.perf_counter() - t0, 1)
        print(f"[{sc.name}] AIC done in {row['aic_s']} s", flush=True)

    first = rows[0]["plan"]["workload"] if rows and rows[0].get("plan") else {}
    print()
    print(
        f"vfleet vs AIConfigurator {AIC_VERSION} (backend vllm 0.24.0 data, agg only); workload "
        f"ISL {first.get('input_mean')} OSL {first.get('output_mean')} (AIC: fixed lengths; "
        f"vfleet: {'fixed' if args.fixed_lengths else args.workload + ' preset p99s'}), TTFT "
        f"{first.get('ttft_p99_ms')} ms, TPOT {first.get('tpot_p99_ms')} ms; tok/s/GPU is "
        f"output tokens. KV dtype given to AIC = vfleet's choice."
    )
    print(
        "  AIC ours: vfleet's layout, batch per rank picked by AIC under the SLO (ours bs); "
        f"ratio = AIC ours / AIC best (target >= {RATIO_TARGET}, ! below).\n"
        "  AIC @ vfleet seqs: vfleet's layout at vfleet's max-num-seqs, SLO not enforced.\n"
        "  Layouts in vLLM terms: DP without EP shards experts TP over tp x dp (vLLM's "
        "default); bs is per DP rank. AIC has no DCP: DCP layouts are scored without it."
    )
    print()
    print(table(rows))
    print()
    for line in ethernet_lines(rows):
        print(line)
    print()
    print("Details (per-rank batch, AIC time per call):")
    for line in details(rows):
        print(line)
    total = time.perf_counter() - started
    print(f"\nTotal {total:.0f} s; AIC log: {log_path}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
