"""The plan: the winning layout and its knobs, the alternatives and why each lost, the
rejected layouts, and which GPUs of which host serve which engine, as the typed
vfleet.documents.plan.Plan that `vfleet render`, the report, the ledger and the deploy read.

The planner's Plan is built unchecked (`model_construct`): it holds the planner's own
numbers, and `vfleet plan` prints and writes it as it always has even where render would
refuse it (a model folder whose path has a space, say); render and `load_plan` check it.
"""

from __future__ import annotations

from typing import TypedDict

from vfleet.documents.placement import PlanHost, Rank
from vfleet.documents.plan import (
    Alternative,
    DegradedLink,
    KvCacheDtype,
    Plan,
    PlanWorkload,
    Predicted,
    RejectedLayout,
    Speculative,
)
from vfleet.plan.search import Evaluated, is_tie, simpler_because
from vfleet.plan.workload import Workload
from vfleet.topology.cluster import Cluster

ALTERNATIVES = 5


class LayoutFields(TypedDict):
    """What the plan and each alternative say of a layout (Plan's and Alternative's fields)."""

    layout: str
    replicas: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    enable_expert_parallel: bool
    decode_context_parallel_size: int
    gpu_memory_utilization: float
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_chunked_prefill: bool
    kv_cache_dtype: KvCacheDtype
    block_size: int | None
    kv_tokens_per_engine: int
    weights_gib_per_gpu: float
    meets_slo: bool
    predicted: Predicted


def _predicted(ev: Evaluated) -> Predicted:
    p = ev.prediction
    assert p is not None and ev.budget is not None
    band = ev.interval
    return Predicted.model_construct(
        tokens_per_s=round(ev.tokens_per_s, 1),
        tokens_per_s_p10=round(band.p10, 1),
        tokens_per_s_p90=round(band.p90, 1),
        tokens_per_s_per_gpu=round(ev.tokens_per_s / ev.gpus_used, 1),
        tpot_ms=round(p.tpot_s * 1e3, 2),
        itl_p99_ms=round(p.itl_p99_s * 1e3, 2),
        ttft_ms=round(p.ttft_p99_s * 1e3, 1),
        max_concurrency=ev.kv_cap * ev.candidate.dp * ev.replicas,
        running_per_engine=p.running_per_rank * ev.candidate.dp,
        comm_ms_per_step={k: round(v, 3) for k, v in ev.comm_ms.items()},
    )


def layout_fields(ev: Evaluated) -> LayoutFields:
    c, b = ev.candidate, ev.budget
    assert b is not None
    return LayoutFields(
        layout=c.label,
        replicas=ev.replicas,
        tensor_parallel_size=c.tp,
        pipeline_parallel_size=c.pp,
        data_parallel_size=c.dp,
        enable_expert_parallel=c.ep,
        decode_context_parallel_size=c.dcp,
        gpu_memory_utilization=b.gpu_memory_utilization,
        max_num_seqs=ev.max_num_seqs,
        max_num_batched_tokens=ev.max_num_batched_tokens,
        max_model_len=b.max_model_len,
        enable_chunked_prefill=True,
        kv_cache_dtype="fp8" if b.kv_cache_dtype.startswith("fp8") else "auto",
        block_size=b.block_size,
        kv_tokens_per_engine=b.kv_tokens,
        weights_gib_per_gpu=b.weights_gib,
        meets_slo=ev.meets_slo,
        predicted=_predicted(ev),
    )


def why_lost(winner: Evaluated, ev: Evaluated) -> str:
    if not ev.meets_slo and winner.meets_slo:
        p = ev.prediction
        assert p is not None
        return (
            f"misses the SLO (p99 TTFT {p.ttft_p99_s * 1e3:.0f} ms, TPOT {p.tpot_s * 1e3:.1f} ms)"
        )
    ratio = ev.tokens_per_s / max(winner.tokens_per_s, 1e-9)
    if is_tie(winner, ev):
        shared = winner.comparison.overlap(ev.comparison)
        return (
            f"ties with the winner ({ratio * 100:.0f}% of its throughput; their comparison "
            f"bands share {shared * 100:.0f}%: a gap the estimator's measured ranking error "
            f"cannot confirm); the winner is simpler: {simpler_because(winner, ev)}"
        )
    comm = max(ev.comm_ms.items(), key=lambda kv: kv[1]) if ev.comm_ms else ("", 0)
    reason = f"{ratio * 100:.0f}% of the winner's throughput"
    if comm[1] > 0.05 * (ev.prediction.tpot_s * 1e3 if ev.prediction else 1):
        reason += f"; {comm[0].upper()} communication costs {comm[1]:.2f} ms per step"
    if (
        ev.budget
        and winner.budget
        and ev.kv_cap * ev.candidate.dp * ev.replicas
        < (winner.kv_cap * winner.candidate.dp * winner.replicas)
    ):
        reason += "; holds fewer sequences in KV"
    return reason


def hosts(cluster: Cluster, ev: Evaluated) -> list[PlanHost]:
    """Which GPUs of which host serve which engine and ranks (node order as given)."""
    c = ev.candidate
    nodes = (ev.placed_on or cluster).nodes
    slots = [(node, gpu) for node in nodes for gpu in range(node.gpus)]
    engines: dict[str, dict[str, list[Rank]]] = {}  # host -> engine id -> its ranks there
    for replica in range(ev.replicas):
        base = replica * c.gpus
        for rank in range(c.gpus):
            node, gpu = slots[base + rank]
            ranks = engines.setdefault(node.name, {}).setdefault(str(replica), [])
            ranks.append(
                Rank.model_construct(
                    gpu=gpu,
                    tp_rank=rank % c.tp,
                    pp_rank=(rank // c.tp) % c.pp,
                    dp_rank=rank // (c.tp * c.pp),
                )
            )
    address = {node.name: node.address for node in nodes}
    return [
        PlanHost.model_construct(host=name, address=address[name], engines=placed)
        for name, placed in engines.items()
    ]


def plan_document(
    cluster: Cluster,
    workload: Workload,
    ranked: list[Evaluated],
    model: str,
    vllm_version: str,
    model_type: str = "",
    speculative: Speculative | None = None,
) -> Plan:
    """The plan of the best of `ranked`: its knobs and ranks, the runners-up, the refused."""
    winner = ranked[0]
    feasible = [e for e in ranked if not e.rejected]
    idle = cluster.total_gpus - winner.gpus_used
    reason = winner_reason(winner, feasible[1] if len(feasible) > 1 else None)
    links = degraded_links(cluster, winner)
    if links:
        reason += "; " + links_note(cluster, winner, links)
    if idle:
        reason += "; " + idle_note(cluster, winner)
    plan = Plan.model_construct(
        model=model,
        model_type=model_type,
        gpu=cluster.gpu.name,
        nodes=len(cluster.nodes),
        gpus_per_node=cluster.gpus_per_node,
        vllm_version=vllm_version,
        workload=_workload(workload),
        **layout_fields(winner),
        alternatives=[
            Alternative.model_construct(**layout_fields(e), why_not=why_lost(winner, e))
            for e in feasible[1 : 1 + ALTERNATIVES]
        ],
        rejected=[
            RejectedLayout.model_construct(layout=e.candidate.label, why=e.rejected)
            for e in ranked
            if e.rejected
        ],
        hosts=hosts(cluster, winner),
        reason=reason,
        idle_gpus=idle,
    )
    # Set only when on or degraded, so the plans without them are written as they were.
    optional = {"speculative": speculative, "degraded_links": links or None}
    return plan.model_copy(update={k: v for k, v in optional.items() if v})


def _workload(w: Workload) -> PlanWorkload:
    return PlanWorkload.model_construct(
        name=w.name,
        input_mean=w.input_mean,
        input_p99=w.input_p99,
        output_mean=w.output_mean,
        output_p99=w.output_p99,
        concurrency=w.concurrency,
        ttft_p99_ms=w.ttft_p99_ms,
        tpot_p99_ms=w.tpot_p99_ms,
    )


def degraded_links(cluster: Cluster, winner: Evaluated) -> list[DegradedLink]:
    """Each host whose link is degraded, and whether an engine that spans nodes runs on it."""
    spans = winner.candidate.gpus > cluster.gpus_per_node
    placed = {n.name for n in (winner.placed_on or cluster).nodes}
    return [
        DegradedLink.model_construct(
            host=n.name, why=n.link_degraded, in_multi_node_engines=spans and n.name in placed
        )
        for n in cluster.degraded
    ]


def links_note(cluster: Cluster, winner: Evaluated, links: list[DegradedLink]) -> str:
    names = ", ".join(link.host for link in links)
    if winner.candidate.gpus <= cluster.gpus_per_node:
        return f"the link of {names} is degraded; no engine crosses it (each fits one node)"
    busbw = (winner.placed_on or cluster).inter_node.busbw_GBps
    if any(link.in_multi_node_engines for link in links) and winner.heavy_crosses:
        return (
            f"the link of {names} is degraded and the sound hosts cannot hold one "
            f"{winner.candidate.gpus}-GPU engine: it is used, costed at the measured "
            f"{busbw:g} GB/s"
        )
    if any(link.in_multi_node_engines for link in links):
        return (
            f"the link of {names} is degraded; only pipeline stages cross it (TP and expert "
            f"traffic stay inside nodes), costed at the measured {busbw:g} GB/s"
        )
    return f"engines that span nodes are kept off the degraded link of {names}"


def idle_note(cluster: Cluster, winner: Evaluated) -> str:
    idle = cluster.total_gpus - winner.gpus_used
    placed = winner.placed_on or cluster
    if placed.total_gpus < cluster.total_gpus:
        off = ", ".join(n.name for n in cluster.nodes if n not in placed.nodes)
        return f"{idle} of {cluster.total_gpus} GPUs stay idle, those of {off} among them"
    return (
        f"{idle} of {cluster.total_gpus} GPUs stay idle: {winner.candidate.gpus}-GPU engines "
        f"do not divide the cluster, and every layout that would use them all is slower or "
        "refused (see the table)"
    )


def winner_reason(winner: Evaluated, runner_up: Evaluated | None) -> str:
    p = winner.prediction
    assert p is not None
    band = winner.interval
    if runner_up and runner_up.tokens_per_s > winner.tokens_per_s:
        text = (
            f"{winner.candidate.label} x {winner.replicas} replica(s) is the simplest of the "
            f"layouts the cost model cannot tell from the fastest ({winner.tokens_per_s:,.0f} "
            f"output tokens/s, p10-p90 {band.p10:,.0f}-{band.p90:,.0f}) "
        )
    else:
        text = (
            f"{winner.candidate.label} x {winner.replicas} replica(s) gives the most output "
            f"tokens/s ({winner.tokens_per_s:,.0f}, p10-p90 {band.p10:,.0f}-{band.p90:,.0f}) "
        )
    if winner.meets_slo:
        text += "within the SLOs"
    else:
        text += (
            f"closest to the SLOs, which no layout meets here (TTFT p99 "
            f"{p.ttft_p99_s * 1e3:,.0f} ms, TPOT {p.tpot_s * 1e3:,.1f} ms at "
            f"{p.running_per_rank} sequences per rank): loosen the targets or add GPUs"
        )
    if runner_up:
        text += f"; next best {runner_up.candidate.label}: {why_lost(winner, runner_up)}"
    return text
