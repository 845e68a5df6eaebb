"""The rules a layout must pass before it is costed: docs/high-concurrency-rules.md (TP never
across slow links, expert traffic inside fast domains, PP only as the fallback across nodes)
and vLLM's own limits (divisibility, what each release supports, FP8 block shapes;
docs/references.md#parallel-combinations).

Each rule returns the reason it refuses a layout, or "" when it has nothing against it; the
first reason wins, so the order below is the order an operator reads them in.
"""

from __future__ import annotations

from collections.abc import Callable

from vfleet.catalog.model_shape import ModelShape
from vfleet.catalog.releases import VersionTraits
from vfleet.plan.candidate import Candidate
from vfleet.topology.cluster import Cluster

# Expert all-to-all across nodes needs RDMA-class bandwidth to pay off (GB/s busbw).
EP_CROSS_NODE_MIN_GBPS = 25.0

Rule = Callable[[ModelShape, Cluster, VersionTraits, Candidate], str]


def in_nvlink_domain(cluster: Cluster, per_node: int) -> int:
    """GPUs one NVLink domain holds: a node, or a multi-node NVLink domain (NVL72)."""
    inter = cluster.inter_node
    return max(per_node, inter.nvlink_domain_gpus) if inter.fabric == "nvlink" else per_node


def fp8_block(spec: ModelShape) -> int:
    """The FP8 block width of a block-quantized checkpoint (0 when not block-quantized)."""
    size = spec.quantization.get("weight_block_size") if spec.quantization else None
    return int(size[-1]) if isinstance(size, list) and size else 0


def tp_stays_on_fast_links(
    spec: ModelShape, cluster: Cluster, traits: VersionTraits, c: Candidate
) -> str:
    per_node, inter = cluster.gpus_per_node, cluster.inter_node
    in_domain = inter.fabric == "nvlink" and c.tp <= inter.nvlink_domain_gpus
    if c.tp > per_node and not in_domain:
        return (
            f"TP{c.tp} spans nodes over {inter.fabric} ({inter.busbw_GBps:g} GB/s): TP "
            "all-reduces twice per layer, so it never crosses slow links"
        )
    if cluster.intra_node.link == "nvlink-pairs" and c.tp > 2:
        return f"TP{c.tp} leaves the NVLink pairs: TP stays inside an NVLink domain"
    return ""


def experts_stay_in_fast_domains(
    spec: ModelShape, cluster: Cluster, traits: VersionTraits, c: Candidate
) -> str:
    if not spec.is_moe or not (c.ep or c.dp > 1):
        return ""
    per_node, inter = cluster.gpus_per_node, cluster.inter_node
    # Ranks are ordered DP x PP x TP, so with DP a stage's expert group spans the engine.
    span = c.gpus if c.dp > 1 else c.tp
    kind = "EP" if c.ep else "MoE over DP"
    if inter.fabric == "nvlink":
        if in_nvlink_domain(cluster, per_node) < span:
            return (
                f"{kind} spans {span} GPUs, past the {inter.nvlink_domain_gpus}-GPU NVLink "
                "domain: expert traffic stays inside a fast domain"
            )
        return ""
    fast = inter.fabric in ("infiniband", "roce") and inter.busbw_GBps >= EP_CROSS_NODE_MIN_GBPS
    if span > per_node and not fast:
        return (
            f"{kind} spans {span} GPUs across {inter.fabric} "
            f"({inter.busbw_GBps:g} GB/s): expert traffic stays inside a fast domain"
        )
    return ""


def heads_divide(spec: ModelShape, cluster: Cluster, traits: VersionTraits, c: Candidate) -> str:
    if spec.num_attention_heads % c.tp:
        return f"TP{c.tp} does not divide {spec.num_attention_heads} attention heads"
    if not spec.is_mla and not spec.is_dsv4:
        kv = spec.num_kv_heads
        if (kv % c.tp) if kv >= c.tp else (c.tp % kv):
            return f"TP{c.tp} and {kv} KV heads do not divide each other"
    return ""


def pp_is_the_fallback(
    spec: ModelShape, cluster: Cluster, traits: VersionTraits, c: Candidate
) -> str:
    nvlink_inside = cluster.intra_node.link in ("nvswitch", "nvlink-pairs")
    if c.pp > 1 and nvlink_inside and c.tp * c.dp < cluster.gpus_per_node:
        return (
            f"PP{c.pp} puts several stages inside one NVLink node: TP fills the node, "
            "PP is the fallback across slow links"
        )
    return ""


def release_supports_it(
    spec: ModelShape, cluster: Cluster, traits: VersionTraits, c: Candidate
) -> str:
    v = traits.version
    if c.dp > 1 and c.pp > 1 and v < (0, 9, 1):
        return (
            f"DP with PP runs from vLLM 0.9.1 on (0.8.5 gives each DP rank only TP GPUs; "
            f"target {traits.label})"
        )
    if c.dcp > 1 and v < (0, 10, 2):
        return f"DCP needs vLLM 0.10.2 or later (target {traits.label})"
    if c.dcp > 1 and not spec.is_mla and v < (0, 11, 1):
        return f"DCP with GQA attention needs vLLM 0.11.1 or later (target {traits.label})"
    return ""


def dcp_divides_query_groups(
    spec: ModelShape, cluster: Cluster, traits: VersionTraits, c: Candidate
) -> str:
    if c.dcp > 1 and not spec.is_mla:
        group = spec.num_attention_heads // max(spec.num_kv_heads, 1)
        if group % c.dcp:
            return f"DCP{c.dcp} does not divide the {group} query heads per KV head"
    return ""


def multi_node_dp_release(
    spec: ModelShape, cluster: Cluster, traits: VersionTraits, c: Candidate
) -> str:
    if c.dp > 1 and traits.version < (0, 9, 0) and c.gpus > cluster.gpus_per_node:
        return "multi-node data parallel needs vLLM 0.9 or later"
    return ""


def fp8_blocks_split(
    spec: ModelShape, cluster: Cluster, traits: VersionTraits, c: Candidate
) -> str:
    block = fp8_block(spec)
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


RULES: tuple[Rule, ...] = (
    tp_stays_on_fast_links,
    experts_stay_in_fast_domains,
    heads_divide,
    pp_is_the_fallback,
    release_supports_it,
    dcp_divides_query_groups,
    multi_node_dp_release,
    fp8_blocks_split,
)


def reject_reason(spec: ModelShape, cluster: Cluster, traits: VersionTraits, c: Candidate) -> str:
    """The first rule's reason to refuse layout `c`, or "" when every rule lets it through."""
    for rule in RULES:
        reason = rule(spec, cluster, traits, c)
        if reason:
            return reason
    return ""
