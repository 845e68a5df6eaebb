"""AIC's side: one experiment per call, each group of calls in a forked child process so that
a crash or a hang costs one row, not the bench."""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
import traceback
from collections.abc import Callable
from typing import Any

from aic.layouts import row_candidates
from aic.scenarios import AIC_MAX_BATCH, GPU_CANDIDATES, LOOSE_SLO_MS, PP_CANDIDATES


class _FailureLog(logging.Handler):
    """AIC logs why an experiment failed and then raises a generic error; keep the why."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.errors: list[BaseException] = []
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "failed" in str(record.msg) and isinstance(record.args, tuple):
            self.errors += [a for a in record.args if isinstance(a, BaseException)]
        try:
            text = record.getMessage()
        except (TypeError, ValueError):
            return
        if "failed:" in text:
            self.messages.append(text.split("failed:", 1)[1])


def _short(exc: BaseException | str) -> str:
    if isinstance(exc, BaseException):
        exc = f"{type(exc).__name__}: {exc}"
    text = exc.replace("sweep_agg: ", "").replace("sweep_disagg: ", "").strip()
    text = text.replace("No feasible configurations found for the given experiments.", "none")
    return text.split(". Try")[0].split("\n")[0][:160]


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


AGG_KEYS = (
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
ROLE_KEYS = ("tp", "pp", "dp", "moe_tp", "moe_ep", "bs", "workers")


def _agg_row(top: Any, total_gpus: int) -> dict[str, Any]:
    row = {k: _plain(top[k]) for k in AGG_KEYS}
    row["replicas"] = max(1, total_gpus // max(row["num_total_gpus"], 1))
    row["tok_s_worker"] = float(top["tokens/s/gpu"]) * row["num_total_gpus"]
    row["tok_s"] = row["tok_s_worker"] * row["replicas"]  # whole cluster, output tokens
    row["concurrency"] = row["global_bs"] * row["replicas"]
    return row


def _disagg_row(top: Any, total_gpus: int) -> dict[str, Any]:
    row: dict[str, Any] = {
        role: {k: _plain(top[f"({role[0]}){k}"]) for k in ROLE_KEYS}
        for role in ("prefill", "decode")
    }
    row.update({k: _plain(top[k]) for k in ("num_total_gpus", "ttft", "tpot", "concurrency")})
    row["replicas"] = max(1, total_gpus // max(row["num_total_gpus"], 1))
    row["tok_s"] = float(top["tokens/s/gpu_cluster"]) * total_gpus
    row["concurrency"] = row["concurrency"] * row["replicas"]
    return row


def _experiment(
    mode: str, config: dict[str, Any], failures: _FailureLog, total_gpus: int
) -> dict[str, Any]:
    """One AIC experiment; its best row by cluster tok/s/GPU, or the reason there is none."""
    from aiconfigurator.cli.api import cli_exp

    failures.errors.clear()
    failures.messages.clear()
    start = time.perf_counter()
    try:
        result = cli_exp(config={mode: config}, top_n=3)
    except Exception as exc:
        why: BaseException | str = exc
        if failures.errors:
            why = failures.errors[-1]
        elif failures.messages:
            why = failures.messages[-1]
        return {"error": _short(why), "seconds": round(time.perf_counter() - start, 1)}
    df = result.best_configs.get(mode)
    if df is None or df.empty:
        return {"error": "no feasible row", "seconds": round(time.perf_counter() - start, 1)}
    key = "tokens/s/gpu_cluster" if "tokens/s/gpu_cluster" in df.columns else "tokens/s/gpu"
    top = df.sort_values(key, ascending=False).iloc[0]
    row = _agg_row(top, total_gpus) if mode == "agg" else _disagg_row(top, total_gpus)
    if mode == "agg":
        fronts = [f for f in (df, result.pareto_fronts.get(mode)) if f is not None and len(f)]
        row["min_worker_gpus"] = int(min(f["num_total_gpus"].min() for f in fronts))
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def _pinned(
    config: dict[str, Any], batches: list[int], failures: _FailureLog, total_gpus: int
) -> dict[str, Any]:
    """The agg sweep with its batch schedule replaced by `batches` and the SLOs lifted."""
    import aiconfigurator.sdk.sweep as sweep

    schedule = sweep._DEFAULT_AGG_BATCH_SCHEDULE
    sweep._DEFAULT_AGG_BATCH_SCHEDULE = batches
    try:
        loose = {**config, "ttft": LOOSE_SLO_MS, "tpot": LOOSE_SLO_MS}
        return _experiment("agg", loose, failures, total_gpus)
    finally:
        sweep._DEFAULT_AGG_BATCH_SCHEDULE = schedule


def _setup(job: dict[str, Any]) -> _FailureLog:
    """In the child: the failure log, and the run-time systems folder when there is one."""
    failures = _FailureLog()
    logging.getLogger("aiconfigurator").addHandler(failures)
    logging.getLogger("aiconfigurator_core").addHandler(failures)
    if job.get("systems_path"):
        from aiconfigurator.sdk import perf_database

        perf_database.set_systems_paths([job["systems_path"], "default"])
    return failures


def _kv_modes(job: dict[str, Any], prefix: str = "") -> dict[str, str]:
    return {f"{prefix}kvcache_quant_mode": "fp8" if job["kv_fp8"] else "bfloat16"}


def agg_job(job: dict[str, Any]) -> dict[str, Any]:
    """One scenario's aggregated-serving AIC calls (runs in a child process)."""
    failures = _setup(job)
    gpus = job["gpus"]
    base = {
        "serving_mode": "agg",
        "model_path": job["aic_model"],
        "system_name": job["system"],
        "backend_name": "vllm",
        "total_gpus": gpus,
        "isl": job["isl"],
        "osl": job["osl"],
        "ttft": job["ttft"],
        "tpot": job["tpot"],
        "pareto_sweep": False,  # one TPOT target: ~3x faster, same pick
        **_kv_modes(job),
    }
    search = {
        "agg_pp_candidates": [p for p in PP_CANDIDATES if p <= gpus],
        "agg_num_gpu_candidates": [n for n in GPU_CANDIDATES if n <= gpus],
    }
    out: dict[str, Any] = {"best": _experiment("agg", {**base, **search}, failures, gpus)}
    ours = {**base, **job["parallel"]}
    out["ours"] = _experiment("agg", ours, failures, gpus)
    # vfleet's own batch: the sweep's batch schedule pinned to it, SLOs lifted.
    if job["bs"] > AIC_MAX_BATCH:
        out["at_bs"] = {"error": f"{job['bs']} seqs: above AIC's agg batch cap {AIC_MAX_BATCH}"}
    else:
        out["at_bs"] = _pinned(ours, [job["bs"]], failures, gpus)
    # The same two layouts on the other link models (the Ethernet scenario).
    best = out["best"]
    for label, system in job.get("variants", []):
        for key, parallel in (("ours", job["parallel"]), ("best", best)):
            if "error" in parallel:
                continue
            if key == "best":
                parallel = row_candidates(parallel)
            config = {**base, "system_name": system, **parallel}
            out[f"{key}@{label}"] = _experiment("agg", config, failures, gpus)
    return out


def disagg_job(job: dict[str, Any]) -> dict[str, Any]:
    """AIC's own disaggregated search for one scenario (runs in a child process)."""
    failures = _setup(job)
    config = {
        "serving_mode": "disagg",
        "prefill_model_path": job["aic_model"],
        "decode_model_path": job["aic_model"],
        "prefill_system_name": job["system"],
        "decode_system_name": job["system"],
        "prefill_backend_name": "vllm",
        "decode_backend_name": "vllm",
        "total_gpus": job["gpus"],
        "isl": job["isl"],
        "osl": job["osl"],
        "ttft": job["ttft"],
        "tpot": job["tpot"],
        "pareto_sweep": False,
        **_kv_modes(job, "prefill_"),
        **_kv_modes(job, "decode_"),
    }
    return {"disagg": _experiment("disagg", config, failures, job["gpus"])}


def measured_job(job: dict[str, Any]) -> dict[str, Any]:
    """AIC's score of one measured point at its layout and batch (runs in a child process)."""
    failures = _setup(job)
    config = {
        "serving_mode": "agg",
        "model_path": job["aic_model"],
        "system_name": job["system"],
        "backend_name": "vllm",
        "total_gpus": job["worker_gpus"],
        "isl": job["isl"],
        "osl": job["osl"],
        "pareto_sweep": False,
        **_kv_modes(job),
        **job["parallel"],
        **job["quant"],
    }
    if job["batch"]:
        batches = [job["batch"]]
    else:  # all prompts at once: AIC's best batch up to the engine's cap (saturation)
        import aiconfigurator.sdk.sweep as sweep

        cap = job["cap"]
        batches = sorted({b for b in sweep._DEFAULT_AGG_BATCH_SCHEDULE if b <= cap} | {cap})
    return {"row": _pinned(config, batches, failures, job["worker_gpus"])}


def _child(fn: Callable[[dict[str, Any]], dict[str, Any]], job: dict, log: str, conn: Any) -> None:
    # AIC prints deprecation notes and data-fallback warnings: keep them in the log.
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    print(f"==== {fn.__name__} {job['name']}", flush=True)
    try:
        conn.send(fn(job))
    except BaseException as exc:
        traceback.print_exc()
        conn.send({"error": _short(exc)})
    finally:
        conn.close()


def run_aic(
    fn: Callable[[dict[str, Any]], dict[str, Any]], job: dict[str, Any], log: str, timeout: float
) -> dict[str, Any]:
    """AIC in a child process: a crash or a hang costs one row, not the bench."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, job, log, child))
    proc.start()
    child.close()
    result: dict[str, Any] = {"error": f"timed out after {timeout:.0f} s"}
    if parent.poll(timeout):
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
