"""Aggregated or disaggregated: the best split of the same GPUs into a prefill pool and a
decode pool (xPyD), compared with the best aggregated layout.

Each pool runs one layout the aggregated search already checked and sized (its budget and
KV capacity). A prefill engine runs prompt-only steps of max-num-batched-tokens tokens; a
decode engine runs decode-only steps (no prompt chunk ever stalls them), as many sequences
as its KV holds and the TPOT target allows. Between them each request's KV crosses a link:
NVLink when both pools share a node, the inter-node fabric otherwise, each decode GPU pulling
its share at the per-GPU bandwidth; RDMA fabrics carry it, plain Ethernet means NIXL over UCX
TCP, which NVIDIA's Dynamo measured at ~98 s TTFT against 0.2-0.5 s over RDMA, so `auto`
never chooses it. Besides the bytes, the decode side's handover costs a fixed
HANDOVER_S (vLLM PR #51919 measured ~197 ms p50 for it where the KV itself took ~29 ms).

The system serves min(prefill capacity, decode capacity) requests per second; with the
workload's concurrency in flight, Little's law gives the time a request spends before its
first decoded token, so a prefill pool too small for the load shows as TTFT. Rules vLLM
enforces: decode TP >= prefill TP unless the model is MLA (NIXL's handshake asserts it), no
pipeline parallelism in either pool (NIXL's pull mode does not support it), no DCP.

`auto` chooses the split only when it meets the SLOs the aggregated plan misses, or when even
the low end (p10) of its band beats the aggregated estimate: the estimator has no measured
disaggregated run behind it, and published runs disagree on when disaggregation pays
(vLLM's own docs say it does not raise throughput), so a close call goes to the simpler
deployment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from vfleet.budget.params import component_params
from vfleet.catalog.kv_connectors import FIRST_NIXL
from vfleet.documents.pools import LinkKind
from vfleet.errors import UserError
from vfleet.perf import bands
from vfleet.perf import model as perf
from vfleet.plan import shape
from vfleet.plan.search import MNBT_CHOICES, Evaluated, PlanInputs, batch_grid

Mode = Literal["auto", "aggregated", "disaggregated"]
MODES: tuple[Mode, ...] = ("auto", "aggregated", "disaggregated")
HANDOVER_S = 0.17
RDMA_FABRICS = ("infiniband", "roce", "nvlink")
FABRICS: dict[str, LinkKind] = {f: f for f in ("infiniband", "roce", "ethernet", "nvlink")}


@dataclass(frozen=True)
class PrefillEngine:
    """One prefill engine of a layout at its best chunk size."""

    ev: Evaluated
    max_num_batched_tokens: int
    tokens_per_s: float  # prompt tokens per second, all DP ranks
    ttft_s: float  # the p99 prompt through its chunks, no queueing
    max_num_seqs: int


@dataclass(frozen=True)
class DecodeEngine:
    """One decode engine of a layout at the largest batch its KV and TPOT allow."""

    ev: Evaluated
    batches: np.ndarray  # sequences per DP rank (the grid)
    tpot_s: np.ndarray  # aligned with batches
    kv_bytes_per_token: float  # per GPU
    max_num_seqs: int  # the largest batch under the TPOT target (or 1)


@dataclass(frozen=True)
class Transfer:
    link: LinkKind
    rdma: bool
    bytes_per_request: float  # all the decode GPUs that hold the request together
    seconds: float  # per request, the bytes at the per-GPU bandwidth plus the handover


@dataclass(frozen=True)
class Split:
    prefill: PrefillEngine
    prefill_engines: int
    decode: DecodeEngine
    decode_engines: int
    running_per_rank: int  # decode sequences per DP rank at the workload's concurrency
    transfer: Transfer
    tokens_per_s: float
    ttft_s: float
    tpot_s: float
    meets_slo: bool
    band: bands.Band
    same_node: bool  # both pools on one node (the transfer stays on NVLink)
    prefill_gpus: int  # the first GPUs in node order go to the prefill pool, the rest decode

    @property
    def gpus(self) -> int:
        return (
            self.prefill.ev.candidate.gpus * self.prefill_engines
            + self.decode.ev.candidate.gpus * self.decode_engines
        )

    @property
    def label(self) -> str:
        p, d = self.prefill.ev.candidate.label, self.decode.ev.candidate.label
        return f"{self.prefill_engines}P({p}) {self.decode_engines}D({d})"

    @property
    def interval(self) -> bands.Interval:
        return bands.throughput_interval(self.tokens_per_s, self.band)

    @property
    def comparison(self) -> bands.Interval:
        return bands.comparison_interval(self.tokens_per_s, bands.band_for(bands.COMPARISON))


@dataclass(frozen=True)
class Decision:
    requested: Mode
    chosen: Literal["aggregated", "disaggregated"]
    aggregated: Evaluated
    split: Split | None
    reason: str


def default_mode(version: tuple[int, int, int]) -> Mode:
    """`auto` from the first release with NixlConnector; aggregated before it."""
    return "auto" if version >= FIRST_NIXL else "aggregated"


def _pool_ok(inputs: PlanInputs, ev: Evaluated) -> bool:
    c = ev.candidate
    return not ev.rejected and ev.budget is not None and c.pp == 1 and c.dcp == 1


def _engine_shape(inputs: PlanInputs, ev: Evaluated) -> perf.EngineShape:
    assert ev.budget is not None
    return shape.engine_shape(
        inputs.spec,
        ev.budget,
        ev.placed_on or inputs.cluster,
        ev.candidate.layout(),
        params=component_params(inputs.spec),
        version=inputs.traits.version,
    )


def prefill_engine(inputs: PlanInputs, ev: Evaluated) -> PrefillEngine:
    """The chunk size that prefills fastest while the p99 prompt's TTFT stays inside half
    the target (the rest is the transfer and the queue); the smallest TTFT if none does."""
    w, gpu = inputs.workload, inputs.cluster.gpu
    params = inputs.fit.params(gpu.arch, inputs.traits.version)
    e = _engine_shape(inputs, ev)
    options: list[tuple[bool, float, float, int]] = []
    for chunk in MNBT_CHOICES:
        prompts = chunk / max(w.input_mean, 1)
        cost = perf.step_cost(
            inputs.spec,
            gpu,
            e,
            params,
            decode=0.0,
            decode_context=0.0,
            prefill=float(chunk),
            prefill_pairs=chunk * w.input_mean / 2.0,
            seqs=prompts,
            new_requests=prompts,
        )
        step = float(cost.step_s)
        ttft = math.ceil(w.input_p99 / chunk) * step
        rate = chunk * ev.candidate.dp / step
        options.append((ttft * 1e3 <= w.ttft_p99_ms / 2, rate, ttft, chunk))
    ok = [o for o in options if o[0]]
    _, rate, ttft, chunk = max(ok, key=lambda o: o[1]) if ok else min(options, key=lambda o: o[2])
    # Prompt-only steps: more sequences than a couple of chunks hold only queue inside it.
    seqs = max(1, min(ev.kv_cap, chunk, 2 * math.ceil(chunk / max(w.input_mean, 1))))
    return PrefillEngine(ev, chunk, rate, ttft, seqs)


def decode_engine(inputs: PlanInputs, ev: Evaluated) -> DecodeEngine:
    """TPOT over batch sizes up to the KV cap, decode-only steps."""
    w, gpu = inputs.workload, inputs.cluster.gpu
    params = inputs.fit.params(gpu.arch, inputs.traits.version)
    e = _engine_shape(inputs, ev)
    grid = batch_grid(max(ev.kv_cap, 1)).astype(float)
    cost = perf.step_cost(
        inputs.spec,
        gpu,
        e,
        params,
        decode=grid,
        decode_context=grid * w.mean_context,
        prefill=0.0 * grid,
        prefill_pairs=0.0 * grid,
        seqs=grid,
        new_requests=grid / max(w.output_mean, 1),
    )
    tpot = np.asarray(cost.step_s, dtype=float) * np.ones_like(grid)
    under = np.flatnonzero(tpot * 1e3 <= w.tpot_p99_ms)
    seqs = int(grid[under[-1]]) if under.size else 1
    return DecodeEngine(ev, grid, tpot, e.kv_bytes_per_token, seqs)


def transfer(inputs: PlanInputs, decode: DecodeEngine, same_node: bool) -> Transfer:
    cluster, w = inputs.cluster, inputs.workload
    # A request lives on one DP rank: its TP group's GPUs each pull their share (all of
    # MLA's latent, which every TP rank holds), in parallel.
    gpus = decode.ev.candidate.tp
    link: LinkKind = "nvlink"
    per_gpu = cluster.intra_node.busbw_GBps
    if not same_node:
        inter = cluster.inter_node
        link = FABRICS.get(inter.fabric, "ethernet")
        per_gpu = inter.busbw_GBps / max(cluster.gpus_per_node, 1)
    per_gpu_bytes = w.input_mean * decode.kv_bytes_per_token
    seconds = per_gpu_bytes / max(per_gpu * 1e9, 1.0) + HANDOVER_S
    return Transfer(link, link in RDMA_FABRICS, per_gpu_bytes * gpus, seconds)


def _split(
    inputs: PlanInputs,
    p: PrefillEngine,
    x: int,
    d: DecodeEngine,
    y: int,
    same_node: bool,
    prefill_gpus: int,
) -> Split:
    w = inputs.workload
    dp = d.ev.candidate.dp
    ranks = y * dp
    # The workload's concurrency spread over the decode ranks, up to what each holds.
    share = max(1, math.ceil(w.concurrency / ranks))
    i = int(np.searchsorted(d.batches, min(share, d.max_num_seqs)))
    i = min(i, len(d.batches) - 1)
    running, tpot = int(d.batches[i]), float(d.tpot_s[i])
    decode_rps = ranks * running / tpot / max(w.output_mean, 1)
    prefill_rps = x * p.tokens_per_s / max(w.input_mean, 1)
    rps = min(decode_rps, prefill_rps)
    move = transfer(inputs, d, same_node)
    # Little's law: with the concurrency in flight, what is not decoding is waiting for or
    # in its prefill; no less than the unqueued p99 prompt.
    in_flight = min(w.concurrency, ranks * running)
    before_decode = max(p.ttft_s, in_flight / max(rps, 1e-9) - w.output_mean * tpot)
    ttft = before_decode + move.seconds + tpot
    meets = ttft * 1e3 <= w.ttft_p99_ms and tpot * 1e3 <= w.tpot_p99_ms
    nodes = max(1, math.ceil(d.ev.candidate.gpus / inputs.cluster.gpus_per_node))
    band = bands.band_for(bands.regime(w.input_mean, w.output_mean, nodes))
    return Split(
        prefill=p,
        prefill_engines=x,
        decode=d,
        decode_engines=y,
        running_per_rank=running,
        transfer=move,
        tokens_per_s=rps * w.output_mean,
        ttft_s=ttft,
        tpot_s=tpot,
        meets_slo=meets,
        band=band,
        same_node=same_node,
        prefill_gpus=prefill_gpus,
    )


def _tp_allowed(inputs: PlanInputs, prefill: Evaluated, decode: Evaluated) -> bool:
    """NIXL pulls KV heads across TP sizes only when decode's TP is at least prefill's
    (MLA's latent is replicated, so any pair works)."""
    return inputs.spec.is_mla or decode.candidate.tp >= prefill.candidate.tp


def best_split(inputs: PlanInputs, ranked: list[Evaluated]) -> Split | None:
    """The best xPyD split of the cluster's GPUs, or None where none exists."""
    cluster = inputs.cluster
    per_node, nodes = cluster.gpus_per_node, len(cluster.nodes)
    pools = [ev for ev in ranked if _pool_ok(inputs, ev)]
    if cluster.total_gpus < 2 or not pools:
        return None
    # Whole nodes per pool across nodes; GPUs of the one node when there is only one.
    unit, units, same_node = (per_node, nodes, False) if nodes > 1 else (1, per_node, True)
    prefills = {id(ev): prefill_engine(inputs, ev) for ev in pools}
    decodes = {id(ev): decode_engine(inputs, ev) for ev in pools}
    best: Split | None = None
    for p_units in range(1, units):
        p_gpus, d_gpus = p_units * unit, (units - p_units) * unit
        for pe in pools:
            x = p_gpus // pe.candidate.gpus
            if x < 1 or (pe.candidate.gpus > per_node and p_gpus % pe.candidate.gpus):
                continue
            for de in pools:
                y = d_gpus // de.candidate.gpus
                if y < 1 or (de.candidate.gpus > per_node and d_gpus % de.candidate.gpus):
                    continue
                if not _tp_allowed(inputs, pe, de):
                    continue
                s = _split(inputs, prefills[id(pe)], x, decodes[id(de)], y, same_node, p_gpus)
                if best is None or _better(s, best):
                    best = s
    return best


def _better(a: Split, b: Split) -> bool:
    if a.meets_slo != b.meets_slo:
        return a.meets_slo
    return a.tokens_per_s > b.tokens_per_s


def _beats(split: Split, agg: Evaluated) -> bool:
    """Whether the split wins outright: it meets SLOs the aggregated plan misses, or even its
    p10 clears the aggregated estimate. No measured disaggregated run backs the model (the
    published ones disagree on when it pays), so a throughput win must survive its band."""
    if split.meets_slo != agg.meets_slo:
        return split.meets_slo
    return split.interval.p10 > agg.tokens_per_s


def decide(inputs: PlanInputs, ranked: list[Evaluated], requested: Mode) -> Decision:
    """Which mode the plan takes, with the comparison and why."""
    agg = ranked[0]
    version = inputs.traits.version
    if requested == "aggregated":
        return Decision(requested, "aggregated", agg, None, "aggregated serving, as asked")
    if version < FIRST_NIXL:
        if requested == "disaggregated":
            raise UserError(
                f"vLLM {inputs.traits.label} has no NixlConnector (P/D from 0.9.2): upgrade "
                "the release or plan with --mode aggregated"
            )
        return Decision(requested, "aggregated", agg, None, "this release has no P/D connector")
    split = best_split(inputs, ranked)
    if split is None:
        if requested == "disaggregated":
            raise UserError(
                "no prefill/decode split fits this cluster (each pool needs a layout without "
                "PP or DCP that fits its GPUs): plan with --mode aggregated"
            )
        return Decision(requested, "aggregated", agg, None, "no prefill/decode split fits")
    if requested == "disaggregated":
        return Decision(requested, "disaggregated", agg, split, "disaggregated, as asked")
    return _auto(agg, split, requested)


def _auto(agg: Evaluated, split: Split, requested: Mode) -> Decision:
    ratio = split.tokens_per_s / max(agg.tokens_per_s, 1e-9)
    if not split.transfer.rdma:
        why = (
            f"aggregated wins: the KV would cross {split.transfer.link} without RDMA (NIXL "
            "over TCP costs seconds per request)"
        )
        return Decision(requested, "aggregated", agg, split, why)
    if _beats(split, agg):
        why = (
            f"disaggregated wins: {split.label} meets the SLOs the aggregated "
            f"{agg.candidate.label} misses"
            if split.meets_slo and not agg.meets_slo
            else f"disaggregated wins: {ratio:.2f}x the aggregated throughput, and even its "
            "p10 clears the aggregated estimate"
        )
        return Decision(requested, "disaggregated", agg, split, why)
    if agg.meets_slo and not split.meets_slo:
        why = f"aggregated wins: {split.label} misses the SLOs"
    elif split.tokens_per_s < agg.tokens_per_s:
        why = f"aggregated wins: {ratio:.2f}x the throughput for the split"
    else:
        why = (
            f"aggregated wins: the split's {ratio:.2f}x does not clear the aggregated estimate "
            f"at its p10 ({split.interval.p10:.0f} tok/s; no measured P/D run backs the "
            "model), and one pool with no KV transfer is simpler"
        )
    return Decision(requested, "aggregated", agg, split, why)
