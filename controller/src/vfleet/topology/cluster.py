"""The cluster spec: nodes, GPUs and the links between them, written by hand or normalised
from probe facts (vfleet.probe.to_cluster builds it from those). The minimal hand-written form:

    nodes: 2                  # 1-4096
    gpus_per_node: 8          # 1-72
    gpu: H100-SXM-80GB        # a name from `vfleet gpus` or the one nvidia-smi prints
    intra_node: {link: nvswitch, busbw_GBps: 450}    # nvswitch | nvlink-pairs | pcie
    inter_node: {fabric: ethernet, busbw_GBps: 2.9}  # infiniband | roce | ethernet | nvlink
    vllm_version: "0.11.0"    # optional, quoted

Per-node lists are accepted too, with `gpu` and `gpus_per_node` at the top as defaults:

    nodes:
      - name: gpu-a               # RFC 1123 label, unique (default node0, node1, ...)
        address: 10.0.0.11        # IP or DNS name, unique
        gpus: 8
        gpu: H200-SXM-141GB
        bootstrap_interface: ens5f0   # NIC peers reach: NCCL/GLOO_SOCKET_IFNAME
        ib_hcas: [mlx5_0, mlx5_1]     # HCA names, [A-Za-z0-9_.-]{1,32}
        roce_gid_index: 3             # 0-255

Rules (vfleet.documents.cluster_file checks them; each failure is one line with the file, the line
and
the field): unknown keys are refused with the nearest known one; busbw_GBps is NCCL
all-reduce bus bandwidth, finite, above 0 and at most 10000 GB/s; inter_node is required
with more than one node; fabric nvlink needs nvlink_domain_gpus (1-1152, e.g. 72); one GPU
type per cluster (plan each type as its own pool).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from vfleet.catalog.gpus import Gpu
from vfleet.documents.cluster_file import CheckedCluster, check_cluster, checked_from_dict
from vfleet.errors import UserError
from vfleet.inputs.files import load_yaml


@dataclass(frozen=True)
class IntraNode:
    link: str
    busbw_GBps: float


@dataclass(frozen=True)
class InterNode:
    fabric: str
    busbw_GBps: float
    nvlink_domain_gpus: int = 0  # multi-node NVLink (GB200 NVL72-style) domain size


@dataclass(frozen=True)
class Node:
    name: str
    gpus: int
    gpu: Gpu
    address: str | None = None
    # From the probe, or per-node keys of a hand-written list; render uses them for NCCL.
    bootstrap_interface: str | None = None
    ib_hcas: tuple[str, ...] = ()
    roce_gid_index: int | None = None
    gpu_memory_used_gib: float = 0.0  # held by other processes when probed
    link_degraded: str = ""
    """why the health gate warned about this host's link to the others (empty: sound);
    an engine that crosses nodes is kept off it where the sound hosts can hold one"""


@dataclass(frozen=True)
class Cluster:
    nodes: tuple[Node, ...]
    intra_node: IntraNode
    inter_node: InterNode
    vllm_version: str | None = None
    vllm_flags: tuple[str, ...] = field(default_factory=tuple)  # from `vllm serve --help=all`
    inter_node_with_degraded: InterNode | None = None
    """the fabric as measured with the degraded hosts' runs in it; `inter_node` then counts
    the sound hosts' runs only (None: no host's link is degraded)"""

    @property
    def gpu(self) -> Gpu:
        return self.nodes[0].gpu

    @cached_property
    def gpus_per_node(self) -> int:
        return min(n.gpus for n in self.nodes)

    @cached_property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def degraded(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.link_degraded)

    def for_engine(self, engine_gpus: int, heavy_traffic_crosses: bool) -> Cluster:
        """The cluster an engine of `engine_gpus` GPUs is placed on and costed against.

        An engine inside one node never crosses a host's link: it sees the cluster as it is.
        One whose TP or expert traffic crosses nodes is kept on the sound hosts where they
        can hold one such engine (the degraded hosts then idle). Otherwise the sound hosts
        are filled first, and the degraded links are costed at their measured bandwidth only
        if an engine lands on them (pipeline traffic, the rules' way across slow
        links, or a cluster too small to leave them out).
        """
        if not self.degraded or engine_gpus <= self.gpus_per_node:
            return self
        sound = tuple(n for n in self.nodes if not n.link_degraded)
        sound_gpus = sum(n.gpus for n in sound)
        if heavy_traffic_crosses and sound_gpus >= engine_gpus:
            return replace(self, nodes=sound)
        ordered = replace(self, nodes=sound + self.degraded)
        if (self.total_gpus // engine_gpus) * engine_gpus <= sound_gpus:
            return ordered
        return replace(ordered, inter_node=self.inter_node_with_degraded or self.inter_node)


def _build(checked: CheckedCluster) -> Cluster:
    doc = checked.doc
    nodes = tuple(
        Node(
            name=n.name,
            gpus=n.gpus,
            gpu=n.gpu,
            address=n.entry.address if n.entry else None,
            bootstrap_interface=n.entry.bootstrap_interface if n.entry else None,
            ib_hcas=tuple(n.entry.ib_hcas) if n.entry else (),
            roce_gid_index=n.entry.roce_gid_index if n.entry else None,
        )
        for n in checked.nodes
    )
    inter = doc.inter_node
    return Cluster(
        nodes=nodes,
        intra_node=IntraNode(doc.intra_node.link, doc.intra_node.busbw_GBps),
        # One node never crosses a fabric; the placeholder keeps the cost model total.
        inter_node=InterNode(inter.fabric, inter.busbw_GBps, inter.nvlink_domain_gpus)
        if inter
        else InterNode("ethernet", 1.0),
        vllm_version=doc.vllm_version,
    )


def cluster_from_dict(raw: Any) -> Cluster:
    """A cluster spec given as a mapping (no file, so errors carry no line numbers)."""
    return _build(checked_from_dict(raw))


def load_cluster_file(path: Path) -> Cluster:
    """A cluster YAML file. A directory of probe facts is read by vfleet.probe (its
    load.load_cluster takes either), so the plan never imports the probe."""
    if not path.exists():
        raise UserError(f"no cluster spec at {path}: pass a YAML file or a facts directory")
    return _build(check_cluster(load_yaml(path, "cluster spec")))
