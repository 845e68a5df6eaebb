"""The planner against the seed chapter's scenarios (issue 3, item 7)."""

from pathlib import Path

import pytest

from vfleet.catalog import load_model
from vfleet.cluster import load_cluster
from vfleet.planner import PlanInputs, plan
from vfleet.versions import traits
from vfleet.workload import load_workload

CLUSTERS = Path(__file__).resolve().parent.parent / "examples" / "clusters"


def _plan(cluster: str, model: str, workload: str = "chat"):
    inputs = PlanInputs(
        spec=load_model(model),
        cluster=load_cluster(CLUSTERS / cluster),
        workload=load_workload(workload),
        traits=traits(None),
    )
    ranked = plan(inputs)
    return ranked[0], ranked


def test_seed_counterexample_tp_fills_the_node_pp2_across_never_tp16():
    """The high-concurrency chapter's two-node Ethernet example: TP fills each node, PP is
    what crosses the slow link, TP16 and expert traffic across Ethernet are refused. EP
    inside the node stays a valid choice; under this TPOT target it holds fewer sequences."""
    winner, ranked = _plan("2x8-h100-25gbe.yaml", "deepseek-ai/DeepSeek-V3")
    c = winner.candidate
    assert (c.tp, c.pp, c.dp) == (8, 2, 1)
    ep = next(
        e
        for e in ranked
        if (e.candidate.tp, e.candidate.pp, e.candidate.ep) == (8, 2, True) and e.candidate.dcp == 1
    )
    assert not ep.rejected and ep.meets_slo
    tp16 = [e for e in ranked if e.candidate.tp == 16]
    assert tp16 and all("never crosses slow links" in e.rejected for e in tp16)
    # Expert traffic across the Ethernet link is refused too (ranks are DP x PP x TP, so
    # with DP an expert group spans the whole engine).
    assert all(e.rejected for e in ranked if e.candidate.gpus > 8 and e.candidate.dp > 1)


def test_deepseek_v3_on_one_h200_node_uses_no_pp():
    winner, _ = _plan("1x8-h200.yaml", "deepseek-ai/DeepSeek-V3")
    assert winner.candidate.pp == 1 and winner.candidate.gpus * winner.replicas == 8


def test_two_h200_nodes_on_infiniband_never_run_tp_across_nodes():
    winner, ranked = _plan("2x8-h200-ib.yaml", "deepseek-ai/DeepSeek-V3")
    assert winner.candidate.tp <= 8
    assert all(e.rejected for e in ranked if e.candidate.tp > 8)


def test_llama_8b_on_four_h100_is_four_tp1_replicas():
    winner, _ = _plan("1x4-h100.yaml", "meta-llama/Llama-3.1-8B-Instruct")
    assert (winner.candidate.tp, winner.candidate.pp, winner.replicas) == (1, 1, 4)


def test_llama_70b_on_eight_h100_is_tp8_or_two_tp4():
    winner, _ = _plan("1x8-h100.yaml", "meta-llama/Llama-3.1-70B-Instruct")
    assert (winner.candidate.tp, winner.replicas) in {(8, 1), (4, 2)}
    assert winner.candidate.pp == 1


def test_deepseek_v4_flash_on_one_h200_node_beats_tp8_and_says_why():
    from vfleet.plan_output import why_lost

    winner, ranked = _plan("1x8-h200.yaml", "deepseek-ai/DeepSeek-V4-Flash")
    assert winner.candidate.pp == 1
    tp8 = next(
        e
        for e in ranked
        if not e.rejected
        and e.candidate.tp == 8
        and e.candidate.dp == 1
        and not e.candidate.ep
        and e.candidate.dcp == 1
    )
    assert tp8.tokens_per_s < winner.tokens_per_s
    assert "communication" in why_lost(winner, tp8) or "%" in why_lost(winner, tp8)
    assert winner.budget is not None and winner.budget.weight_format == "dsv4"


@pytest.mark.parametrize("workload", ["chat", "rag", "batch"])
def test_max_num_seqs_never_exceeds_the_kv_cap(workload):
    for cluster, model in [
        ("1x8-h200.yaml", "deepseek-ai/DeepSeek-V3"),
        ("1x8-h100.yaml", "meta-llama/Llama-3.1-70B-Instruct"),
    ]:
        _, ranked = _plan(cluster, model, workload)
        for ev in ranked:
            if not ev.rejected:
                assert 1 <= ev.max_num_seqs <= ev.kv_cap


def test_gpu_memory_utilization_drops_when_the_probe_saw_other_processes():
    from dataclasses import replace

    from vfleet.planner import gpu_memory_utilization

    cluster = load_cluster(CLUSTERS / "1x8-h200.yaml")
    busy = replace(
        cluster, nodes=tuple(replace(n, gpu_memory_used_gib=20.0) for n in cluster.nodes)
    )
    assert gpu_memory_utilization(cluster, traits(None)) == 0.92
    assert gpu_memory_utilization(busy, traits(None)) <= 0.85
