"""The plan document's prefill/decode section (vfleet.documents.pools) from the planner's
decision (vfleet.plan.disaggregation), and the plan a disaggregated decision makes: the
decode pool at the top level, the prefill pool beside it."""

from __future__ import annotations

from vfleet.documents.placement import PlanHost, Rank
from vfleet.documents.plan import Plan, Predicted
from vfleet.documents.pools import Disaggregation, KvTransfer, ModeEstimate, Pool
from vfleet.plan.disaggregation import Decision, Split
from vfleet.plan.document import layout_fields
from vfleet.plan.search import MNBT_CHOICES, Evaluated
from vfleet.topology.cluster import Cluster

PREFILL_PREFIX = "prefill-"


def _aggregated_row(ev: Evaluated) -> ModeEstimate:
    assert ev.prediction is not None
    band = ev.interval
    return ModeEstimate.model_construct(
        mode="aggregated",
        layout=f"{ev.candidate.label} x{ev.replicas}",
        gpus=ev.gpus_used,
        tokens_per_s=round(ev.tokens_per_s, 1),
        tokens_per_s_p10=round(band.p10, 1),
        tokens_per_s_p90=round(band.p90, 1),
        ttft_ms=round(ev.prediction.ttft_p99_s * 1e3, 1),
        tpot_ms=round(ev.prediction.tpot_s * 1e3, 2),
        meets_slo=ev.meets_slo,
    )


def _split_row(s: Split) -> ModeEstimate:
    band = s.interval
    return ModeEstimate.model_construct(
        mode="disaggregated",
        layout=s.label,
        gpus=s.gpus,
        tokens_per_s=round(s.tokens_per_s, 1),
        tokens_per_s_p10=round(band.p10, 1),
        tokens_per_s_p90=round(band.p90, 1),
        ttft_ms=round(s.ttft_s * 1e3, 1),
        tpot_ms=round(s.tpot_s * 1e3, 2),
        meets_slo=s.meets_slo,
    )


def decode_batched_tokens(max_num_seqs: int) -> int:
    """A decode engine's steps carry one token per sequence (its prompts arrive as KV), so
    the smallest chunk vfleet offers is enough; vLLM wants at least max-num-seqs."""
    return max(MNBT_CHOICES[0], max_num_seqs)


def _pools(s: Split) -> tuple[Pool, Pool]:
    p, d = s.prefill, s.decode
    assert p.ev.budget is not None and d.ev.budget is not None
    prefill = Pool.model_construct(
        layout=p.ev.candidate.label,
        engines=s.prefill_engines,
        tensor_parallel_size=p.ev.candidate.tp,
        data_parallel_size=p.ev.candidate.dp,
        enable_expert_parallel=p.ev.candidate.ep,
        max_num_seqs=p.max_num_seqs,
        max_num_batched_tokens=p.max_num_batched_tokens,
        kv_tokens_per_engine=p.ev.budget.kv_tokens,
        tokens_per_s_per_engine=round(p.tokens_per_s, 1),
    )
    decode = Pool.model_construct(
        layout=d.ev.candidate.label,
        engines=s.decode_engines,
        tensor_parallel_size=d.ev.candidate.tp,
        data_parallel_size=d.ev.candidate.dp,
        enable_expert_parallel=d.ev.candidate.ep,
        max_num_seqs=d.max_num_seqs,
        max_num_batched_tokens=decode_batched_tokens(d.max_num_seqs),
        kv_tokens_per_engine=d.ev.budget.kv_tokens,
        tokens_per_s_per_engine=round(s.tokens_per_s / s.decode_engines, 1),
    )
    return prefill, decode


def section(decision: Decision) -> Disaggregation:
    """What the plan records of the comparison, whichever mode won."""
    rows = [_aggregated_row(decision.aggregated)]
    s = decision.split
    if s is None:
        return Disaggregation.model_construct(
            requested=decision.requested,
            chosen=decision.chosen,
            reason=decision.reason,
            compared=rows,
        )
    prefill, decode = _pools(s)
    transfer = KvTransfer.model_construct(
        connector="NixlConnector",
        link=s.transfer.link,
        rdma=s.transfer.rdma,
        bytes_per_request=round(s.transfer.bytes_per_request, 1),
        ms_per_request=round(s.transfer.seconds * 1e3, 1),
    )
    return Disaggregation.model_construct(
        requested=decision.requested,
        chosen=decision.chosen,
        reason=decision.reason,
        compared=[*rows, _split_row(s)],
        prefill=prefill,
        decode=decode,
        transfer=transfer,
    )


def _place(
    slots: list[tuple[str, int]], gpus: int, tp: int, engines: int, name: str
) -> dict[str, dict[str, list[Rank]]]:
    """host -> engine id -> ranks, for `engines` engines of `gpus` GPUs from `slots`."""
    out: dict[str, dict[str, list[Rank]]] = {}
    for engine in range(engines):
        for rank in range(gpus):
            host, gpu = slots[engine * gpus + rank]
            ranks = out.setdefault(host, {}).setdefault(f"{name}{engine}", [])
            ranks.append(
                Rank.model_construct(gpu=gpu, tp_rank=rank % tp, pp_rank=0, dp_rank=rank // tp)
            )
    return out


def _hosts(cluster: Cluster, placed: dict[str, dict[str, list[Rank]]]) -> list[PlanHost]:
    address = {n.name: n.address for n in cluster.nodes}
    return [
        PlanHost.model_construct(host=h, address=address[h], engines=e) for h, e in placed.items()
    ]


def disaggregated_plan(plan: Plan, decision: Decision, cluster: Cluster) -> Plan:
    """The plan with the decode pool at its top level and the prefill pool beside it."""
    s = decision.split
    assert s is not None and decision.chosen == "disaggregated"
    d = s.decode
    slots = [(n.name, gpu) for n in cluster.nodes for gpu in range(n.gpus)]
    pc, dc = s.prefill.ev.candidate, d.ev.candidate
    prefill_hosts = _place(slots, pc.gpus, pc.tp, s.prefill_engines, PREFILL_PREFIX)
    decode_hosts = _place(slots[s.prefill_gpus :], dc.gpus, dc.tp, s.decode_engines, "")
    top = dict(layout_fields(d.ev))
    old = top["predicted"]
    assert isinstance(old, Predicted)
    top.update(
        replicas=s.decode_engines,
        max_num_seqs=d.max_num_seqs,
        max_num_batched_tokens=decode_batched_tokens(d.max_num_seqs),
        meets_slo=s.meets_slo,
        predicted=old.model_copy(
            update={
                "tokens_per_s": round(s.tokens_per_s, 1),
                "tokens_per_s_p10": round(s.interval.p10, 1),
                "tokens_per_s_p90": round(s.interval.p90, 1),
                "tokens_per_s_per_gpu": round(s.tokens_per_s / s.gpus, 1),
                "tpot_ms": round(s.tpot_s * 1e3, 2),
                "itl_p99_ms": round(s.tpot_s * 1e3, 2),
                "ttft_ms": round(s.ttft_s * 1e3, 1),
                "max_concurrency": d.ev.kv_cap * dc.dp * s.decode_engines,
                "running_per_engine": s.running_per_rank * dc.dp,
            }
        ),
    )
    pools = section(decision).model_copy(
        update={
            "prefill_hosts": _hosts(cluster, prefill_hosts),
            "router_host": next(iter(prefill_hosts)),
        }
    )
    return plan.model_copy(
        update={
            **top,
            "hosts": _hosts(cluster, decode_hosts),
            "idle_gpus": cluster.total_gpus - s.gpus,
            "reason": decision.reason,
            "disaggregation": pools,
        }
    )
