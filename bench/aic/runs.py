"""Running both sides: each scenario (vfleet's plan, AIC's searches and scores), and each
published measurement AIC can model, scored by both tools at its measured layout."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
from pathlib import Path
from typing import Any

from aic.calls import agg_job, disagg_job, measured_job, run_aic
from aic.layouts import aic_parallel, candidates, vllm_layout
from aic.scenarios import AIC_GPUS, AIC_MAX_BATCH, AIC_MODELS, AIC_VERSION, MEASURED, Scenario
from aic.tables import aic_bundles, model_is_moe
from aic.vfleet_side import (
    fixed_length_workload,
    run_estimate,
    run_vfleet,
    vfleet_cases,
    vfleet_label,
)


def run_scenario(
    sc: Scenario, args: argparse.Namespace, tmp: Path, log: str, systems: dict[str, Any]
) -> dict[str, Any]:
    row: dict[str, Any] = {"name": sc.name, "gpus": sc.gpus, "system": sc.aic_system}
    workload = args.workload
    try:
        if args.fixed_lengths:
            preset, _ = run_vfleet(args.vfleet, sc, args.workload, args.vllm_version)
            workload = str(tmp / "workload.yaml")
            fixed_length_workload(Path(workload), preset["workload"])
        plan, row["vfleet_s"] = run_vfleet(args.vfleet, sc, workload, args.vllm_version)
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        row["error"] = str(exc)
        print(f"[{sc.name}] {exc}", flush=True)
        return row
    row["plan"] = plan
    w = plan["workload"]
    row.update(ttft=w["ttft_p99_ms"], tpot=w["tpot_p99_ms"], isl=w["input_mean"])
    row["osl"] = w["output_mean"]
    job: dict[str, Any] = {
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
    }
    if sc.measured_link:
        link = systems[sc.name]
        job.update(system=link["system"], systems_path=link["path"], variants=link["variants"])
        row.update(system=link["system"], link=link)
    print(f"[{sc.name}] vfleet: {vfleet_label(plan)}; AIC agg sweep (PP allowed) ...", flush=True)
    t0 = time.perf_counter()
    row["aic"] = run_aic(agg_job, job, log, args.timeout)
    print(f"[{sc.name}] AIC disagg sweep ...", flush=True)
    row["aic"].update(run_aic(disagg_job, job, log, args.timeout))
    row["aic_s"] = round(time.perf_counter() - t0, 1)
    best = row["aic"].get("best", {})
    if "tp" in best:
        layout, flags = vllm_layout(*(best[k] for k in ("tp", "pp", "dp", "moe_tp", "moe_ep")))
        if not flags:
            row["vf_best"] = {"error": "MoE TP x EP mix: no vLLM flags for it"}
        else:
            point = {
                "layout": layout,
                "replicas": best["replicas"],
                "isl": w["input_mean"],
                "osl": w["output_mean"],
                "concurrency": best["concurrency"],
                "kv": plan["kv_cache_dtype"],
                "version": args.vllm_version,
            }
            row["vf_best"] = run_estimate(args.vfleet, sc, point)
    print(f"[{sc.name}] done, AIC {row['aic_s']} s", flush=True)
    return row


def _int(value: Any) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def aic_system_for(gpu: str) -> str | None:
    """The AIC system of a published GPU name: SXM H100/H200 only."""
    if "PCIe" in gpu or "NVL" in gpu:
        return None
    for needle, system in AIC_GPUS:
        if needle in gpu:
            return system
    return None


def _aic_model(raw: dict[str, Any], vf: dict[str, Any]) -> str | None:
    model = str(raw.get("model") or "")
    if aic_bundles(model):
        return model
    mapped = AIC_MODELS.get(vf.get("model", ""))
    return mapped if mapped and aic_bundles(mapped) else None


def classify(raw: dict[str, Any], vf: dict[str, Any]) -> dict[str, Any]:
    """A measured point as an AIC job, or the reason AIC cannot score it."""
    engine = str(raw.get("engine") or "")
    layout, workload = raw.get("layout") or {}, raw.get("workload") or {}
    if not engine.startswith("vllm") or "ROCm" in engine:
        return {"reason": f"engine {engine or '?'}: this part scores vLLM runs"}
    if layout.get("disaggregated") or "Dynamo" in str(raw.get("engine_version")):
        return {"reason": "disaggregated prefill/decode run: this part scores aggregated serving"}
    if not (raw.get("results") or {}).get("output_tokens_per_s"):
        return {"reason": "no output tokens/s published"}
    gpu = str(raw.get("gpu") or "")
    system = aic_system_for(gpu)
    if system is None:
        return {"reason": f"GPU '{gpu[:20]}': AIC {AIC_VERSION} has no system for it"}
    aic_model = _aic_model(raw, vf)
    if aic_model is None:
        return {"reason": f"model {str(raw.get('model'))[:44]}: AIC bundles no config for it"}
    dataset = str(workload.get("dataset") or "random").lower()
    if "sharegpt" in dataset:
        return {"reason": "ShareGPT: lengths vary per request, AIC takes one fixed ISL/OSL"}
    if not dataset.startswith("random"):
        return {"reason": f"dataset {dataset[:30]}: not fixed random lengths"}
    isl, osl = _int(workload.get("input_len")), _int(workload.get("output_len"))
    if not isl or not osl:
        return {"reason": "lengths not published"}
    concurrency = _int(workload.get("max_concurrency") or workload.get("concurrency"))
    rate = workload.get("request_rate")
    rate = float(rate) if isinstance(rate, int | float) else None
    prompts = _int(workload.get("num_prompts"))
    if concurrency is None and rate is not None:
        return {"reason": f"open loop at {rate:g} req/s with no concurrency cap: AIC has none"}
    if concurrency is None and not prompts:
        return {"reason": "all prompts at once, but the prompt count is not published"}
    tp = _int(layout.get("tensor_parallel_size")) or 1
    pp = _int(layout.get("pipeline_parallel_size")) or 1
    dp = _int(layout.get("data_parallel_size")) or 1
    ep = bool(layout.get("enable_expert_parallel") or layout.get("expert_parallel_size"))
    replicas = 1
    if "independent" in str(layout.get("note", "")) or "replicas" in str(raw.get("layout_label")):
        replicas, dp = dp, 1
    is_moe = model_is_moe(aic_model)
    if not is_moe and dp > 1:
        replicas, dp = replicas * dp, 1  # DP of a dense model: independent engines
    ranks = replicas * dp
    job: dict[str, Any] = {
        "name": raw["id"],
        "aic_model": aic_model,
        "system": system,
        "worker_gpus": tp * pp * dp,
        "isl": isl,
        "osl": osl,
        "kv_fp8": str(raw.get("kv_cache_dtype") or "").lower().startswith("fp8"),
        "parallel": candidates(tp, pp, dp, ep, is_moe),
        "quant": {},
        "batch": None,
        "cap": None,
    }
    if "awq" in str(raw.get("quantization") or "").lower():  # W4A16
        job["quant"] = {"gemm_quant_mode": "int4_wo", "moe_quant_mode": "int4_wo"}
    if concurrency is not None:
        job["batch"] = max(1, round(concurrency / ranks))
        load = f"c{concurrency}" + (f" @{rate:g}/s" if rate else "")
    else:
        seqs = vf.get("max_num_seqs") or _int((raw.get("scheduler") or {}).get("max_num_seqs"))
        job["cap"] = min(math.ceil((prompts or 1) / ranks), seqs or AIC_MAX_BATCH, AIC_MAX_BATCH)
        load = f"burst {prompts}"
    if (job["batch"] or 0) > AIC_MAX_BATCH:
        return {"reason": f"{job['batch']} seqs per rank: above AIC's agg batch cap"}
    par = job["parallel"]
    a2a = layout.get("all2all_backend") if ep else None
    label, _ = vllm_layout(
        tp, pp, dp, par["agg_moe_tp_candidates"][0], par["agg_moe_ep_candidates"][0]
    )
    return {
        "job": job,
        "replicas": replicas,
        "rate": rate,
        "osl": osl,
        "burst": concurrency is None,
        "load": load,
        "layout": label + (f" x{replicas}" if replicas > 1 else ""),
        "lengths": f"{isl}/{osl}",
        "system": system,
        "all2all": a2a if a2a not in (None, "allgather_reducescatter") else None,
    }


def run_measured(args: argparse.Namespace, log: str) -> dict[str, Any]:
    python = args.vfleet.parent / "python"
    raws = json.loads(MEASURED.read_text())["cases"]
    try:
        info = vfleet_cases(python, [])
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        print(f"[measured] {exc}", flush=True)
        info = {}
    points = [(raw, classify(raw, info.get(raw["id"], {}))) for raw in raws]
    wanted = [raw["id"] for raw, c in points if "job" in c]
    print(f"[measured] {len(wanted)} of {len(raws)} points for AIC; vfleet estimates ...")
    try:
        vf = vfleet_cases(python, wanted) if info else {}
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        print(f"[measured] {exc}", flush=True)
        vf = {}
    scored, skipped = [], []
    for raw, c in points:
        if "reason" in c:
            skipped.append({"id": raw["id"], "reason": c["reason"]})
            continue
        t0 = time.perf_counter()
        aic = run_aic(measured_job, c["job"], log, args.timeout).get("row") or {}
        point = {k: v for k, v in c.items() if k != "job"}
        point.update(id=raw["id"], measured=float(raw["results"]["output_tokens_per_s"]))
        point["vf"] = vf.get(raw["id"], {})
        point["aic"] = aic
        if "tok_s_worker" in aic:
            closed = aic["tok_s_worker"] * c["replicas"]
            offered = c["rate"] * c["osl"] if c["rate"] else math.inf
            point["aic_tok_s"] = min(closed, offered)
            point["rate_bound"] = offered < closed
        scored.append(point)
        print(f"[measured] {raw['id']}: {time.perf_counter() - t0:.1f} s", flush=True)
    return {"scored": scored, "skipped": skipped}
