"""The deploy's plan and render step, both ways, on the same inputs: as the deploy runs it
now (vfleet.plan.make and vfleet.render.request in process, on objects it already holds)
and as it used to (`vfleet plan --out` then `vfleet render --plan`, two processes that
parse the cluster and the plan again). Prints both sides' seconds; the in-process figure
does not include the one interpreter start a deploy pays anyway.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vfleet.catalog.flag_registry import flag_set
from vfleet.catalog.models import load_model
from vfleet.catalog.releases import traits
from vfleet.plan.make import PlanRequest, make_plan
from vfleet.plan.workload import load_workload
from vfleet.probe.load import load_cluster
from vfleet.render.request import render_into, render_options

REPO = Path(__file__).resolve().parents[1]
VFLEET = Path(sys.executable).with_name("vfleet")
CASES = [
    ("1 x 8 H200", "1x8-h200.yaml", "meta-llama/Llama-3.1-70B-Instruct"),
    ("2 x 8 H200, IB", "2x8-h200-ib.yaml", "deepseek-ai/DeepSeek-V3"),
]
RUNS = 5


def in_process(cluster_file: Path, model: str, out: Path) -> None:
    cluster = load_cluster(cluster_file)
    result = make_plan(
        PlanRequest(
            spec=load_model(model),
            cluster=cluster,
            workload=load_workload("chat"),
            traits=traits(None),
        )
    )
    opts = render_options(result.plan, {}, "bench")
    render_into(out, result.plan, cluster, opts, flag_set(result.plan.vllm_version))


def two_processes(cluster_file: Path, model: str, out: Path) -> None:
    plan = out.with_suffix(".json")
    for argv in (
        ["plan", "--cluster", str(cluster_file), "--model", model, "--out", str(plan), "--json"],
        ["render", "--plan", str(plan), "--cluster", str(cluster_file), "--out", str(out)],
    ):
        subprocess.run([str(VFLEET), *argv], check=True, capture_output=True, timeout=300)


def _median_seconds(step, cluster_file: Path, model: str, work: Path) -> float:
    times = []
    for run in range(RUNS):
        start = time.perf_counter()
        step(cluster_file, model, work / f"{step.__name__}-{run}")
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    print(f"{'cluster':<16} {'model':<36} {'in process s':>12} {'2 processes s':>14} {'ratio':>6}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, name, model in CASES:
            cluster_file = REPO / "examples" / "clusters" / name
            here = _median_seconds(in_process, cluster_file, model, Path(tmp))
            there = _median_seconds(two_processes, cluster_file, model, Path(tmp))
            rows.append(
                {"cluster": label, "model": model, "in_process_s": here, "processes_s": there}
            )
            print(f"{label:<16} {model:<36} {here:>12.3f} {there:>14.3f} {there / here:>5.1f}x")
    print(json.dumps({"median_of": RUNS, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
