"""vfleet's plan next to NVIDIA AIConfigurator's (AIC 0.12.0, vLLM 0.24.0 data), both ways.

Part 1, per scenario (a cluster file and a model), at the same fixed ISL/OSL and TTFT/TPOT
targets on both sides (vfleet gets a workload file with p99 = mean, AIC's closed loop has
fixed lengths) and the same vLLM release (AIC's data release, 0.24.0, unless --vllm-version):
  - vfleet's pick (`vfleet plan --json`, the controller's venv): its layout and its own
    predicted output tok/s, next to AIC's score of that same layout (batch per rank picked by
    AIC under the SLOs) and at vfleet's own max-num-seqs (SLOs lifted);
  - AIC's best aggregated layout, searched with pipeline parallelism allowed (PP 1-8 where
    the GPU count allows), with vfleet's prediction for it (`vfleet estimate --json` at the
    concurrency AIC reports: batch per rank x DP ranks x replicas);
  - AIC's best disaggregated (prefill/decode) configuration from AIC's own disagg search, or
    why there is none;
  - the ratio AIC's score of vfleet's pick / AIC's best aggregated layout.
The Ethernet scenario (2 x 8 H100 over 25 GbE) runs on an AIC system written at run time: a
copy of AIC's h100_sxm with `node.inter_node_bw` set to the cluster file's measured all-reduce
bus bandwidth; both layouts are also re-scored at AIC's stock 50 GB/s and at the per-GPU share
of the measured link, to show how much AIC's answer depends on the link.

Part 2, both tools against published measurements (controller/src/vfleet/data/perf_cases/
measured.json): every aggregated vLLM run on H100/H200 SXM with a model AIC bundles, fixed
random lengths and a fixed concurrency (or all prompts at once), scored at its measured layout
by AIC and by vfleet (vfleet.perfcases + vfleet.plan.estimate, in the controller's venv); each
tool's |error| and the median |error| over the points both model. Points AIC cannot model are
listed with the reason.

Every AIC score comes from a single-candidate sweep (`cli_exp`), the path AIC's own default
sweep takes; `cli_estimate` disagrees with it for EP layouts (docs: field-practices §11).

Run from the repository root: `python bench/plan_vs_aiconfigurator.py`. AIC lives in its own
venv (scripts/install-aiconfigurator.sh, run here when missing); the script re-executes
itself under that venv's python and calls vfleet through the controller's .venv.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import math
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
AIC_VERSION = "0.12.0"
AIC_VLLM = "0.24.0"  # the vLLM release AIC 0.12.0's vllm data describes
DEFAULT_AIC_VENV = Path("/var/cache/vfleet") / f"aic-{AIC_VERSION}"
MEASURED = REPO / "controller" / "src" / "vfleet" / "data" / "perf_cases" / "measured.json"
REEXEC_MARK = "VFLEET_AIC_BENCH_REEXEC"
RATIO_TARGET = 0.95
LOOSE_SLO_MS = 1e9  # "no SLO" for scores at a pinned batch
AIC_MAX_BATCH = 512  # sweep_agg's max_batch_size default in 0.12.0
PP_CANDIDATES = (1, 2, 4, 8)
GPU_CANDIDATES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Scenario:
    name: str
    cluster: str  # examples/clusters/*.yaml
    model: str  # vfleet catalog id
    aic_model: str  # AIC's bundled config of the same architecture
    aic_system: str
    gpus: int
    moe: bool
    # AIC's stock inter-node link is InfiniBand-class; True: give AIC the cluster file's
    # measured inter-node bus bandwidth instead (a copy of aic_system written at run time).
    measured_link: bool = False


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
    Scenario(
        "DeepSeek-V3, 2 x 8 H100 25GbE",
        "2x8-h100-25gbe.yaml",
        "deepseek-ai/DeepSeek-V3",
        "deepseek-ai/DeepSeek-V3",
        "h100_sxm",
        16,
        True,
        measured_link=True,
    ),
)

# vfleet catalog id -> AIC's bundled config of the same checkpoint family (measured points
# whose own model id AIC bundles use it directly).
AIC_MODELS = {
    "deepseek-ai/DeepSeek-V3": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1": "deepseek-ai/DeepSeek-R1",
    "deepseek-ai/DeepSeek-V3.2": "deepseek-ai/DeepSeek-V3.2",
    "Qwen/Qwen3-235B-A22B-FP8": "Qwen/Qwen3-235B-A22B-FP8",
    "Qwen/Qwen3-235B-A22B": "Qwen/Qwen3-235B-A22B",
    "openai/gpt-oss-120b": "openai/gpt-oss-120b",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B-Instruct": "meta-llama/Meta-Llama-3.1-405B",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mistralai/Mixtral-8x7B-v0.1",
}
# Published GPU names -> AIC systems (checked in this order: "H200" before "H20").
AIC_GPUS = (("H200", "h200_sxm"), ("H100", "h100_sxm"))


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


def aic_root() -> Path:
    """AIC's packaged data: systems/*.yaml, systems/data/, model_configs/."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent


def aic_systems() -> list[str]:
    return sorted(
        p.stem
        for p in (aic_root() / "systems").glob("*.yaml")
        if (aic_root() / "systems" / "data" / p.stem).is_dir()
    )


def aic_bundles(model: str) -> bool:
    return (aic_root() / "model_configs" / f"{model.replace('/', '--')}_config.json").is_file()


def write_link_system(folder: Path, base: str, gbps: float) -> str:
    """A copy of AIC's `base` system whose inter-node link is `gbps` GB/s; returns its name."""
    import yaml

    stock = aic_root() / "systems"
    spec = yaml.safe_load((stock / f"{base}.yaml").read_text())
    if "inter_node_bw" not in spec.get("node", {}):
        raise RuntimeError(f"AIC {base}.yaml has no node.inter_node_bw: the link cannot be set")
    name = f"{base}_inter{gbps:.3g}GBps".replace(".", "p")
    spec["node"]["inter_node_bw"] = round(gbps * 1e9)
    spec["data_dir"] = str(stock / spec["data_dir"])  # the stock silicon data, absolute
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return name


def cluster_link(cluster: str) -> tuple[float, int]:
    """The cluster file's measured inter-node all-reduce bus bandwidth and GPUs per node."""
    import yaml

    doc = yaml.safe_load((REPO / "examples" / "clusters" / cluster).read_text())
    return float(doc["inter_node"]["busbw_GBps"]), int(doc["gpus_per_node"])


# ---------------------------------------------------------------- vfleet side


def run_vfleet(
    vfleet: Path, sc: Scenario, workload: str, version: str
) -> tuple[dict[str, Any], float]:
    cmd = [
        str(vfleet),
        "plan",
        "--cluster",
        str(REPO / "examples" / "clusters" / sc.cluster),
        "--model",
        sc.model,
        "--workload",
        workload,
        "--vllm-version",
        version,
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


def run_estimate(vfleet: Path, sc: Scenario, point: dict[str, Any]) -> dict[str, Any]:
    """`vfleet estimate --json` for one layout at one operating point (or the reason not)."""
    cmd = [
        str(vfleet),
        "estimate",
        "--cluster",
        str(REPO / "examples" / "clusters" / sc.cluster),
        "--model",
        sc.model,
        "--layout",
        point["layout"],
        "--replicas",
        str(point["replicas"]),
        "--input-len",
        str(point["isl"]),
        "--output-len",
        str(point["osl"]),
        "--concurrency",
        str(point["concurrency"]),
        "--kv-cache-dtype",
        point["kv"],
        "--vllm-version",
        point["version"],
        "--json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode:
        lines = (out.stderr or out.stdout).strip().splitlines()
        return {"error": (lines[-1] if lines else f"exit {out.returncode}")[:160]}
    doc = json.loads(out.stdout)
    return {
        "tok_s": doc["output_tokens_per_s"]["median"],
        "tpot": doc["tpot_ms"]["median"],
        "ttft_p99": doc["ttft_ms"]["p99"],
        "running": doc["running_seqs"],
        "reject": doc.get("plan_would_reject"),
    }


# Runs in the controller's venv: every measured point as vfleet reads it (the estimate call
# vfleet.perfcases builds, or why not), and vfleet's estimate for the ids on the command line.
VFLEET_CASES = """
import json, sys
from vfleet.errors import UserError
from vfleet.plan.estimate import estimate
sys.path.insert(0, "tests")  # cwd is the repository root; tests/support is no product code
from support.perfcases import load_cases
from vfleet.catalog.releases import batch_defaults

wanted = set(sys.argv[1:])
out = {}
for case in load_cases():
    req = case.request
    row = {"skip": case.skip}
    if req is not None:
        seqs = req.max_num_seqs or batch_defaults(
            req.traits.version, req.cluster.gpu.memory_gib, req.cluster.gpu.name,
            req.max_model_len or req.spec.max_position_embeddings)[0]
        row.update(model=req.spec.name, layout=req.layout.label, replicas=req.replicas,
                   max_num_seqs=seqs, version=req.traits.label)
        if case.id in wanted:
            try:
                est = estimate(req)
            except UserError as exc:
                row["error"] = str(exc)
            else:
                row.update(tok_s=est.output_tokens_per_s, tpot=est.tpot_ms["median"])
    out[case.id] = row
print(json.dumps(out))
"""


def vfleet_cases(python: Path, ids: list[str]) -> dict[str, dict[str, Any]]:
    out = subprocess.run(
        [str(python), "-c", VFLEET_CASES, *ids],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    if out.returncode:
        raise RuntimeError(f"vfleet estimates failed: {out.stderr.strip().splitlines()[-3:]}")
    return json.loads(out.stdout)


# ---------------------------------------------------------------- AIC side


def aic_parallel(plan: dict[str, Any], is_moe: bool) -> dict[str, list[int]]:
    """vfleet's layout as AIC search candidates. vLLM: with --enable-expert-parallel
    moe_ep = tp x dp, else moe_tp = tp x dp; -dp is attention DP for MoE models."""
    return _candidates(
        plan["tensor_parallel_size"],
        plan["pipeline_parallel_size"],
        plan["data_parallel_size"],
        bool(plan["enable_expert_parallel"]),
        is_moe,
    )


def _candidates(tp: int, pp: int, dp: int, ep: bool, is_moe: bool) -> dict[str, list[int]]:
    width = tp * dp
    ep = ep and is_moe
    return {
        "agg_num_gpu_candidates": [tp * pp * dp],
        "agg_tp_candidates": [tp],
        "agg_pp_candidates": [pp],
        "agg_dp_candidates": [dp],
        "agg_moe_tp_candidates": [1 if ep or not is_moe else width],
        "agg_moe_ep_candidates": [width if ep else 1],
    }


def row_candidates(row: dict[str, Any]) -> dict[str, list[int]]:
    """An AIC result row's own parallel tuple as single-candidate lists."""
    return {
        "agg_num_gpu_candidates": [row["num_total_gpus"]],
        **{f"agg_{k}_candidates": [row[k]] for k in ("tp", "pp", "dp", "moe_tp", "moe_ep")},
    }


def vllm_layout(tp: int, pp: int, dp: int, moe_tp: int, moe_ep: int) -> tuple[str, bool]:
    """An AIC parallel tuple in vLLM words; False when vLLM has no flags for it."""
    text = f"TP{tp}" + (f" PP{pp}" if pp > 1 else "") + (f" DP{dp}" if dp > 1 else "")
    if moe_ep > 1 and moe_tp == 1:
        return text + " EP", True
    if moe_ep > 1:
        return text + f" (MoE TP{moe_tp} EP{moe_ep})", False
    return text, True


def aic_label(row: dict[str, Any]) -> str:
    """An AIC agg row in vLLM terms (the same words as vfleet's labels)."""
    text, _ = vllm_layout(*(row[k] for k in ("tp", "pp", "dp", "moe_tp", "moe_ep")))
    return f"{text} x{row['replicas']}"


def disagg_label(row: dict[str, Any]) -> str:
    parts = []
    for tag, role in (("P", row["prefill"]), ("D", row["decode"])):
        text, _ = vllm_layout(*(role[k] for k in ("tp", "pp", "dp", "moe_tp", "moe_ep")))
        parts.append(f"{tag} {text} x{role['workers']}")
    reps = f" (x{row['replicas']})" if row["replicas"] > 1 else ""
    return " + ".join(parts) + reps


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


# ---------------------------------------------------------------- scenarios


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


def link_systems(scenarios: list[Scenario], folder: Path) -> dict[str, Any]:
    """The run-time AIC systems for scenarios whose inter-node link AIC must take measured."""
    out: dict[str, Any] = {}
    for sc in scenarios:
        if not sc.measured_link:
            continue
        busbw, per_node = cluster_link(sc.cluster)
        main = write_link_system(folder, sc.aic_system, busbw)
        share = write_link_system(folder, sc.aic_system, busbw / per_node)
        out[sc.name] = {
            "path": str(folder),
            "system": main,
            "busbw": busbw,
            "share": busbw / per_node,
            "variants": [("stock", sc.aic_system), ("share", share)],
        }
    return out


# ---------------------------------------------------------------- measured points


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


def model_is_moe(aic_model: str) -> bool:
    path = aic_root() / "model_configs" / f"{aic_model.replace('/', '--')}_config.json"
    cfg = json.loads(path.read_text())
    cfg = {**cfg, **(cfg.get("text_config") or {})}
    return any(cfg.get(k) for k in ("num_experts", "n_routed_experts", "num_local_experts"))


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
        "parallel": _candidates(tp, pp, dp, ep, is_moe),
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


# ---------------------------------------------------------------- report


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _err(pred: float | None, meas: float) -> float | None:
    return None if pred is None else abs(pred - meas) / meas


def scenario_table(rows: list[dict[str, Any]]) -> list[str]:
    head = (
        f"{'scenario':<31} {'layout from':<16} {'layout':<38} {'vfleet':>8} {'vf TPOT':>7} "
        f"{'AIC':>8} {'AIC TPOT':>8} {'AIC bs/rank':>11}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        plan, aic = r.get("plan"), r.get("aic") or {}
        if plan is None:
            lines.append(f"{r['name']:<31} vfleet failed: {r['error']}")
            continue
        p = plan["predicted"]
        ours, best, dis = aic.get("ours", {}), aic.get("best", {}), aic.get("disagg", {})
        vf_best = r.get("vf_best", {})

        def line(name: str, who: str, layout: str, vf: Any, vtp: Any, row: dict) -> str:
            if "error" in row:
                tail = f"{'-':>8} {'-':>8}  AIC: {row['error'][:70]}"
            else:
                bs = row.get("bs")
                if "decode" in row:
                    bs = f"P{row['prefill']['bs']}/D{row['decode']['bs']}"
                tail = f"{_fmt(row['tok_s']):>8} {row['tpot']:>8.1f} {bs!s:>11}"
            return f"{name:<31} {who:<16} {layout[:38]:<38} {vf:>8} {vtp:>7} {tail}"

        lines.append(
            line(
                r["name"],
                "vfleet plan",
                vfleet_label(plan),
                _fmt(p["tokens_per_s"]),
                f"{p['tpot_ms']:.1f}",
                ours,
            )
        )
        if "error" in best:
            lines.append(line("", "AIC best agg", "-", "-", "-", best))
        else:
            vf_txt = _fmt(vf_best.get("tok_s")) if "tok_s" in vf_best else "-"
            vtp = f"{vf_best['tpot']:.1f}" if "tpot" in vf_best else "-"
            lines.append(line("", "AIC best agg", aic_label(best), vf_txt, vtp, best))
            if "error" in vf_best:
                lines.append(f"{'':<31} {'':<16}   vfleet estimate: {vf_best['error'][:90]}")
            elif vf_best.get("reject"):
                why = vf_best["reject"]
                lines.append(f"{'':<31} {'':<16}   vfleet's planner rejects it: {why}")
        if "error" in dis:
            lines.append(line("", "AIC best disagg", "-", "-", "-", dis))
            if dis.get("why"):
                lines.append(f"{'':<31} {'':<16}   {dis['why']}")
        else:
            lines.append(line("", "AIC best disagg", disagg_label(dis), "n/a", "-", dis))
        lines.append(f"{'':<31} {'':<16}   {ratio_text(r)}")
    return lines


def ratio_text(r: dict[str, Any]) -> str:
    aic = r.get("aic") or {}
    ours, best, dis = aic.get("ours", {}), aic.get("best", {}), aic.get("disagg", {})
    parts = []
    if "tok_s" in ours and best.get("tok_s"):
        ratio = ours["tok_s"] / best["tok_s"]
        flag = "" if ratio >= RATIO_TARGET else "!"
        parts.append(f"AIC's score of vfleet's pick / AIC's best agg = {ratio:.2f}{flag}")
    else:
        parts.append("AIC's score of vfleet's pick / AIC's best agg = -")
    if "tok_s" in dis and best.get("tok_s"):
        parts.append(f"AIC disagg / agg = {dis['tok_s'] / best['tok_s']:.2f}")
    vf_best = r.get("vf_best", {})
    if "tok_s" in vf_best and r["plan"]["predicted"]["tokens_per_s"]:
        mirror = vf_best["tok_s"] / r["plan"]["predicted"]["tokens_per_s"]
        parts.append(f"vfleet's estimate of AIC's best / vfleet's pick = {mirror:.2f}")
    return "; ".join(parts)


def disagg_reasons(rows: list[dict[str, Any]]) -> None:
    """Why AIC's disagg search found nothing, where the agg search says why."""
    for r in rows:
        aic = r.get("aic") or {}
        dis, best = aic.get("disagg", {}), aic.get("best", {})
        if "error" not in dis or "min_worker_gpus" not in best:
            continue
        need = best["min_worker_gpus"]
        if 2 * need > r["gpus"]:
            dis["why"] = (
                f"why: AIC's smallest feasible agg worker has {need} GPUs (the weights need "
                f"them); disagg needs a prefill and a decode worker: {2 * need} > {r['gpus']} GPUs"
            )


def link_lines(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        link, aic = r.get("link"), r.get("aic") or {}
        if not link or r.get("plan") is None:
            continue
        out.append(
            f"{r['name']}: AIC system {link['system']} = AIC's h100_sxm with inter_node_bw "
            f"{link['busbw']:g} GB/s (the cluster file's measured all-reduce busbw). AIC reads "
            f"the field per GPU (stock: 50 GB/s per GPU = one 400G NIC each), so a node's "
            f"single 25 GbE link shared by its GPUs is {link['share']:.2f} GB/s per GPU."
        )
        out.append(f"  {'layout':<38} {'stock 50 GB/s':>14} {'measured':>10} {'per-GPU share':>14}")
        for key, who in (("ours", "vfleet's pick"), ("best", "AIC's best agg")):
            row = aic.get(key, {})
            label = aic_label(row) if "tp" in row else who
            cells = [aic.get(f"{key}@stock", {}), row, aic.get(f"{key}@share", {})]
            text = [_fmt(c.get("tok_s")) if "tok_s" in c else "-" for c in cells]
            out.append(f"  {label[:38]:<38} {text[0]:>14} {text[1]:>10} {text[2]:>14}   ({who})")
        out.append(
            "  (AIC tok/s under the same SLOs; AIC's disagg does not price the KV-cache transfer "
            "between prefill and decode workers, which here would cross the 25 GbE link.)"
        )
    return out


def measured_table(result: dict[str, Any]) -> list[str]:
    head = (
        f"{'point':<50} {'layout':<16} {'ISL/OSL':>10} {'load':>12} {'measured':>9} "
        f"{'AIC':>9} {'vfleet':>9} {'AIC err':>8} {'vf err':>7} {'AIC bs/ctx':>10}  note"
    )
    lines = [head, "-" * len(head)]
    both, both_fixed = [], []
    for p in result["scored"]:
        meas, vf, aic = p["measured"], p["vf"], p["aic"]
        aic_tok, vf_tok = p.get("aic_tok_s"), vf.get("tok_s")
        e_aic, e_vf = _err(aic_tok, meas), _err(vf_tok, meas)
        bs_ctx = f"{aic['bs']}/{aic['ctx_tokens']}" if "bs" in aic else "-"
        notes = []
        if "error" in aic:
            notes.append(f"AIC: {aic['error'][:110]}")
        if p.get("all2all"):
            notes.append(f"AIC has no {p['all2all']} all2all model")
        if p.get("rate_bound"):
            notes.append("AIC = offered load (rate < AIC's closed-loop capacity)")
        if "error" in vf:
            notes.append(f"vfleet: {vf['error'][:60]}")
        elif vf.get("skip"):
            notes.append(f"vfleet: {vf['skip'][:60]}")
        if e_aic is not None and e_vf is not None:
            both.append((e_aic, e_vf))
            if not p["burst"]:
                both_fixed.append((e_aic, e_vf))
        lines.append(
            f"{p['id'][:50]:<50} {p['layout'][:16]:<16} {p['lengths']:>10} {p['load']:>12} "
            f"{_fmt(meas):>9} {_fmt(aic_tok):>9} {_fmt(vf_tok):>9} "
            f"{_pct(e_aic):>8} {_pct(e_vf):>7} {bs_ctx:>10}  {'; '.join(notes)}"
        )
    lines.append("")
    for name, pairs in (("all points both model", both), ("fixed concurrency only", both_fixed)):
        if not pairs:
            lines.append(f"median |error|, {name}: no points")
            continue
        aic_med = statistics.median(a for a, _ in pairs)
        vf_med = statistics.median(v for _, v in pairs)
        lines.append(
            f"median |error|, {name} ({len(pairs)}): AIC {aic_med:.0%}, vfleet {vf_med:.0%}"
        )
    return lines


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def details(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        plan, aic = r.get("plan"), r.get("aic") or {}
        if plan is None:
            continue
        p = plan["predicted"]
        out.append(
            f"  {r['name']}: vfleet {r['vfleet_s']:.2f} s, predicts TPOT {p['tpot_ms']:.1f} ms "
            f"TTFT p99 {p['ttft_ms']:.0f} ms at {plan['max_num_seqs']} seqs/rank "
            f"(kv {plan['kv_cache_dtype']}); AIC system {r['system']}"
        )
        for key, what in (("best", "AIC best"), ("ours", "AIC ours"), ("at_bs", "AIC @seqs")):
            row = aic.get(key)
            if not row:
                continue
            if "error" in row:
                out.append(f"    {what:<10} {row['error']} ({row.get('seconds', 0)} s)")
                continue
            out.append(
                f"    {what:<10} {aic_label(row) + ', bs ' + str(row['bs']):<34} "
                f"TTFT {row['ttft']:6.0f} ms  TPOT {row['tpot']:5.1f} ms  "
                f"ctx_tokens {row['ctx_tokens']:>5}  concurrency {row['concurrency']:>5}  "
                f"mem {row['memory']:.0f} GB  kv {row['kvcache']}  ({row['seconds']} s)"
            )
        dis = aic.get("disagg", {})
        if "error" in dis:
            out.append(f"    {'AIC disagg':<10} {dis['error']} ({dis.get('seconds', 0)} s)")
        elif dis:
            out.append(
                f"    {'AIC disagg':<10} {disagg_label(dis):<34} TTFT {dis['ttft']:6.0f} ms  "
                f"TPOT {dis['tpot']:5.1f} ms  concurrency {dis['concurrency']:>5}  "
                f"({dis['seconds']} s)"
            )
        vf_best = r.get("vf_best", {})
        if "tok_s" in vf_best:
            out.append(
                f"    {'vfleet est':<10} of AIC best: TTFT p99 {vf_best['ttft_p99']:.0f} ms, "
                f"TPOT median {vf_best['tpot']:.1f} ms, {vf_best['running']:.0f} running"
            )
        if "error" in aic and len(aic) == 1:
            out.append(f"    AIC: {aic['error']}")
    return out


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run scenarios whose name contains this text")
    ap.add_argument("--workload", default="chat", help="vfleet workload: preset or file")
    ap.add_argument(
        "--fixed-lengths",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give vfleet p99 = mean lengths, like AIC's fixed ISL/OSL closed loop (default)",
    )
    ap.add_argument(
        "--vllm-version", default=AIC_VLLM, help="release vfleet plans for (default: AIC's data)"
    )
    ap.add_argument(
        "--measured",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also score the published measurements with both tools (default)",
    )
    ap.add_argument("--timeout", type=float, default=420, help="AIC seconds per call group")
    ap.add_argument(
        "--aic-venv", type=Path, default=Path(os.environ.get("AIC_VENV", DEFAULT_AIC_VENV))
    )
    ap.add_argument("--vfleet", type=Path, default=REPO / ".venv" / "bin" / "vfleet")
    ap.add_argument("--log", help="AIC log file (default: a temp file)")
    ap.add_argument("--json", help="also write the raw results here")
    args = ap.parse_args()

    if importlib.util.find_spec("aiconfigurator") is None:
        _reexec_under_aic(args.aic_venv)

    from importlib.metadata import version

    found = version("aiconfigurator")
    if found != AIC_VERSION:
        print(f"warning: aiconfigurator {found}, this bench was written for {AIC_VERSION}")
    tmp = Path(tempfile.mkdtemp(prefix="vfleet-aic-"))
    log = args.log or str(tmp / "aic.log")
    scenarios = [s for s in SCENARIOS if not args.only or args.only.lower() in s.name.lower()]
    started = time.perf_counter()
    systems = link_systems(scenarios, tmp / "aic_systems")
    rows = [run_scenario(sc, args, tmp, log, systems) for sc in scenarios]
    disagg_reasons(rows)
    measured = run_measured(args, log) if args.measured else None

    first = next((r for r in rows if r.get("plan")), {})
    print()
    print(
        f"vfleet vs AIConfigurator {AIC_VERSION} (vllm {AIC_VLLM} data); vfleet plans for vLLM "
        f"{args.vllm_version}; ISL {first.get('isl')} OSL {first.get('osl')} "
        f"({'fixed on both sides' if args.fixed_lengths else 'vfleet: preset p99s'}), TTFT "
        f"{first.get('ttft')} ms, TPOT {first.get('tpot')} ms. Output tok/s of the whole cluster."
    )
    print(
        "  vfleet column: vfleet plan's own prediction for its pick; `vfleet estimate` for "
        "AIC's best agg at AIC's concurrency (batch x DP ranks x replicas); n/a: vfleet does "
        "not model disaggregated serving.\n"
        "  AIC column: AIC's score of that layout under the same SLOs, batch per rank picked "
        "by AIC; AIC best agg searches PP 1-8 too; disagg is AIC's own search.\n"
        "  Layouts in vLLM terms: DP without EP shards experts TP over tp x dp (vLLM's "
        "default); AIC has no DCP: DCP layouts are scored without it. KV dtype = vfleet's."
    )
    print()
    for line in scenario_table(rows):
        print(line)
    print()
    for line in link_lines(rows):
        print(line)
    if measured is not None:
        print()
        print(
            "Published measurements (output tok/s of the whole deployment), each scored at "
            f"its measured layout: AIC with its vLLM {AIC_VLLM} data at batch = concurrency / "
            "ranks (burst: all prompts at once, AIC's best batch up to min(prompts/rank, "
            "max-num-seqs, 512), SLOs lifted; a request-rate limit caps AIC at the offered "
            "load); vfleet at the point's own release (vfleet.perfcases). AIC bs/ctx: AIC's "
            "batch per rank and its chosen prefill chunk (ctx_tokens)."
        )
        for line in measured_table(measured):
            print(line)
        print()
        print(
            f"Not scored by AIC ({len(measured['skipped'])}); AIC {AIC_VERSION}'s systems with "
            f"data: {', '.join(aic_systems())}:"
        )
        for s in measured["skipped"]:
            print(f"  {s['id'][:60]:<60} {s['reason']}")
    print()
    print("Details (per-rank batch, AIC time per call):")
    for line in details(rows):
        print(line)
    total = time.perf_counter() - started
    print(f"\nTotal {total:.0f} s; AIC log: {log}")
    if args.json:
        doc = {"scenarios": rows, "measured": measured}
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
