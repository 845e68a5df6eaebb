"""The parallel planner: every valid layout for a model on a cluster, memory-checked by the
budget engine, costed by the step model, ranked against the workload's SLOs.

The seed chapter's rules are hard constraints, each with the reason printed when it rejects
a layout: TP only inside an NVLink domain; expert traffic (EP, or MoE sharded over DP) only
inside a high-bandwidth domain unless the fabric is InfiniBand/RoCE with enough measured
bandwidth; PP is what crosses slow links.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from vfleet import perf
from vfleet.budget import Budget, BudgetRequest, compute, fits
from vfleet.cluster import ClusterSpec
from vfleet.errors import UserError
from vfleet.modelspec import ModelSpec
from vfleet.params import Layout, component_params, pp_partition, stage_layers
from vfleet.versions import VersionTraits
from vfleet.workload import Workload

# Expert all-to-all across nodes needs RDMA-class bandwidth to pay off (GB/s busbw).
EP_CROSS_NODE_MIN_GBPS = 25.0
HEADROOM = 0.9  # keep 10% of KV blocks free so decode growth does not preempt
MNBT_CHOICES = (2048, 4096, 8192, 16384)
BATCH_GRID = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)


@dataclass(frozen=True)
class Candidate:
    tp: int
    pp: int
    dp: int
    ep: bool
    dcp: int

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def label(self) -> str:
        text = f"TP{self.tp}"
        if self.pp > 1:
            text += f" PP{self.pp}"
        if self.dp > 1:
            text += f" DP{self.dp}"
        if self.ep:
            text += " EP"
        if self.dcp > 1:
            text += f" DCP{self.dcp}"
        return text


@dataclass
class Evaluated:
    candidate: Candidate
    replicas: int
    rejected: str = ""
    budget: Budget | None = None
    prediction: perf.Prediction | None = None
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0
    kv_cap: int = 0
    meets_slo: bool = False
    comm_ms: dict[str, float] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        if not self.prediction:
            return 0.0
        return self.prediction.output_tokens_per_s * self.replicas

    @property
    def gpus_used(self) -> int:
        return self.candidate.gpus * self.replicas


@dataclass(frozen=True)
class PlanInputs:
    spec: ModelSpec
    cluster: ClusterSpec
    workload: Workload
    traits: VersionTraits
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str | None = None


def _divisors_pow2(limit: int) -> list[int]:
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


def candidates(spec: ModelSpec, cluster: ClusterSpec) -> list[Candidate]:
    """Every layout worth costing; the rules then reject or keep each one."""
    per_node, total = cluster.gpus_per_node, cluster.total_gpus
    domain = max(per_node, cluster.inter_node.nvlink_domain_gpus)
    tps = [t for t in _divisors_pow2(max(domain, per_node) * 2) if t <= total]
    pps = [p for p in (1, 2, 3, 4, 6, 8, 12, 16) if p <= spec.num_layers and p <= total]
    dps = [d for d in _divisors_pow2(min(total, 64))] if spec.is_moe else [1]
    out = []
    for tp in tps:
        for pp in pps:
            for dp in dps:
                g = tp * pp * dp
                if g > total or (g > per_node and g % per_node) or (g < per_node and per_node % g):
                    continue
                eps = (False, True) if spec.is_moe and tp * dp > 1 else (False,)
                # DCP only helps where TP replicates KV heads (MLA: always one head).
                max_dcp = tp if spec.is_mla else max(1, tp // max(1, spec.num_kv_heads))
                dcps = [d for d in _divisors_pow2(max_dcp) if tp % d == 0]
                if spec.sliding_layers or spec.is_dsv4:
                    dcps = [1]
                for ep in eps:
                    for dcp in dcps:
                        out.append(Candidate(tp, pp, dp, ep, dcp))
    return out


def _links(cluster: ClusterSpec, c: Candidate) -> tuple[perf.Link, perf.Link, perf.Link]:
    per_node = cluster.gpus_per_node
    intra_kind = "pcie" if cluster.intra_node.link == "pcie" else "nvlink"
    intra = perf.Link(intra_kind, cluster.intra_node.busbw_GBps)
    fabric = cluster.inter_node.fabric
    inter = perf.Link(fabric if fabric != "nvlink" else "nvlink", cluster.inter_node.busbw_GBps)
    # The measured inter-node busbw is an all-reduce over every rail of a node; an
    # all-to-all gives each GPU only its own share of the rails.
    per_gpu = perf.Link(inter.kind, inter.busbw_GBps / max(per_node, 1))
    if fabric == "nvlink":
        per_gpu = inter
    tp_link = intra if c.tp <= per_node else inter
    moe_link = intra if c.tp * c.dp <= per_node else per_gpu
    pp_link = intra if c.gpus <= per_node else inter
    return tp_link, moe_link, pp_link


def reject_reason(
    spec: ModelSpec, cluster: ClusterSpec, traits: VersionTraits, c: Candidate
) -> str:
    """The seed's rules and vLLM's limits, as one reason or an empty string."""
    per_node, inter = cluster.gpus_per_node, cluster.inter_node
    in_domain = inter.fabric == "nvlink" and c.tp <= inter.nvlink_domain_gpus
    if c.tp > per_node and not in_domain:
        return (
            f"TP{c.tp} spans nodes over {inter.fabric} ({inter.busbw_GBps:g} GB/s): TP "
            "all-reduces twice per layer, so it never crosses slow links"
        )
    if cluster.intra_node.link == "nvlink-pairs" and c.tp > 2:
        return f"TP{c.tp} leaves the NVLink pairs: TP stays inside an NVLink domain"
    moe_span = c.tp * c.dp
    if spec.is_moe and (c.ep or c.dp > 1) and moe_span > per_node:
        fast = inter.fabric in ("infiniband", "roce", "nvlink")
        if not fast or inter.busbw_GBps < EP_CROSS_NODE_MIN_GBPS:
            kind = "EP" if c.ep else "MoE over DP"
            return (
                f"{kind} spans {moe_span} GPUs across {inter.fabric} "
                f"({inter.busbw_GBps:g} GB/s): expert traffic stays inside a fast domain"
            )
    if spec.num_attention_heads % c.tp:
        return f"TP{c.tp} does not divide {spec.num_attention_heads} attention heads"
    if not spec.is_mla and not spec.is_dsv4:
        kv = spec.num_kv_heads
        if (kv % c.tp) if kv >= c.tp else (c.tp % kv):
            return f"TP{c.tp} and {kv} KV heads do not divide each other"
    nvlink_inside = cluster.intra_node.link in ("nvswitch", "nvlink-pairs")
    if c.pp > 1 and nvlink_inside and c.tp * c.dp < per_node:
        return (
            f"PP{c.pp} puts several stages inside one NVLink node: TP fills the node, "
            "PP is the fallback across slow links"
        )
    if c.dp > 1 and c.pp > 1:
        return (
            "DP with PP: vLLM's multi-node launchers place a DP rank on one node or run "
            "TP/PP within one DP rank, not both; choose DP or PP"
        )
    if c.dcp > 1 and traits.version < (0, 10, 2):
        return f"DCP needs vLLM 0.10.2 or later (target {traits.label})"
    if c.dp > 1 and traits.version < (0, 9, 0) and c.gpus > per_node:
        return "multi-node data parallel needs vLLM 0.9 or later"
    block = _fp8_block(spec)
    if block and spec.num_experts and not c.ep:
        width = spec.moe_intermediate_size / (c.tp * c.dp)
        if width % block:
            return (
                f"FP8 block-quantized experts ({spec.moe_intermediate_size} wide) split "
                f"{c.tp * c.dp} ways leave {width:g} columns, not whole {block}-wide "
                "blocks: use EP"
            )
    if block and spec.intermediate_size % block == 0 and (spec.intermediate_size / c.tp) % block:
        return f"FP8 blocks of {block} do not split {spec.intermediate_size} columns {c.tp} ways"
    if spec.is_dsv4 and spec.hidden_size >= 7168 and c.tp >= 16:
        return "DeepSeek-V4-Pro FP8 blocks do not split 16 ways (vLLM issue 40955)"
    return ""


def _fp8_block(spec: ModelSpec) -> int:
    """The FP8 block width of a block-quantized checkpoint (0 when not block-quantized)."""
    size = spec.quantization.get("weight_block_size") if spec.quantization else None
    return int(size[-1]) if isinstance(size, list) and size else 0


def _engine_shape(
    spec: ModelSpec,
    budget: Budget,
    c: Candidate,
    cluster: ClusterSpec,
    params: dict[str, int],
    fp8: bool,
) -> perf.EngineShape:
    stage = max(budget.stages, key=lambda s: s.weights_bytes)
    weights = budget.weights_by_component_gib
    experts_gib = weights.get("routed_experts", 0.0)
    stage_scale = stage.weights_bytes / max(sum(weights.values()) * (1 << 30), 1)
    expert_bytes = experts_gib * (1 << 30) * stage_scale
    layers = pp_partition(spec.num_layers, c.pp)
    heaviest = max(range(c.pp), key=lambda r: layers[r])
    moe_layers = sum(
        1 for i in stage_layers(spec.num_layers, c.pp, heaviest) if spec.is_moe_layer(i)
    )
    tp_link, moe_link, pp_link = _links(cluster, c)
    return perf.EngineShape(
        tp=c.tp,
        pp=c.pp,
        dp=c.dp,
        ep=c.ep,
        dcp=c.dcp,
        layers_per_stage=max(layers),
        moe_layers_per_stage=moe_layers,
        dense_bytes_per_gpu=stage.weights_bytes - expert_bytes,
        expert_bytes_per_gpu=expert_bytes,
        kv_bytes_per_token=budget.kv_bytes_per_token,
        active_params=perf.active_params(spec, params),
        fp8_compute=fp8,
        tp_link=tp_link,
        moe_link=moe_link,
        pp_link=pp_link,
    )


def _choose_knobs(
    spec: ModelSpec, inputs: PlanInputs, e: perf.EngineShape, kv_cap: int, target: int
) -> tuple[int, int, perf.Prediction]:
    """max-num-seqs and max-num-batched-tokens for one engine rank.

    For each chunk size, the batch grid runs up to the KV cap (and the workload's share of
    concurrency); the best batch is where throughput peaks under the SLOs, pulled back to
    where it stops rising (within 3%). The smallest chunk that keeps TTFT inside its SLO wins
    unless a larger one buys more than 2% throughput: small chunks keep inter-token tails
    short, large ones finish prompts in fewer steps.
    """
    w, gpu = inputs.workload, inputs.cluster.gpu
    limit = max(1, min(kv_cap, target))
    grid = sorted({b for b in BATCH_GRID if b <= limit} | {limit})
    best: tuple[float, int, int, perf.Prediction] | None = None
    closest: tuple[float, int, int, perf.Prediction] | None = None
    for mnbt in MNBT_CHOICES:
        feasible: list[tuple[int, perf.Prediction]] = []
        for b in grid:
            p = perf.predict(
                spec, gpu, e, b, w.mean_context, w.input_mean, w.output_mean, w.input_p99, mnbt
            )
            # TPOT p99 is over requests, each averaging its own steps, so the mean step
            # (prefill interleaved) is what it sees; chunk spikes show in ITL instead.
            violation = max(p.ttft_p99_s * 1e3 / w.ttft_p99_ms, p.tpot_s * 1e3 / w.tpot_p99_ms)
            if violation <= 1.0:
                feasible.append((b, p))
            elif closest is None or violation < closest[0]:
                closest = (violation, b, mnbt, p)
        if not feasible:
            continue
        peak = max(p.output_tokens_per_s for _, p in feasible)
        b, p = next((b, p) for b, p in feasible if p.output_tokens_per_s >= 0.97 * peak)
        if best is None or p.output_tokens_per_s > best[0] * 1.02:
            best = (p.output_tokens_per_s, b, mnbt, p)
    chosen = best or closest
    assert chosen is not None
    return chosen[1], chosen[2], chosen[3]


def evaluate(inputs: PlanInputs, c: Candidate) -> Evaluated:
    spec, cluster, w = inputs.spec, inputs.cluster, inputs.workload
    replicas = cluster.total_gpus // c.gpus
    ev = Evaluated(candidate=c, replicas=replicas)
    ev.rejected = reject_reason(spec, cluster, inputs.traits, c)
    if ev.rejected:
        return ev
    req = BudgetRequest(
        spec=spec,
        gpu=cluster.gpu,
        traits=inputs.traits,
        layout=Layout(tp=c.tp, pp=c.pp, dp=c.dp, enable_expert_parallel=c.ep, dcp=c.dcp),
        gpu_memory_utilization=inputs.gpu_memory_utilization,
        max_model_len=min(w.max_context, spec.max_position_embeddings),
        kv_cache_dtype=inputs.kv_cache_dtype or "auto",
        max_num_batched_tokens=8192,
        mean_context_len=w.mean_context,
    )
    try:
        budget = compute(req)
    except UserError as exc:
        ev.rejected = str(exc)
        return ev
    if not fits(budget):
        ev.rejected = (
            f"does not fit: {budget.weights_gib:.0f} GiB of weights per GPU leave "
            f"{max(budget.available_kv_gib, 0):.1f} GiB for KV"
        )
        return ev
    ev.budget = budget
    blocks_per_seq = math.ceil(w.mean_context * 1.0 / budget.block_size / c.dcp)
    ev.kv_cap = max(1, int(HEADROOM * (budget.num_blocks - 1) / max(blocks_per_seq, 1)))
    fp8 = budget.weight_format in ("fp8", "int8", "dsv4", "nvfp4", "mxfp4")
    shape = _engine_shape(spec, budget, c, cluster, component_params(spec), fp8)
    target = max(1, math.ceil(w.concurrency / (replicas * c.dp)))
    ev.max_num_seqs, ev.max_num_batched_tokens, ev.prediction = _choose_knobs(
        spec, inputs, shape, ev.kv_cap, target
    )
    p = ev.prediction
    ev.meets_slo = p.ttft_p99_s * 1e3 <= w.ttft_p99_ms and p.tpot_s * 1e3 <= w.tpot_p99_ms
    cost = p.cost
    ev.comm_ms = {
        "tp": cost.tp_s * 1e3 * c.pp,
        "moe": cost.moe_s * 1e3 * c.pp,
        "pp": cost.pp_s * 1e3 * (c.pp - 1),
        "dcp": cost.dcp_s * 1e3 * c.pp,
    }
    return ev


TIE = 0.02  # predictions this close are a tie for a cost model of this kind


def _simplicity(ev: Evaluated) -> tuple:
    """Among near ties: fewer pipeline stages, EP for MoE (the seed's preference), less DCP,
    more replicas (independent failure domains)."""
    c = ev.candidate
    return (c.pp, not c.ep, c.dcp, -ev.replicas)


def rank(evaluated: list[Evaluated]) -> list[Evaluated]:
    """SLO-meeting layouts first, by throughput; the winner is the simplest layout within
    2% of the best."""
    ordered = sorted(evaluated, key=lambda e: (not e.meets_slo, -e.tokens_per_s))
    if not ordered:
        return ordered
    top = ordered[0]
    ties = [
        e
        for e in ordered
        if e.meets_slo == top.meets_slo and e.tokens_per_s >= (1 - TIE) * top.tokens_per_s
    ]
    winner = min(ties, key=_simplicity)
    return [winner] + [e for e in ordered if e is not winner]


def gpu_memory_utilization(cluster: ClusterSpec, traits: VersionTraits) -> float:
    """0.92 on dedicated nodes (0.90 before vLLM 0.20); lower when the probe saw other
    processes holding GPU memory, keeping 1 GiB of slack for them."""
    util = traits.default_gpu_memory_utilization
    used = max(n.gpu_memory_used_gib for n in cluster.nodes)
    if used > 0.5:
        util = min(util, (cluster.gpu.memory_gib - used - 1.0) / cluster.gpu.memory_gib)
    return round(util, 2)


def kv_cache_dtype(spec: ModelSpec, cluster: ClusterSpec) -> str:
    """fp8 KV where the GPU has fp8 and the model's attention supports it."""
    if spec.is_dsv4:
        return "fp8"
    if cluster.gpu.fp8 and cluster.gpu.arch in ("hopper", "blackwell", "ada"):
        return "fp8"
    return "auto"


def parse_layout(text: str) -> Candidate:
    """'TP8 PP2 EP' or 'tp1,dp16,ep' -> Candidate (for `vfleet plan --layout`)."""
    sizes = {"TP": 1, "PP": 1, "DP": 1, "DCP": 1}
    ep = False
    for part in text.replace(",", " ").upper().split():
        if part == "EP":
            ep = True
            continue
        prefix = next((p for p in ("DCP", "TP", "PP", "DP") if part.startswith(p)), None)
        if prefix is None or not part[len(prefix) :].isdigit() or int(part[len(prefix) :]) < 1:
            raise UserError(f"--layout {text!r}: write it like 'TP8 PP2' or 'TP1 DP8 EP'")
        sizes[prefix] = int(part[len(prefix) :])
    return Candidate(sizes["TP"], sizes["PP"], sizes["DP"], ep, sizes["DCP"])


def plan(inputs: PlanInputs, only: Candidate | None = None) -> list[Evaluated]:
    """All candidates, best first (rejected ones last, each with its reason). With `only`,
    just that layout, refused with its reason if a rule or the memory forbids it."""
    util = inputs.gpu_memory_utilization or gpu_memory_utilization(inputs.cluster, inputs.traits)
    kv = inputs.kv_cache_dtype or kv_cache_dtype(inputs.spec, inputs.cluster)
    inputs = replace(inputs, gpu_memory_utilization=util, kv_cache_dtype=kv)
    if only is not None:
        if only.gpus > inputs.cluster.total_gpus:
            raise UserError(
                f"layout {only.label} needs {only.gpus} GPUs; the cluster has "
                f"{inputs.cluster.total_gpus}"
            )
        forced = evaluate(inputs, only)
        if forced.rejected:
            raise UserError(f"layout {only.label} is refused: {forced.rejected}")
        return [forced]
    evaluated = [evaluate(inputs, c) for c in candidates(inputs.spec, inputs.cluster)]
    feasible = rank([e for e in evaluated if not e.rejected])
    rejected = [e for e in evaluated if e.rejected]
    if not feasible:
        raise UserError(_nothing_fits(inputs, rejected))
    return feasible + rejected


def _nothing_fits(inputs: PlanInputs, rejected: list[Evaluated]) -> str:
    spec, cluster = inputs.spec, inputs.cluster
    req = BudgetRequest(
        spec=spec,
        gpu=cluster.gpu,
        traits=inputs.traits,
        gpu_memory_utilization=inputs.gpu_memory_utilization,
        max_model_len=min(inputs.workload.max_context, spec.max_position_embeddings),
        kv_cache_dtype=inputs.kv_cache_dtype or "auto",
    )
    from vfleet.budget import smallest_fitting_layout

    smallest = smallest_fitting_layout(req, max_gpus=4096)
    if smallest is None:
        need = "no cluster of this GPU up to 256 GPUs fits: use a quantized checkpoint"
    else:
        gpus = smallest.tensor_parallel_size * smallest.pipeline_parallel_size
        need = (
            f"the smallest cluster that fits is {gpus} x {cluster.gpu.name} "
            f"(TP{smallest.tensor_parallel_size} PP{smallest.pipeline_parallel_size})"
        )
    return f"{spec.name} fits nowhere on {cluster.total_gpus} x {cluster.gpu.name}: {need}"
