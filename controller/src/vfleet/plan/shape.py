"""From a layout and its memory budget to what the cost model needs: per-GPU bytes and
FLOPs, and the link each parallel group crosses."""

from __future__ import annotations

from typing import Any

from vfleet.budget.compute import Budget
from vfleet.budget.params import Layout, component_params, pp_partition, stage_layers
from vfleet.catalog.model_shape import ModelShape
from vfleet.perf import model as perf
from vfleet.plan.candidate import Candidate
from vfleet.topology.cluster import Cluster

# What the GEMMs compute in, by weight format: block FP8 runs FP8 GEMMs on GPUs with FP8;
# weight-only formats (AWQ/GPTQ int4, MXFP4 on Hopper) dequantise into bf16 GEMMs.
COMPUTE_FORMAT = {"fp8": "fp8", "int8": "fp8", "dsv4": "fp8", "nvfp4": "fp4", "mxfp4": "fp4"}


def compute_format(weight_format: str, arch: str) -> str:
    fmt = COMPUTE_FORMAT.get(weight_format, "bf16")
    if fmt == "fp4" and arch != "blackwell":
        return "bf16"  # no FP4 tensor cores before Blackwell: W4A16 kernels
    return fmt


def kernel_format(
    weight_format: str, quantization: dict[str, Any], arch: str, moe_backend: str = ""
) -> str:
    """Which measured kernels run the linear layers (vfleet.perf.kernels.FORMATS)."""
    if weight_format == "mxfp4":
        return "mxfp4_marlin" if moe_backend == "marlin" else "mxfp4"
    if weight_format == "int4":
        return "int4_marlin"  # vLLM runs AWQ/GPTQ experts through Marlin's MoE kernel
    if compute_format(weight_format, arch) == "fp8":
        return "fp8_block" if quantization.get("weight_block_size") else "fp8"
    return "bf16"


SCALE_OUT_PER_GPU_GBPS = 45.0  # 400 Gb/s InfiniBand per GPU, as NCCL reaches it
ROUTED_BACKENDS = (
    "deepep_high_throughput",
    "deepep_low_latency",
    "deepep_v2",
    "pplx",
    "nixl_ep",
    "moonep",
)


def all2all_kind(backend: str | None, version: tuple[int, int, int] = (0, 33, 0)) -> str:
    """How a backend moves tokens: 'routed' sends each token to its experts' ranks only;
    'gather' all-gathers every DP rank's tokens and reduce-scatters the outputs (the default
    from 0.11); 'naive' (the default before 0.11) broadcasts each rank's tokens in turn."""
    name = (backend or ("naive" if version < (0, 11, 0) else "")).lower()
    if name == "naive":
        return "naive"
    if any(b in name for b in ROUTED_BACKENDS) or "deepep" in name or "uccl" in name:
        return "routed"
    return "gather"


def spans(tp: int, dp: int, gpus: int) -> tuple[int, int, int]:
    """(TP group, MoE all-to-all group, PP chain) in GPUs for an engine of `gpus` GPUs.
    vLLM orders ranks DP x PP x TP (TP innermost): a stage's expert group gathers one TP
    group from every DP rank, so with DP it spans the whole engine; PP stays in a DP rank."""
    return tp, (gpus if dp > 1 else tp), gpus // max(dp, 1)


def links(cluster: Cluster, tp: int, dp: int, gpus: int) -> tuple[perf.Link, perf.Link, perf.Link]:
    """(TP link, MoE all-to-all link, PP link) for an engine of `gpus` GPUs."""
    per_node = cluster.gpus_per_node
    intra_kind = "pcie" if cluster.intra_node.link == "pcie" else "nvlink"
    intra = perf.Link(intra_kind, cluster.intra_node.busbw_GBps)
    inter = cluster.inter_node
    domain = inter.nvlink_domain_gpus if inter.fabric == "nvlink" else per_node
    fabric = perf.Link(inter.fabric, inter.busbw_GBps)
    # The measured inter-node busbw is an all-reduce over every rail of a node; an
    # all-to-all gives each GPU only its own share of the rails.
    per_gpu = perf.Link(inter.fabric, inter.busbw_GBps / max(per_node, 1))

    def across(span: int, per_gpu_share: bool) -> perf.Link:
        if span <= per_node:
            return intra
        if inter.fabric == "nvlink" and span <= domain:
            return fabric
        if inter.fabric == "nvlink":
            # Past a multi-node NVLink domain, the racks' scale-out network carries it; the
            # spec does not measure it, so cost it as one 400 Gb/s NIC per GPU.
            return perf.Link(
                "infiniband", SCALE_OUT_PER_GPU_GBPS * (1 if per_gpu_share else per_node)
            )
        return per_gpu if per_gpu_share else fabric

    tp_span, moe_span, pp_span = spans(tp, dp, gpus)
    return across(tp_span, False), across(moe_span, True), across(pp_span, False)


def heavy_traffic_crosses(spec: ModelShape, cluster: Cluster, c: Candidate) -> bool:
    """Whether a layout's TP group or its expert traffic (EP, or MoE sharded over DP) spans
    more than one node."""
    per_node = cluster.gpus_per_node
    tp_span, moe_span, _ = spans(c.tp, c.dp, c.gpus)
    experts = spec.is_moe and (c.ep or c.dp > 1)
    return tp_span > per_node or (experts and moe_span > per_node)


def engine_shape(
    spec: ModelShape,
    budget: Budget,
    cluster: Cluster,
    layout: Layout,
    all2all_backend: str | None = None,
    params: dict[str, int] | None = None,
    version: tuple[int, int, int] = (0, 33, 0),
) -> perf.EngineShape:
    """The heaviest pipeline stage of one engine rank (`params`: the model's component
    counts, when the caller already has them)."""
    tp, pp, dp = layout.tp, layout.pp, layout.dp
    stage = max(budget.stages, key=lambda s: s.weights_bytes)
    weights = budget.weights_by_component_gib
    experts_gib = weights.get("routed_experts", 0.0)
    stage_scale = stage.weights_bytes / max(sum(weights.values()) * (1 << 30), 1)
    expert_bytes = experts_gib * (1 << 30) * stage_scale
    layers = pp_partition(spec.num_layers, pp)
    heaviest = max(range(pp), key=lambda r: layers[r])
    moe_layers = sum(1 for i in stage_layers(spec.num_layers, pp, heaviest) if spec.is_moe_layer(i))
    dense_flops, expert_flops = perf.flops_per_token(spec, params or component_params(spec), tp, pp)
    tp_link, moe_link, pp_link = links(cluster, tp, dp, tp * pp * dp)
    return perf.EngineShape(
        tp=tp,
        pp=pp,
        dp=dp,
        ep=layout.enable_expert_parallel,
        dcp=layout.dcp,
        layers_per_stage=max(layers),
        moe_layers_per_stage=moe_layers,
        dense_bytes_per_gpu=max(stage.weights_bytes - expert_bytes, 0.0),
        expert_bytes_per_gpu=expert_bytes,
        kv_bytes_per_token=stage.kv_bytes_per_token,
        dense_flops_per_token=dense_flops,
        expert_flops_per_token=expert_flops,
        compute=compute_format(budget.weight_format, cluster.gpu.arch),
        kernel_format=kernel_format(
            budget.weight_format, spec.quantization, cluster.gpu.arch, budget.moe_backend
        ),
        all2all=all2all_kind(all2all_backend, version),
        tp_link=tp_link,
        moe_link=moe_link,
        pp_link=pp_link,
    )
