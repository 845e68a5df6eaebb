"""The plan's prefill/decode section: the aggregated and the disaggregated estimate side by
side, the split the planner compared, and, when the plan is disaggregated, where the prefill
engines run (vfleet.plan.disaggregation decides; docs/pd-disaggregation.md explains).

In a disaggregated plan the top-level layout, knobs and hosts are the decode pool's: the
engines that stream tokens to users, the ones doctor and the report read first. The prefill
pool sits here beside them, with its own layout and hosts.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from vfleet.documents.placement import PlanHost
from vfleet.inputs.strict import StrictModel
from vfleet.inputs.values import Label

Amount = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]
Parallel = Annotated[int, Field(ge=1, le=1024)]
ModeName = Literal["aggregated", "disaggregated"]
Text = Annotated[str, Field(max_length=4000)]
LinkKind = Literal["nvlink", "infiniband", "roce", "ethernet"]


class ModeEstimate(StrictModel):
    """One mode's best layout on the whole cluster and what the cost model predicts for it."""

    mode: ModeName
    """aggregated or disaggregated"""
    layout: Annotated[str, Field(max_length=200)]
    """its layout (e.g. TP1 DP8 EP x2, or 1P(TP8) 1D(TP1 DP8 EP))"""
    gpus: Annotated[int, Field(ge=1)]
    """GPUs it uses (e.g. 16)"""
    tokens_per_s: Amount
    """output tokens/s (e.g. 3250.0)"""
    tokens_per_s_p10: Amount
    """the 10th percentile of its band (e.g. 1690.0)"""
    tokens_per_s_p90: Amount
    """the 90th percentile of its band (e.g. 4257.5)"""
    ttft_ms: Amount
    """p99 time to first token in ms (e.g. 1983.0)"""
    tpot_ms: Amount
    """time per output token in ms (e.g. 49.2)"""
    meets_slo: bool
    """whether it meets the workload's SLOs"""


class Pool(StrictModel):
    """One pool of the split: its engines' layout and scheduler knobs."""

    layout: Annotated[str, Field(max_length=200)]
    """the layout of each engine (e.g. TP8)"""
    engines: Annotated[int, Field(ge=1, le=4096)]
    """engines in the pool (e.g. 1)"""
    tensor_parallel_size: Parallel
    """GPUs per engine rank group (e.g. 8)"""
    data_parallel_size: Parallel
    """data-parallel ranks per engine (e.g. 1)"""
    enable_expert_parallel: bool
    """whether MoE experts are spread over the ranks"""
    max_num_seqs: Annotated[int, Field(ge=1, le=1_000_000)]
    """sequences per engine rank (e.g. 16)"""
    max_num_batched_tokens: Annotated[int, Field(ge=1, le=1_000_000_000)]
    """tokens per engine step (e.g. 16384)"""
    kv_tokens_per_engine: Count
    """KV cache tokens per engine (e.g. 500000)"""
    tokens_per_s_per_engine: Amount
    """prompt tokens/s (prefill) or output tokens/s (decode) of one engine (e.g. 28202.0)"""


class KvTransfer(StrictModel):
    """How each request's KV moves from its prefill engine to its decode engine."""

    connector: Literal["NixlConnector"]
    """vLLM's KV connector (NixlConnector)"""
    link: LinkKind
    """the link the KV crosses (nvlink inside one node)"""
    rdma: bool
    """whether that link carries RDMA (false: NIXL falls back to UCX over TCP)"""
    bytes_per_request: Amount
    """KV bytes one mean prompt moves, to all the decode GPUs that hold it (e.g. 70254592.0)"""
    ms_per_request: Amount
    """the transfer and the decode side's handover, per request (e.g. 171.0)"""


class Disaggregation(StrictModel):
    """Aggregated or disaggregated, what was compared and why the plan is what it is."""

    requested: Literal["auto", "aggregated", "disaggregated"]
    """the mode asked for with --mode"""
    chosen: ModeName
    """the mode the plan takes"""
    reason: Text
    """why (e.g. aggregated wins: 1P(TP8) 1D(TP8) misses the SLOs)"""
    compared: Annotated[list[ModeEstimate], Field(min_length=1, max_length=2)]
    """the best layout of each mode compared"""
    prefill: Pool | None = None
    """the split's prefill pool"""
    decode: Pool | None = None
    """the split's decode pool (the plan's top level when disaggregated)"""
    transfer: KvTransfer | None = None
    """the KV's way between the pools"""
    prefill_hosts: Annotated[list[PlanHost], Field(max_length=4096)] | None = None
    """where the prefill engines run (disaggregated plans only)"""
    router_host: Label | None = None
    """the host that runs the router (default: the first prefill host)"""


def check_pools(
    pools: Disaggregation, decode_sizes: tuple[int, int, int], hosts: list[PlanHost]
) -> None:
    """A disaggregated plan's pools against its top level (the decode pool): the sizes agree,
    every prefill engine has all its ranks, and no GPU or engine id serves both pools.
    Raises ValueError (the plan model's validator turns it into one line)."""
    if pools.chosen != "disaggregated":
        return
    prefill, decode = pools.prefill, pools.decode
    if prefill is None or decode is None or not pools.prefill_hosts or pools.transfer is None:
        raise ValueError(
            "a disaggregated plan needs its prefill and decode pools, the transfer and the "
            "prefill hosts: re-run `vfleet plan --out`"
        )
    tp, pp, dp = decode_sizes
    if (decode.tensor_parallel_size, 1, decode.data_parallel_size) != (tp, pp, dp):
        raise ValueError(
            "the decode pool's sizes differ from the plan's top level (the decode pool's): "
            "re-run `vfleet plan --out`"
        )
    used = {(h.host, r.gpu) for h in hosts for ranks in h.engines.values() for r in ranks}
    decode_ids = {engine for h in hosts for engine in h.engines}
    placed: dict[str, set[tuple[int, int, int]]] = {}
    for host in pools.prefill_hosts:
        for engine, ranks in host.engines.items():
            if engine in decode_ids:
                raise ValueError(f"engine {engine} is in both pools: re-run `vfleet plan --out`")
            for r in ranks:
                if (host.host, r.gpu) in used:
                    raise ValueError(
                        f"GPU {r.gpu} of {host.host} serves both pools: re-run `vfleet plan --out`"
                    )
                used.add((host.host, r.gpu))
                placed.setdefault(engine, set()).add((r.tp_rank, r.pp_rank, r.dp_rank))
    want = {
        (t, 0, d)
        for t in range(prefill.tensor_parallel_size)
        for d in range(prefill.data_parallel_size)
    }
    for engine, held in placed.items():
        if held != want:
            raise ValueError(
                f"prefill engine {engine} does not hold exactly the ranks of "
                f"{prefill.layout}: re-run `vfleet plan --out`"
            )
    if len(placed) != prefill.engines:
        raise ValueError(
            f"the prefill pool says {prefill.engines} engine(s) but its hosts run "
            f"{len(placed)}: re-run `vfleet plan --out`"
        )
