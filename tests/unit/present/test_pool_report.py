"""The deploy report's prefill/decode section, from a plan the planner made."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.cli_run import vfleet
from vfleet.documents.plan import load_plan
from vfleet.present import report
from vfleet.present.pool_report import pools_section

CLUSTER = """\
gpus_per_node: 8
gpu: H200-SXM-141GB
intra_node: {link: nvswitch, busbw_GBps: 440}
inter_node: {fabric: infiniband, busbw_GBps: 350}
nodes:
  - {name: gpu-a, address: 10.0.0.11, ib_hcas: [mlx5_0]}
  - {name: gpu-b, address: 10.0.0.12, ib_hcas: [mlx5_0]}
"""


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("pool-report")
    (work / "cluster.yaml").write_text(CLUSTER)
    out = {}
    for mode in ("disaggregated", "aggregated"):
        out[mode] = work / f"{mode}.json"
        made = vfleet(
            "plan", "--cluster", str(work / "cluster.yaml"), "--model", "Qwen/Qwen3-30B-A3B",
            "--mode", mode, "--vllm-version", "0.33.0", "--out", str(out[mode]),
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
    return out


def _markdown(section: report.Section) -> str:
    return report.markdown(report.Report("t", "t", [], [section], []))


def test_a_disaggregated_plan_shows_both_modes_both_pools_and_the_handover(plans):
    plan = load_plan(plans["disaggregated"])
    section = pools_section(plan, [])
    assert section is not None
    text = _markdown(section)
    split = plan.disaggregation
    assert split is not None and split.prefill is not None and split.decode is not None
    for row in split.compared:
        assert row.layout in text
    assert f"| prefill | {split.prefill.layout} | {split.prefill.engines} |" in text
    assert f"| decode | {split.decode.layout} | {split.decode.engines} |" in text
    assert "NixlConnector over infiniband (RDMA)" in text
    assert "Measured through the router" not in text


def test_the_router_measurement_is_set_beside_the_prediction(plans):
    plan = load_plan(plans["disaggregated"])
    runs = [{"endpoint": "router", "completed": 100, "output_throughput": 1234.5}]
    text = _markdown(pools_section(plan, runs))  # type: ignore[arg-type]
    assert "Measured through the router: 1,234.5 output tok/s" in text


def test_aggregated_serving_asked_for_compared_nothing_and_has_no_section(plans):
    plan = load_plan(plans["aggregated"])
    assert plan.disaggregation is not None and len(plan.disaggregation.compared) == 1
    assert pools_section(plan, [{"endpoint": "engine-0", "output_throughput": 9.0}]) is None


def test_a_plan_from_before_disaggregation_has_no_section(plans):
    plan = load_plan(plans["aggregated"]).model_copy(update={"disaggregation": None})
    assert pools_section(plan, []) is None
