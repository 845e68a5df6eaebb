"""The Kubernetes render cases: the host render's clusters and layouts, and a disaggregated
plan, each planned once per test session and rendered with `--target lws`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from support.cli_run import vfleet
from support.paths import DATA
from support.render_cases import ONE_H100_X4, TWO_H200_IB

GOLDEN = DATA / "lws"
# Prompts short enough that the planner splits the prefill pool into more than one engine,
# so the router's list of prefill pods is checked with several entries.
PD_WORKLOAD = """\
input_len: {mean: 4096, p99: 4096}
output_len: {mean: 256, p99: 512}
concurrency: 64
slo: {ttft_p99_ms: 3000, tpot_p99_ms: 5}
"""
# Two 8-GPU H200 hosts with their HCAs listed: multi-pod engines and P/D pods request RDMA.
TWO_H200_HCAS = TWO_H200_IB.replace("gpus: 8}", "gpus: 8, ib_hcas: [mlx5_0, mlx5_1]}")


@dataclass(frozen=True)
class LwsCase:
    name: str
    cluster: str
    model: str
    version: str
    layout: str | None = None
    mode: str | None = None
    workload: str | None = None
    groups: tuple[tuple[int, int, int, str], ...] = ()  # (replicas, size, GPUs per pod, mode)


CASES = [
    LwsCase("dense-single-node", ONE_H100_X4, "meta-llama/Llama-3.1-8B-Instruct", "0.32.0",
            groups=((4, 1, 1, "single"),)),
    LwsCase("tp8-pp2-two-nodes", TWO_H200_HCAS, "deepseek-ai/DeepSeek-V3", "0.32.0",
            layout="TP8 PP2 EP", groups=((1, 2, 8, "mp"),)),
    LwsCase("tp8-pp2-ray", TWO_H200_HCAS, "deepseek-ai/DeepSeek-V3", "0.10.2",
            layout="TP8 PP2 EP", groups=((1, 2, 8, "ray"),)),
    LwsCase("dp16-ep-two-nodes", TWO_H200_HCAS, "deepseek-ai/DeepSeek-V3", "0.32.0",
            layout="TP1 DP16 EP", groups=((1, 2, 8, "dp"),)),
    LwsCase("pd-disaggregated", TWO_H200_HCAS, "Qwen/Qwen3-30B-A3B", "0.33.0",
            mode="disaggregated", workload=PD_WORKLOAD,
            groups=((2, 1, 4, "single"), (1, 1, 8, "single"))),
]  # fmt: skip


def plan_case(case: LwsCase, work: Path) -> tuple[Path, Path]:
    """(the plan, the cluster spec) of one case, made under `work`."""
    work.mkdir(parents=True, exist_ok=True)
    cluster = work / "cluster.yaml"
    cluster.write_text(case.cluster)
    plan = work / "plan.json"
    args = ["plan", "--cluster", str(cluster), "--model", case.model]
    args += ["--vllm-version", case.version, "--out", str(plan)]
    if case.layout:
        args += ["--layout", case.layout]
    if case.mode:
        args += ["--mode", case.mode]
    if case.workload:
        (work / "workload.yaml").write_text(case.workload)
        args += ["--workload", str(work / "workload.yaml")]
    made = vfleet(*args)
    assert made.returncode == 0, made.stderr
    return plan, cluster


def render_lws(plan: Path, cluster: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    done = vfleet(
        "render", "--target", "lws", "--plan", str(plan), "--cluster", str(cluster),
        "--out", str(out), *extra,
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr
