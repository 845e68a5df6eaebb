"""How fast `vfleet plan` decides (targets: 16 GPUs under 0.3 s, 1,024 x 8 GPUs under 2 s).

Times the planner in-process (the CLI adds about 0.05 s of interpreter start).
"""

from __future__ import annotations

import statistics
import sys
import time

from vfleet.catalog.models import load_model
from vfleet.catalog.releases import traits
from vfleet.plan.search import PlanInputs, plan
from vfleet.plan.workload import PRESETS
from vfleet.topology.cluster import cluster_from_dict

CASES = [
    ("2 x 8 H100, 25 GbE", 2, "H100-SXM-80GB", "ethernet", 2.9, "deepseek-ai/DeepSeek-V3"),
    ("2 x 8 H200, IB", 2, "H200-SXM-141GB", "infiniband", 350, "deepseek-ai/DeepSeek-V3"),
    ("1,024 x 8 H200, IB", 1024, "H200-SXM-141GB", "infiniband", 350, "deepseek-ai/DeepSeek-V3"),
    (
        "1,024 x 8 H100, IB",
        1024,
        "H100-SXM-80GB",
        "infiniband",
        350,
        "meta-llama/Llama-3.1-70B-Instruct",
    ),
]


def main() -> int:
    print(f"{'cluster':<22} {'model':<36} {'layouts':>7} {'median s':>9} {'max s':>7}  winner")
    for label, nodes, gpu, fabric, bw, model in CASES:
        cluster = cluster_from_dict(
            {
                "nodes": nodes,
                "gpus_per_node": 8,
                "gpu": gpu,
                "intra_node": {"link": "nvswitch", "busbw_GBps": 450},
                "inter_node": {"fabric": fabric, "busbw_GBps": bw},
            }
        )
        inputs = PlanInputs(
            spec=load_model(model), cluster=cluster, workload=PRESETS["chat"], traits=traits(None)
        )
        times, ranked = [], []
        for _ in range(3):
            start = time.perf_counter()
            ranked = plan(inputs)
            times.append(time.perf_counter() - start)
        print(
            f"{label:<22} {model:<36} {len(ranked):>7} {statistics.median(times):9.3f} "
            f"{max(times):7.3f}  {ranked[0].candidate.label} x {ranked[0].replicas}"
        )
    print("targets: 16 GPUs under 0.3 s, 1,024 x 8 GPUs under 2 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
