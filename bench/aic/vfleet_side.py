"""vfleet's side: `vfleet plan` and `vfleet estimate` through the controller's .venv, and
every measured point as vfleet reads it (run under that venv's python)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from aic.scenarios import REPO, Scenario


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
# vfleet_devtools.perfcases builds, or why not), and vfleet's estimate for the ids on the
# command line.
VFLEET_CASES = """
import json, sys
from vfleet.errors import UserError
from vfleet.plan.estimate import estimate
from vfleet_devtools.perfcases import load_cases
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
