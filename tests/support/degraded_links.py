"""Three H100 8-GPU hosts from the probe fixture, 25 GbE between them, one of whose links is
degraded (the health gate warned, it did not fail), and the plan made on them. Shared by the
plan tests (tests/unit/plan/test_plan_degraded_links.py) and the typed plan's."""

from __future__ import annotations

from typing import Any

from support.facts import H100, raw_probe, second_host, with_bandwidth
from vfleet.catalog.models import load_model
from vfleet.catalog.releases import traits
from vfleet.health import gate
from vfleet.plan.make import PlanRequest, PlanResult, make_plan
from vfleet.plan.search import parse_layout
from vfleet.plan.workload import load_workload
from vfleet.probe.normalize import normalize
from vfleet.probe.to_cluster import cluster_from_facts
from vfleet.topology.cluster import Cluster

MOE = "deepseek-ai/DeepSeek-V3"  # 671B in FP8: one engine needs two 8 x H100 hosts
SOUND_BUSBW, SLOW_BUSBW = 45.0, 20.0


def raw_hosts(slow: str) -> list[dict[str, Any]]:
    """h1-h3 in an iperf3 ring (h1->h2->h3->h1). The `slow` host's runs out and in reach
    about 60% of the 22.5 Gb/s bar (a warning, not a failure), and its inter-node
    all-reduce is under half of the others'."""
    base = with_bandwidth(raw_probe(H100), intra=470.0, inter=SOUND_BUSBW)
    raws = [second_host(base, f"h{i}", f"10.0.0.{10 + i}") for i in (1, 2, 3)]
    for i, raw in enumerate(raws, 1):
        receiver = f"h{i % 3 + 1}"
        gbps = 13.5 if slow in (raw["host"], receiver) else 23.0
        peer = f"10.0.0.{10 + i % 3 + 1}"
        raw["bandwidth"]["iperf3"] = {peer: {"bits_per_second_received": gbps * 1e9}}
        if raw["host"] == slow:
            raw["bandwidth"]["inter_allreduce"]["rows"][-1]["busbw_GBps"] = SLOW_BUSBW
    return raws


def degraded_cluster(slow: str) -> Cluster:
    """The three hosts as the health gate and the planner see them, `slow` a degraded link."""
    facts = [normalize(raw) for raw in raw_hosts(slow)]
    return cluster_from_facts(facts, degraded=gate.degraded_links(gate.assess(facts)))


def plan_degraded(cluster: Cluster, model: str = MOE, layout: str | None = None) -> PlanResult:
    return make_plan(
        PlanRequest(
            spec=load_model(model),
            cluster=cluster,
            workload=load_workload("chat"),
            traits=traits(None),
            layout=parse_layout(layout) if layout else None,
        )
    )
