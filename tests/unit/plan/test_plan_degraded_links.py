"""A host whose link to the others is degraded (the health gate warned, it did not fail):
engines whose TP or expert traffic would cross it are kept on the sound hosts, pipeline
stages fill the sound hosts first, and where the link must carry traffic it is costed at
what was measured over it. Three H100 8-GPU hosts from the fixture, 25 GbE between them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from support.bundles import deploy_context
from support.degraded_links import (
    SLOW_BUSBW,
    SOUND_BUSBW,
    degraded_cluster,
    plan_degraded,
    raw_hosts,
)
from support.facts import write_dir
from vfleet.deploy import flow
from vfleet.errors import UserError
from vfleet.health import probed as health_probed
from vfleet.plan.make import PlanResult


def _placed(result: PlanResult) -> list[str]:
    return [h.host for h in result.plan.hosts]


def test_the_slow_host_is_a_degraded_link_and_the_fabric_is_measured_without_it():
    cluster = degraded_cluster("h1")
    assert [n.name for n in cluster.degraded] == ["h1"]
    assert "iperf3: " in cluster.nodes[0].link_degraded
    assert "slow both ways: this host's link" in cluster.nodes[0].link_degraded
    assert cluster.inter_node.busbw_GBps == SOUND_BUSBW
    assert cluster.inter_node_with_degraded is not None
    assert cluster.inter_node_with_degraded.busbw_GBps == SLOW_BUSBW


def test_expert_traffic_across_nodes_is_kept_on_the_sound_hosts():
    """TP8 DP2 EP spans two hosts with all-to-all between them: h1 is left idle."""
    result = plan_degraded(degraded_cluster("h1"), layout="TP8 DP2 EP")
    assert _placed(result) == ["h2", "h3"]
    assert result.winner.placed_on is not None
    assert result.winner.placed_on.inter_node.busbw_GBps == SOUND_BUSBW
    doc = result.plan.document()
    assert [(d["host"], d["in_multi_node_engines"]) for d in doc["degraded_links"]] == [
        ("h1", False)
    ]
    assert "engines that span nodes are kept off the degraded link of h1" in doc["reason"]
    assert "8 of 24 GPUs stay idle, those of h1 among them" in doc["reason"]
    # Without the gate's verdict the same layout lands on h1 and h2, in node order.
    blind = replace(
        degraded_cluster("h1"),
        nodes=tuple(replace(n, link_degraded="") for n in degraded_cluster("h1").nodes),
    )
    assert _placed(plan_degraded(blind, layout="TP8 DP2 EP")) == ["h1", "h2"]


def test_pipeline_stages_fill_the_sound_hosts_first_and_pay_for_the_link_when_they_cross_it():
    two_stages = plan_degraded(degraded_cluster("h1"), layout="TP8 PP2")
    assert _placed(two_stages) == ["h2", "h3"]
    assert two_stages.winner.placed_on is not None
    assert two_stages.winner.placed_on.inter_node.busbw_GBps == SOUND_BUSBW
    three = plan_degraded(degraded_cluster("h1"), layout="TP8 PP3")
    assert sorted(_placed(three)) == ["h1", "h2", "h3"]
    assert three.winner.placed_on is not None
    assert three.winner.placed_on.inter_node.busbw_GBps == SLOW_BUSBW
    assert three.plan.degraded_links[0].in_multi_node_engines is True
    assert "only pipeline stages cross it" in three.plan.reason
    # The slower link costs the pipeline: the same layout predicts less over the sound link.
    sound = replace(degraded_cluster("h1"), inter_node_with_degraded=None)
    assert plan_degraded(sound, layout="TP8 PP3").winner.tokens_per_s > three.winner.tokens_per_s


def test_too_few_sound_hosts_put_the_degraded_link_under_the_rules_at_its_measured_bandwidth():
    """h1 and h2 degraded, h3 alone is sound: no 16-GPU engine fits on it. Expert traffic
    over the measured 20 GB/s is refused by the rules; pipeline stages take it."""
    cluster = degraded_cluster("h1")
    h1, h2, h3 = cluster.nodes
    worse = replace(cluster, nodes=(h1, replace(h2, link_degraded="iperf3: slow"), h3))
    with pytest.raises(UserError, match=r"EP spans 16 GPUs across infiniband \(20 GB/s\)"):
        plan_degraded(worse, layout="TP8 DP2 EP")
    result = plan_degraded(worse, layout="TP8 PP2")
    assert _placed(result) == ["h3", "h1"]  # the one sound host first
    assert result.winner.placed_on is not None
    assert result.winner.placed_on.inter_node.busbw_GBps == SLOW_BUSBW
    assert "only pipeline stages cross it" in result.plan.reason


def test_engines_inside_one_node_use_every_host():
    result = plan_degraded(degraded_cluster("h1"), model="meta-llama/Llama-3.1-8B-Instruct")
    assert sorted(_placed(result)) == ["h1", "h2", "h3"]
    assert "no engine crosses it (each fits one node)" in result.plan.reason


@pytest.fixture
def prod_with_a_slow_host(tmp_path: Path) -> Any:
    ctx = deploy_context(tmp_path, {})
    for old in (ctx.artifacts / "facts").glob("*.json"):
        old.unlink()
    write_dir(ctx.artifacts / "facts", *raw_hosts("h1"))
    return ctx


def test_a_deploy_plans_around_the_degraded_link_and_the_report_says_where_it_stands(
    prod_with_a_slow_host, capsys
):
    ctx = prod_with_a_slow_host
    probed = health_probed.probed_cluster(ctx, "deploy", allow_partial=False)
    assert not probed.left_out  # a warning keeps the host
    assert "h1  iperf3          WARN" in capsys.readouterr().out
    result = flow.plan(ctx, probed.cluster)
    links = json.loads((ctx.artifacts / "plan.json").read_text())["degraded_links"]
    assert [d["host"] for d in links] == ["h1"]
    rendered = flow.render(ctx, result.plan, probed.cluster)
    flow.write_report(ctx, result, rendered.endpoints, probed.cluster, probed)
    section = (ctx.artifacts / "report" / "report.md").read_text().split("## Health gate")[1]
    used = links[0]["in_multi_node_engines"]
    line = "an engine spanning nodes uses it" if used else "no engine that spans nodes runs on it"
    assert f"h1's link is degraded{' and' if used else ':'} {line}" in section.split("## ")[0]
