"""The planner against the scenarios of docs/high-concurrency-rules.md and the estimator's
known limits."""

import pytest

from support.paths import REPO
from vfleet.catalog.models import load_model
from vfleet.catalog.releases import traits
from vfleet.plan.search import PlanInputs, plan
from vfleet.plan.workload import load_workload
from vfleet.probe.load import load_cluster

CLUSTERS = REPO / "examples" / "clusters"


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
    """The two-node Ethernet failure of docs/high-concurrency-rules.md: TP fills each node, PP is
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
    from vfleet.plan.document import why_lost

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

    from vfleet.plan.search import gpu_memory_utilization

    cluster = load_cluster(CLUSTERS / "1x8-h200.yaml")
    busy = replace(
        cluster, nodes=tuple(replace(n, gpu_memory_used_gib=20.0) for n in cluster.nodes)
    )
    assert gpu_memory_utilization(cluster, traits(None)) == 0.92
    assert gpu_memory_utilization(busy, traits(None)) <= 0.85


def _plan_spec(text: str, model: str, workload: str = "chat", version: str | None = None):
    import yaml

    from vfleet.topology.cluster import cluster_from_dict

    inputs = PlanInputs(
        spec=load_model(model),
        cluster=cluster_from_dict(yaml.safe_load(text)),
        workload=load_workload(workload),
        traits=traits(version),
    )
    ranked = plan(inputs)
    return ranked[0], ranked, inputs


NVL72 = (
    "nodes: {n}\ngpus_per_node: 4\ngpu: GB200\n"
    "intra_node: {{link: nvswitch, busbw_GBps: 700}}\n"
    "inter_node: {{fabric: nvlink, busbw_GBps: 700, nvlink_domain_gpus: 72}}\n"
)


def test_one_nvl72_rack_is_used_whole():
    winner, _, _ = _plan_spec(NVL72.format(n=18), "deepseek-ai/DeepSeek-V3")
    assert winner.gpus_used == 72


def test_expert_groups_stay_inside_one_nvlink_domain():
    """Two 72-GPU racks: an expert group of 96 or 144 GPUs would cross the racks' slower
    scale-out network, so it is refused with the reason, not costed at NVLink speed."""
    _, ranked, _ = _plan_spec(NVL72.format(n=36), "deepseek-ai/DeepSeek-V3")
    wide = [e for e in ranked if e.candidate.dp > 1 and e.candidate.gpus > 72]
    assert wide and all("NVLink domain" in e.rejected for e in wide)


def test_a_large_cluster_keeps_room_for_bursts_in_max_num_seqs():
    """1,024 nodes share 512 requests: about one per engine rank, yet max-num-seqs comes
    from the KV budget and the SLOs, not from that share."""
    text = (
        "nodes: 1024\ngpus_per_node: 8\ngpu: H100-SXM-80GB\n"
        "intra_node: {link: nvswitch, busbw_GBps: 450}\n"
        "inter_node: {fabric: infiniband, busbw_GBps: 350}\n"
    )
    winner, _, _ = _plan_spec(text, "meta-llama/Llama-3.1-70B-Instruct")
    assert winner.max_num_seqs >= min(32, winner.kv_cap) > 1
    assert winner.prediction is not None and winner.prediction.running_per_rank <= 2


def test_idle_gpus_are_named_with_the_reason():
    from vfleet.plan import document

    text = (
        "nodes: 128\ngpus_per_node: 8\ngpu: H100-SXM-80GB\n"
        "intra_node: {link: nvswitch, busbw_GBps: 450}\n"
        "inter_node: {fabric: ethernet, busbw_GBps: 2.9}\n"
    )
    winner, ranked, inputs = _plan_spec(text, "meta-llama/Llama-3.1-405B-Instruct")
    made = document.plan_document(
        inputs.cluster, inputs.workload, ranked, inputs.spec.name, "0.33.0"
    )
    assert made.idle_gpus == 1024 - winner.gpus_used
    if made.idle_gpus:
        assert made.reason and "GPUs stay idle" in made.reason
    # Whole-cluster layouts were costed, not left out.
    assert any(e.gpus_used == 1024 and not e.rejected for e in ranked)


def test_an_unmeetable_slo_says_so_and_keeps_the_closest_layout(tmp_path):
    from vfleet.plan import document

    strict = tmp_path / "strict.yaml"
    strict.write_text(
        "input_len: {mean: 1024, p99: 4096}\noutput_len: {mean: 256, p99: 1024}\n"
        "concurrency: 512\nslo: {ttft_p99_ms: 5, tpot_p99_ms: 1}\n"
    )
    inputs = PlanInputs(
        spec=load_model("deepseek-ai/DeepSeek-V3"),
        cluster=load_cluster(CLUSTERS / "1x8-h200.yaml"),
        workload=load_workload(str(strict)),
        traits=traits(None),
    )
    ranked = plan(inputs)
    winner = ranked[0]
    assert not winner.meets_slo
    reason = document.winner_reason(winner, None)
    assert "no layout meets here" in reason and "loosen the targets or add GPUs" in reason
    # The closest option is a real batch, not a fallback to one sequence.
    assert winner.max_num_seqs >= 1 and winner.prediction is not None


def test_dp_with_pp_is_considered_from_vllm_0_9_1():
    text = (
        "nodes: 4\ngpus_per_node: 8\ngpu: H200-SXM-141GB\n"
        "intra_node: {link: nvswitch, busbw_GBps: 450}\n"
        "inter_node: {fabric: infiniband, busbw_GBps: 350}\n"
    )
    _, new, _ = _plan_spec(text, "deepseek-ai/DeepSeek-V3", version="0.11.0")
    _, old, _ = _plan_spec(text, "deepseek-ai/DeepSeek-V3", version="0.9.0")

    def dp_pp(ranked):
        return [e for e in ranked if e.candidate.dp > 1 and e.candidate.pp > 1]

    assert any(not e.rejected for e in dp_pp(new))
    assert dp_pp(old) and all(e.rejected for e in dp_pp(old))
    assert any("0.9.1" in e.rejected for e in dp_pp(old))


def test_moe_max_num_seqs_keeps_tpot_inside_the_slo():
    winner, _ = _plan("1x8-h200.yaml", "deepseek-ai/DeepSeek-V3")
    assert winner.meets_slo and winner.prediction is not None
    assert winner.prediction.tpot_s * 1e3 <= 50


def test_the_kv_cap_counts_every_cache_group_a_request_holds():
    """max-num-seqs comes from the KV budget: a request takes blocks in each group (the
    window groups of gpt-oss, DeepSeek-V4's five), not only context / block size."""
    for cluster, model in (
        ("1x8-h100.yaml", "openai/gpt-oss-120b"),
        ("1x8-h200.yaml", "deepseek-ai/DeepSeek-V4-Flash"),
    ):
        _winner, ranked = _plan(cluster, model)
        for ev in ranked:
            if ev.rejected:
                continue
            b = ev.budget
            naive = -(-b.mean_context_len // b.block_size)
            assert b.blocks_per_mean_request > 1.5 * naive
            assert ev.kv_cap == max(1, int(0.9 * (b.num_blocks - 1) / b.blocks_per_mean_request))


def test_layouts_the_estimator_cannot_separate_tie_and_the_simpler_one_wins():
    """Two layouts whose comparison bands overlap by more than half are a tie: the one with
    more replicas wins although it is predicted slightly slower; a layout well outside the
    band keeps its rank."""
    from types import SimpleNamespace

    from vfleet.perf import bands
    from vfleet.plan.candidate import Candidate
    from vfleet.plan.search import Evaluated, is_tie, rank

    def ev(tp: int, replicas: int, tok_s: float) -> Evaluated:
        e = Evaluated(candidate=Candidate(tp, 1, 1, False, 1), replicas=replicas, meets_slo=True)
        e.prediction = SimpleNamespace(output_tokens_per_s=tok_s / replicas)  # type: ignore[assignment]
        return e

    spread = bands.band_for(bands.COMPARISON).high
    fast, near, slow = ev(8, 1, 1000.0), ev(4, 2, 1000.0 / spread**0.25), ev(2, 4, 400.0)
    assert is_tie(fast, near) and not is_tie(fast, slow)
    ranked = rank([fast, near, slow])
    assert ranked[0] is near and ranked[1] is fast and ranked[-1] is slow
