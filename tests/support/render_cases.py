"""The render cases shared by the golden-file test, the vLLM parser test and the real start.

Each case plans a model on a cluster (optionally forcing a layout or a vLLM release) and
renders it with fixed options, so the output is byte-stable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from support.cli_run import Result, vfleet
from support.paths import DATA

GOLDEN = DATA / "render"


@dataclass(frozen=True)
class RenderCase:
    name: str
    cluster: str  # YAML text
    model: str
    version: str
    layout: str | None = None
    render_args: tuple[str, ...] = ()
    facts: Path | None = None
    modes: tuple[str, ...] = field(default_factory=tuple)


TWO_H100_ETH = """nodes:
  - {name: gpu-a, address: 10.20.0.11, gpus: 8}
  - {name: gpu-b, address: 10.20.0.12, gpus: 8}
gpu: H100-SXM-80GB
intra_node: {link: nvswitch, busbw_GBps: 450}
inter_node: {fabric: ethernet, busbw_GBps: 2.9}
"""
TWO_H200_IB = TWO_H100_ETH.replace("H100-SXM-80GB", "H200-SXM-141GB").replace(
    "{fabric: ethernet, busbw_GBps: 2.9}", "{fabric: infiniband, busbw_GBps: 350}"
)
ONE_H100_X4 = """nodes: [{name: gpu-a, address: 10.20.0.11, gpus: 4}]
gpu: H100-SXM-80GB
intra_node: {link: nvswitch, busbw_GBps: 350}
"""

CASES = [
    RenderCase(
        "single-replicas",
        ONE_H100_X4,
        "meta-llama/Llama-3.1-8B-Instruct",
        "0.32.0",
        render_args=("--api-key-file", "/etc/vfleet/secrets/api-key"),
        modes=("single",),
    ),
    RenderCase(
        "mp-tp8-pp2",
        TWO_H100_ETH,
        "deepseek-ai/DeepSeek-V3",
        "0.32.0",
        layout="TP8 PP2 EP",
        modes=("mp",),
    ),
    RenderCase(
        "ray-tp8-pp2",
        TWO_H100_ETH,
        "deepseek-ai/DeepSeek-V3",
        "0.10.2",
        layout="TP8 PP2 EP",
        modes=("ray",),
    ),
    RenderCase(
        "dp16-ep",
        TWO_H200_IB,
        "deepseek-ai/DeepSeek-V3",
        "0.32.0",
        layout="TP1 DP16 EP",
        modes=("dp",),
    ),
    RenderCase(
        "dp16-ep-old-all2all",
        TWO_H200_IB,
        "deepseek-ai/DeepSeek-V3",
        "0.10.2",
        layout="TP1 DP16 EP",
        modes=("dp",),
    ),
]


def run_vfleet(*args: str) -> Result:
    return vfleet(*args)


def render_case(case: RenderCase, work: Path) -> Path:
    """Plan and render one case into work/out; returns the output directory."""
    work.mkdir(parents=True, exist_ok=True)
    cluster = work / "cluster.yaml"
    cluster.write_text(case.cluster)
    plan = work / "plan.json"
    args = [
        "plan",
        "--cluster",
        str(cluster),
        "--model",
        case.model,
        "--vllm-version",
        case.version,
        "--out",
        str(plan),
    ]
    if case.layout:
        args += ["--layout", case.layout]
    out = run_vfleet(*args)
    assert out.returncode == 0, out.stderr
    target = work / "out"
    out = run_vfleet(
        "render",
        "--plan",
        str(plan),
        "--cluster",
        str(cluster),
        "--out",
        str(target),
        *case.render_args,
    )
    assert out.returncode == 0, out.stderr
    return target


def commands(out_dir: Path) -> list[list[str]]:
    return [json.loads(p.read_text()) for p in sorted(out_dir.rglob("command.json"))]
