"""`vfleet plan`'s table for people: the ranked layouts, one example per rejection reason, and
the chosen knobs as vLLM flags."""

from __future__ import annotations

import re

from vfleet.documents.pools import Disaggregation
from vfleet.plan.document import ALTERNATIVES, idle_note, winner_reason
from vfleet.plan.search import Evaluated
from vfleet.plan.workload import Workload
from vfleet.topology.cluster import Cluster


def table(
    cluster: Cluster,
    workload: Workload,
    ranked: list[Evaluated],
    model: str,
    show_rejected: int = 8,
) -> str:
    between = (
        f", {cluster.inter_node.fabric} {cluster.inter_node.busbw_GBps:g} GB/s between"
        if len(cluster.nodes) > 1
        else ""
    )
    head = (
        f"Plan: {model} on {len(cluster.nodes)} x {cluster.gpus_per_node} "
        f"{cluster.gpu.name} ({cluster.intra_node.link} {cluster.intra_node.busbw_GBps:g} "
        f"GB/s inside{between}); workload {workload.name}: {workload.input_mean}->"
        f"{workload.output_mean} tokens, {workload.concurrency} concurrent, SLO TTFT p99 "
        f"{workload.ttft_p99_ms:g} ms, TPOT p99 {workload.tpot_p99_ms:g} ms"
    )
    cols = (
        f"  {'#':>2} {'layout':<18} {'x':>3} {'W GiB':>6} {'KV seqs':>8} {'seqs':>6} "
        f"{'tok/s':>9} {'p10-p90':>15} {'/GPU':>7} {'TPOT':>6} {'TTFT':>7} {'TP ms':>6} "
        f"{'MoE ms':>6} {'PP ms':>6}  SLO"
    )
    lines = [head, "", cols]
    feasible = [e for e in ranked if not e.rejected]
    shown = feasible[: 1 + ALTERNATIVES * 2]
    # Always show plain TP over one node: the layout people try first.
    full_tp = next(
        (
            e
            for e in feasible
            if e.candidate.tp == cluster.gpus_per_node
            and e.candidate.pp == e.candidate.dp == e.candidate.dcp == 1
            and not e.candidate.ep
        ),
        None,
    )
    if full_tp is not None and full_tp not in shown:
        shown.append(full_tp)
    for ev in shown:
        i = feasible.index(ev) + 1
        p, b = ev.prediction, ev.budget
        assert p is not None and b is not None
        band = f"{ev.interval.p10:,.0f}-{ev.interval.p90:,.0f}"
        lines.append(
            f"  {i:>2} {ev.candidate.label:<18} {ev.replicas:>3} {b.weights_gib:>6.1f} "
            f"{ev.kv_cap * ev.candidate.dp * ev.replicas:>8} {ev.max_num_seqs:>6} "
            f"{ev.tokens_per_s:>9,.0f} {band:>15} {ev.tokens_per_s / ev.gpus_used:>7,.0f} "
            f"{p.tpot_s * 1e3:>6.1f} {p.ttft_p99_s * 1e3:>7.0f} {ev.comm_ms['tp']:>6.2f} "
            f"{ev.comm_ms['moe']:>6.2f} {ev.comm_ms['pp']:>6.2f}  "
            f"{'yes' if ev.meets_slo else 'no'}"
        )
    # Rule-based rejections first: they are the lessons; "does not fit" ones after.
    rejected = sorted(
        (e for e in ranked if e.rejected), key=lambda e: e.rejected.startswith("does not fit")
    )
    if rejected:
        lines += ["", f"  Rejected ({len(rejected)} layouts), one example of each reason:"]
        seen = set()
        for ev in rejected:
            kind = re.sub(r"[\d.]+", "#", ev.rejected)  # one example per kind of reason
            if kind in seen:
                continue
            seen.add(kind)
            lines.append(f"    {ev.candidate.label:<18} {ev.rejected}")
            if len(seen) >= show_rejected:
                break
    winner = feasible[0]
    budget = winner.budget
    if budget is None:  # the search sets the budget of every layout it does not reject
        raise ValueError(f"layout {winner.candidate.label} is not rejected but has no budget")
    lines += [
        "",
        f"  Chosen: {winner_reason(winner, feasible[1] if len(feasible) > 1 else None)}"
        + (f"; {idle_note(cluster, winner)}" if winner.gpus_used < cluster.total_gpus else ""),
        f"  Knobs: --gpu-memory-utilization {budget.gpu_memory_utilization} "
        f"--max-num-seqs {winner.max_num_seqs} --max-num-batched-tokens "
        f"{winner.max_num_batched_tokens} --enable-chunked-prefill --kv-cache-dtype "
        f"{'fp8' if budget.kv_cache_dtype.startswith('fp8') else 'auto'} "
        f"--max-model-len {budget.max_model_len}",
        "  (seqs = max-num-seqs per engine rank: the KV cap at the mean context with 10% "
        "headroom, or where throughput stops rising under the SLOs)",
    ]
    sp = budget.speculative
    if sp:
        lines.append(
            f"  Speculative: {sp['method']}, {sp['num_speculative_tokens']} token(s); the "
            f"draft adds {sp['draft_weights_gib']:.2f} GiB per GPU and {sp['draft_kv_layers']} "
            "KV layer(s) on the last stage (counted above); the cost model does not price it"
        )
    return "\n".join(lines)


def modes_table(pools: Disaggregation) -> str:
    """Aggregated against prefill/decode pools: both estimates, the pools, the decision."""
    lines = [
        "",
        "  Aggregated or disaggregated (prefill and decode pools, KV over NixlConnector):",
        f"    {'mode':<14} {'layout':<34} {'GPUs':>4} {'tok/s':>9} {'p10-p90':>15} "
        f"{'TPOT':>6} {'TTFT':>7}  SLO",
    ]
    for row in pools.compared:
        band = f"{row.tokens_per_s_p10:,.0f}-{row.tokens_per_s_p90:,.0f}"
        lines.append(
            f"    {row.mode:<14} {row.layout:<34} {row.gpus:>4} {row.tokens_per_s:>9,.0f} "
            f"{band:>15} {row.tpot_ms:>6.1f} {row.ttft_ms:>7.0f}  "
            f"{'yes' if row.meets_slo else 'no'}"
        )
    for role, pool in (("prefill", pools.prefill), ("decode", pools.decode)):
        if pool is not None:
            rate = "prompt" if role == "prefill" else "output"
            lines.append(
                f"    {role} pool: {pool.engines} x {pool.layout}, --max-num-seqs "
                f"{pool.max_num_seqs} --max-num-batched-tokens {pool.max_num_batched_tokens}, "
                f"{pool.tokens_per_s_per_engine:,.0f} {rate} tok/s per engine"
            )
    t = pools.transfer
    if t is not None:
        how = "CUDA IPC" if t.link == "nvlink" else "RDMA" if t.rdma else "TCP, no RDMA"
        lines.append(
            f"    KV transfer: {t.bytes_per_request / 2**20:,.1f} MiB per mean prompt over "
            f"{t.link} ({how}), {t.ms_per_request:,.0f} ms with the decode handover"
        )
    lines.append(f"  Mode: {pools.chosen} ({pools.requested} asked): {pools.reason}")
    return "\n".join(lines)
