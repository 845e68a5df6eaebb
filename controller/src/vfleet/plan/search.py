"""The parallel planner: every valid layout for a model on a cluster, memory-checked by the
budget engine, costed by the step model, ranked against the workload's SLOs.

The rules of docs/high-concurrency-rules.md are hard constraints, each with the reason
printed when it rejects a layout: TP only inside an NVLink domain; expert traffic (EP, or
MoE sharded over DP) only inside a high-bandwidth domain unless the fabric is
InfiniBand/RoCE with enough measured bandwidth; PP is what crosses slow links.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

import numpy as np

from vfleet.budget import speculative
from vfleet.budget.compute import Budget, BudgetRequest, compute, fits
from vfleet.budget.params import component_params
from vfleet.catalog.flag_registry import flag_set
from vfleet.catalog.model_shape import ModelShape
from vfleet.catalog.releases import VersionTraits
from vfleet.documents import flag_types as flags
from vfleet.errors import UserError
from vfleet.perf import bands, steady
from vfleet.perf import model as perf
from vfleet.perf.fit import Fit, default_fit
from vfleet.plan import shape
from vfleet.plan.candidate import Candidate
from vfleet.plan.rules import dcp_divides_query_groups, reject_reason, release_supports_it
from vfleet.plan.workload import Workload
from vfleet.topology.cluster import Cluster

HEADROOM = 0.9  # keep 10% of KV blocks free so decode growth does not preempt
MNBT_CHOICES = (2048, 4096, 8192, 16384)
BATCH_GRID = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)


@dataclass
class Evaluated:
    candidate: Candidate
    replicas: int
    rejected: str = ""
    request: BudgetRequest | None = None
    """the budget's inputs (the report sweeps gpu-memory-utilization from them)"""
    budget: Budget | None = None
    prediction: steady.Prediction | None = None
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0
    kv_cap: int = 0
    meets_slo: bool = False
    comm_ms: dict[str, float] = field(default_factory=dict)
    placed_on: Cluster | None = None
    """the nodes its engines are placed on and the links they are costed against"""
    heavy_crosses: bool = False
    """its TP group or expert traffic spans nodes"""
    band: bands.Band | None = None
    """where held-out measured runs of its regime fell around estimates (vfleet.perf.bands)"""

    @property
    def tokens_per_s(self) -> float:
        if not self.prediction:
            return 0.0
        return self.prediction.output_tokens_per_s * self.replicas

    @property
    def interval(self) -> bands.Interval:
        """Where a measured run would fall (p10-p90 of held-out runs of its regime)."""
        band = self.band or bands.band_for(bands.POOLED)
        return bands.throughput_interval(self.tokens_per_s, band)

    @property
    def comparison(self) -> bands.Interval:
        """Its band for comparing it with the plan's other layouts (vfleet.perf.bands)."""
        return bands.comparison_interval(self.tokens_per_s, bands.band_for(bands.COMPARISON))

    @property
    def gpus_used(self) -> int:
        return self.candidate.gpus * self.replicas


@dataclass(frozen=True)
class Pinned:
    """Values the operator fixes before planning (group_vars' vfleet_plan_overrides): the
    search plans around them, so every prediction describes the plan that will run."""

    max_model_len: int | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    enable_chunked_prefill: bool | None = None

    def given(self) -> dict[str, int | float | bool]:
        """The pinned values only, by plan field name."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class PlanInputs:
    spec: ModelShape
    cluster: Cluster
    workload: Workload
    traits: VersionTraits
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str | None = None
    fit: Fit = field(default_factory=default_fit)
    speculative: speculative.Speculative | None = None
    pinned: Pinned = field(default_factory=Pinned)


def _divisors_pow2(limit: int) -> list[int]:
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


def _dp_sizes(total: int) -> list[int]:
    """Powers of two up to 64, and the divisors of the cluster up to 128 that are whole
    multiples of 3 (so a 72-GPU domain or a 24-node cluster is used whole)."""
    sizes = set(_divisors_pow2(min(total, 64)))
    sizes |= {d for d in range(3, min(total, 128) + 1, 3) if total % d == 0}
    return sorted(sizes)


def candidates(spec: ModelShape, cluster: Cluster) -> list[Candidate]:
    """Every layout worth costing; the rules then reject or keep each one."""
    per_node, total = cluster.gpus_per_node, cluster.total_gpus
    domain = max(per_node, cluster.inter_node.nvlink_domain_gpus)
    tps = [t for t in _divisors_pow2(max(domain, per_node) * 2) if t <= total]
    pps = [p for p in (1, 2, 3, 4, 6, 8, 12, 16) if p <= spec.num_layers and p <= total]
    dps = _dp_sizes(total) if spec.is_moe else [1]
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


def batch_grid(limit: int) -> np.ndarray:
    """Batch sizes 1..limit, about 6% apart (the usual round sizes included), so the SLO
    boundary is found to within a few percent."""
    steps = np.unique(
        np.round(np.geomspace(1, max(limit, 1), num=32 + 4 * int(np.log2(limit + 1))))
    )
    return np.unique(np.concatenate([steps, [b for b in BATCH_GRID if b <= limit], [limit]]))


def _choose_knobs(
    spec: ModelShape, inputs: PlanInputs, e: perf.EngineShape, kv_cap: int, target: int
) -> tuple[int, int, steady.Prediction, bool]:
    """max-num-seqs and max-num-batched-tokens for one engine rank, and whether the SLOs hold.

    For each chunk size, the batch grid runs up to the KV cap; max-num-seqs is where
    throughput peaks under the SLOs, pulled back to where it stops rising (within 3%). The
    workload's share of concurrency sets where the engine runs, not the cap: a big cluster's
    small share per rank still gets a max-num-seqs that absorbs bursts. The smallest chunk
    that keeps TTFT inside its SLO wins unless a larger one buys more than 2% throughput.
    When no batch meets the SLOs, the one closest to them is returned, flagged.
    """
    w, gpu = inputs.workload, inputs.cluster.gpu
    params = inputs.fit.params(gpu.arch, inputs.traits.version)
    # Each decoding sequence schedules 1 + num_speculative_tokens tokens per step.
    slots = speculative.decode_slots(inputs.speculative)
    pin = inputs.pinned
    limit = max(1, kv_cap if pin.max_num_seqs is None else pin.max_num_seqs)
    grid = batch_grid(limit)
    best: tuple[float, int, int, steady.Prediction] | None = None
    closest: tuple[float, int, int, steady.Prediction] | None = None
    choices = MNBT_CHOICES if pin.max_num_batched_tokens is None else (pin.max_num_batched_tokens,)
    chunks = np.array(choices, dtype=float)[:, None]
    table = steady.predict_grid(
        spec, gpu, e, params, grid, w.input_mean, w.output_mean, w.input_p99, chunks
    )
    violations = np.maximum(
        table.ttft_p99_s * 1e3 / w.ttft_p99_ms, table.tpot_s * 1e3 / w.tpot_p99_ms
    )
    for row, mnbt in enumerate(choices):
        g = table.row(row)
        violation = violations[row]
        feasible = np.flatnonzero(violation <= 1.0)
        worst_ok = int(np.argmin(violation))
        if closest is None or violation[worst_ok] < closest[0]:
            closest = (float(violation[worst_ok]), int(grid[worst_ok]), mnbt, g.at(worst_ok))
        if feasible.size == 0:
            continue
        peak = g.output_tokens_per_s[feasible].max()
        knee = int(next(i for i in feasible if g.output_tokens_per_s[i] >= 0.97 * peak))
        if pin.max_num_seqs is not None:  # the operator's cap, not the knee
            knee = int(feasible[-1])
        # The operating point: the workload's share, up to the chosen cap.
        run = int(np.searchsorted(grid, min(grid[knee], max(target, 1))))
        run = min(run, knee)
        tokens = float(g.output_tokens_per_s[knee])
        if best is None or tokens > best[0] * 1.02:
            # vLLM refuses max-num-batched-tokens below max-num-seqs.
            best = (tokens, min(int(grid[knee]), mnbt // slots), mnbt, g.at(run))
    if best is not None:
        seqs = best[1] if pin.max_num_seqs is None else pin.max_num_seqs
        return seqs, best[2], best[3], True
    assert closest is not None
    seqs = closest[1] if pin.max_num_seqs is None else pin.max_num_seqs
    return seqs, closest[2], closest[3], False


def evaluate(inputs: PlanInputs, c: Candidate) -> Evaluated:
    spec, w = inputs.spec, inputs.workload
    # Engines that cross nodes stay off degraded links where they can (Cluster.for_engine).
    heavy = shape.heavy_traffic_crosses(spec, inputs.cluster, c)
    cluster = inputs.cluster.for_engine(c.gpus, heavy)
    replicas = cluster.total_gpus // c.gpus
    ev = Evaluated(candidate=c, replicas=replicas, placed_on=cluster, heavy_crosses=heavy)
    ev.rejected = reject_reason(spec, cluster, inputs.traits, c)
    if ev.rejected:
        return ev
    pin = inputs.pinned
    req = BudgetRequest(
        spec=spec,
        gpu=cluster.gpu,
        traits=inputs.traits,
        layout=c.layout(),
        gpu_memory_utilization=inputs.gpu_memory_utilization,
        max_model_len=pin.max_model_len or min(w.max_context, spec.max_position_embeddings),
        kv_cache_dtype=inputs.kv_cache_dtype or "auto",
        max_num_batched_tokens=pin.max_num_batched_tokens or 8192,
        mean_context_len=min(w.mean_context, pin.max_model_len or w.mean_context),
        speculative=inputs.speculative,
        block_size=pin.block_size,
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
    ev.request, ev.budget = req, budget
    # A request holds blocks in every cache group (window groups, V4's state groups), not
    # only context / block_size: the budget counts them at the workload's mean context.
    blocks_per_seq = budget.blocks_per_mean_request
    ev.kv_cap = max(1, int(HEADROOM * (budget.num_blocks - 1) / max(blocks_per_seq, 1)))
    e = shape.engine_shape(
        spec,
        budget,
        cluster,
        c.layout(),
        params=component_params(spec),
        version=inputs.traits.version,
    )
    target = max(1, math.ceil(w.concurrency / (replicas * c.dp)))
    ev.max_num_seqs, ev.max_num_batched_tokens, ev.prediction, ev.meets_slo = _choose_knobs(
        spec, inputs, e, ev.kv_cap, target
    )
    nodes = math.ceil(c.gpus / max(cluster.gpus_per_node, 1))
    ev.band = bands.band_for(bands.regime(w.input_mean, w.output_mean, nodes))
    p = ev.prediction
    cost = p.cost
    ev.comm_ms = {
        "tp": cost.tp_s * 1e3 * c.pp,
        "moe": cost.moe_s * 1e3 * c.pp,
        "pp": cost.pp_s * 1e3 * (c.pp - 1),
        "dcp": cost.dcp_s * 1e3 * c.pp,
    }
    return ev


TIE = 0.02  # predictions this close are a tie whatever their bands
BAND_TIE = 0.5  # p10-p90 bands sharing more than this share of the narrower one tie


def _simplicity(ev: Evaluated) -> tuple[int, int, bool, int, int]:
    """Among ties: more of the cluster in use, fewer pipeline stages, EP for MoE
    (docs/high-concurrency-rules.md#ep-inside-fast-domains), less DCP, more replicas
    (independent failure domains)."""
    c = ev.candidate
    return (-ev.gpus_used, c.pp, not c.ep, c.dcp, -ev.replicas)


SIMPLER_BECAUSE = (
    "it uses more of the cluster",
    "it has fewer pipeline stages",
    "it keeps expert traffic inside EP groups",
    "it splits no context across GPUs (less DCP)",
    "it runs more independent replicas",
)


def simpler_because(winner: Evaluated, other: Evaluated) -> str:
    """Why `winner` counts as simpler than `other` (the first rule of _simplicity that
    separates them)."""
    for reason, a, b in zip(SIMPLER_BECAUSE, _simplicity(winner), _simplicity(other), strict=True):
        if a != b:
            return reason
    return "it is as simple and predicted faster"


def is_tie(a: Evaluated, b: Evaluated) -> bool:
    """Two layouts the cost model cannot separate: within 2%, or comparison bands that
    overlap by more than half."""
    if a.meets_slo != b.meets_slo:
        return False
    close = b.tokens_per_s >= (1 - TIE) * a.tokens_per_s
    return close or a.comparison.overlap(b.comparison) > BAND_TIE


def rank(evaluated: list[Evaluated]) -> list[Evaluated]:
    """SLO-meeting layouts first, by throughput; the winner is the simplest layout among
    those tied with the best (vfleet.plan.search.is_tie)."""
    ordered = sorted(evaluated, key=lambda e: (not e.meets_slo, -e.tokens_per_s))
    if not ordered:
        return ordered
    top = ordered[0]
    ties = [e for e in ordered if e is top or is_tie(top, e)]
    winner = min(ties, key=_simplicity)
    return [winner] + [e for e in ordered if e is not winner]


def gpu_memory_utilization(cluster: Cluster, traits: VersionTraits) -> float:
    """0.92 on dedicated nodes (0.90 before vLLM 0.20); lower when the probe saw other
    processes holding GPU memory, keeping 1 GiB of slack for them."""
    util = traits.default_gpu_memory_utilization
    used = max(n.gpu_memory_used_gib for n in cluster.nodes)
    if used > 0.5:
        util = min(util, (cluster.gpu.memory_gib - used - 1.0) / cluster.gpu.memory_gib)
    return round(util, 2)


def kv_cache_dtype(spec: ModelShape, cluster: Cluster) -> str:
    """fp8 KV where the GPU has fp8 and the model's attention supports it."""
    if spec.is_dsv4:
        return "fp8"
    if cluster.gpu.fp8 and cluster.gpu.arch in ("hopper", "blackwell", "ada"):
        return "fp8"
    return "auto"


LAYOUT_GRAMMAR = (
    "write it like 'TP8 PP2' or 'TP1 DP8 EP': TP<n>, PP<n>, DP<n>, DCP<n> (n a whole number "
    f"from 1 to {flags.MAX_PARALLEL}) and EP, each at most once, separated by spaces"
)
_LAYOUT_PART = re.compile(r"(TP|PP|DP|DCP)([1-9][0-9]{0,3})|EP")  # [0-9]: ASCII digits only


def parse_layout(text: str) -> Candidate:
    """'TP8 PP2 EP' -> Candidate (`--layout`). Parts are split on ASCII spaces, so leading,
    trailing and repeated spaces are ignored; any other separator is refused."""
    shown = repr(text[:40]) + ("..." if len(text) > 40 else "")
    parts = [p for p in text.split(" ") if p]
    if not parts:
        raise UserError(f"layout {shown} is empty: {LAYOUT_GRAMMAR}")
    sizes: dict[str, int] = {}
    for part in parts:
        match = _LAYOUT_PART.fullmatch(part)
        if match is None or int(match.group(2) or 1) > flags.MAX_PARALLEL:
            raise UserError(f"layout {shown}: {part[:20]!r} is not a layout part: {LAYOUT_GRAMMAR}")
        name = match.group(1) or "EP"
        if name in sizes:
            raise UserError(f"layout {shown} gives {name} twice: {LAYOUT_GRAMMAR}")
        sizes[name] = int(match.group(2) or 1)
    size = sizes.get
    return Candidate(size("TP", 1), size("PP", 1), size("DP", 1), "EP" in sizes, size("DCP", 1))


def check_layout(spec: ModelShape, cluster: Cluster, traits: VersionTraits, c: Candidate) -> None:
    """What vLLM itself refuses of a layout the operator names (`--layout`), before costing:
    EP without experts, and DCP where the release lacks it or it does not divide TP."""
    if c.ep and not spec.is_moe:
        raise UserError(f"layout {c.label} asks for EP but {spec.name} has no experts: drop EP")
    if c.dcp == 1:
        return
    if c.tp % c.dcp:
        raise UserError(
            f"layout {c.label}: DCP{c.dcp} does not divide TP{c.tp}, as vLLM requires: use "
            f"a DCP size that divides {c.tp}"
        )
    try:
        has_dcp = flag_set(traits.label).has("--decode-context-parallel-size")
    except UserError:  # older than every recorded release: older than DCP too
        has_dcp = False
    if not has_dcp:
        raise UserError(
            f"layout {c.label}: vLLM {traits.label} has no --decode-context-parallel-size: "
            "drop DCP or target a release that has it with --vllm-version"
        )
    alone = replace(c, pp=1, dp=1, ep=False)  # rules.py's DCP limits, on DCP alone
    for rule in (release_supports_it, dcp_divides_query_groups):
        if reason := rule(spec, cluster, traits, alone):
            raise UserError(f"layout {c.label}: {reason}: drop DCP or change its size")


def plan(inputs: PlanInputs, only: Candidate | None = None) -> list[Evaluated]:
    """All candidates, best first (rejected ones last, each with its reason). With `only`,
    just that layout, refused with its reason if a rule or the memory forbids it."""
    util = inputs.pinned.gpu_memory_utilization or inputs.gpu_memory_utilization
    if util is None:  # 0 is refused by the budget, not replaced by the default
        util = gpu_memory_utilization(inputs.cluster, inputs.traits)
    kv = inputs.kv_cache_dtype or kv_cache_dtype(inputs.spec, inputs.cluster)
    inputs = replace(inputs, gpu_memory_utilization=util, kv_cache_dtype=kv)
    if only is not None:
        check_layout(inputs.spec, inputs.cluster, inputs.traits, only)
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
    from vfleet.budget.compute import smallest_fitting_layout

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
