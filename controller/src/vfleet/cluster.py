"""The cluster spec: nodes, GPUs and the links between them, written by hand or normalised
from probe facts. The minimal hand-written form:

    nodes: 2
    gpus_per_node: 8
    gpu: H100-SXM-80GB
    intra_node: {link: nvswitch, busbw_GBps: 450}
    inter_node: {fabric: ethernet, busbw_GBps: 2.9}

Per-node lists are accepted too (`nodes: [{name, address, gpus, gpu}, ...]`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from vfleet.errors import UserError
from vfleet.gpus import Gpu, resolve_gpu

INTRA_LINKS = ("nvswitch", "nvlink-pairs", "pcie")
FABRICS = ("infiniband", "roce", "ethernet", "nvlink")


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
    # Probe extras; absent in a hand-written spec.
    bootstrap_interface: str | None = None
    ib_hcas: tuple[str, ...] = ()
    roce_gid_index: int | None = None
    gpu_memory_used_gib: float = 0.0  # held by other processes when probed


@dataclass(frozen=True)
class ClusterSpec:
    nodes: tuple[Node, ...]
    intra_node: IntraNode
    inter_node: InterNode
    vllm_version: str | None = None
    vllm_flags: tuple[str, ...] = field(default_factory=tuple)  # from `vllm serve --help=all`

    @property
    def gpu(self) -> Gpu:
        return self.nodes[0].gpu

    @cached_property
    def gpus_per_node(self) -> int:
        return min(n.gpus for n in self.nodes)

    @cached_property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)


def _number(raw: Any, what: str, positive: bool = True) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise UserError(f"cluster spec: {what} must be a number, got {raw!r}") from None
    if positive and value <= 0:
        raise UserError(f"cluster spec: {what} must be greater than zero, got {raw!r}")
    return value


def _count(raw: Any, what: str) -> int:
    value = _number(raw, what)
    if value != int(value):
        raise UserError(f"cluster spec: {what} must be a whole number, got {raw!r}")
    return int(value)


def _intra(raw: Any) -> IntraNode:
    if not isinstance(raw, dict) or raw.get("link") not in INTRA_LINKS:
        raise UserError(
            f"cluster spec: intra_node.link must be one of {', '.join(INTRA_LINKS)} "
            "(e.g. intra_node: {link: nvswitch, busbw_GBps: 450})"
        )
    return IntraNode(raw["link"], _number(raw.get("busbw_GBps"), "intra_node.busbw_GBps"))


def _inter(raw: Any, single_node: bool) -> InterNode:
    if raw is None and single_node:
        return InterNode("ethernet", 1.0)
    if not isinstance(raw, dict) or raw.get("fabric") not in FABRICS:
        raise UserError(
            f"cluster spec: inter_node.fabric must be one of {', '.join(FABRICS)} "
            "(e.g. inter_node: {fabric: infiniband, busbw_GBps: 400})"
        )
    domain = int(_number(raw.get("nvlink_domain_gpus", 0), "nvlink_domain_gpus", False))
    if raw["fabric"] == "nvlink" and domain <= 0:
        raise UserError("cluster spec: fabric nvlink needs nvlink_domain_gpus (e.g. 72)")
    return InterNode(raw["fabric"], _number(raw.get("busbw_GBps"), "inter_node.busbw_GBps"), domain)


def _nodes(raw: dict[str, Any]) -> tuple[Node, ...]:
    nodes = raw.get("nodes")
    if isinstance(nodes, list):
        if not nodes:
            raise UserError("cluster spec: nodes is an empty list: name at least one node")
        out, seen = [], set()
        for i, entry in enumerate(nodes):
            if not isinstance(entry, dict):
                raise UserError(f"cluster spec: nodes[{i}] must be a mapping with name and gpus")
            name = str(entry.get("name") or f"node{i}")
            if name in seen:
                raise UserError(f"cluster spec: node {name!r} appears twice: names must be unique")
            seen.add(name)
            gpu_name = entry.get("gpu") or raw.get("gpu")
            if not gpu_name:
                raise UserError(f"cluster spec: node {name!r} has no gpu: set gpu per node or once")
            gpus = entry.get("gpus", raw.get("gpus_per_node"))
            out.append(
                Node(
                    name=name,
                    gpus=_count(gpus, f"node {name} gpus"),
                    gpu=resolve_gpu(str(gpu_name)),
                    address=entry.get("address"),
                )
            )
        return tuple(out)
    count = _count(nodes, "nodes")
    if not raw.get("gpu"):
        raise UserError("cluster spec: gpu is missing: name it as in `vfleet gpus`")
    gpu = resolve_gpu(str(raw["gpu"]))
    per_node = _count(raw.get("gpus_per_node"), "gpus_per_node")
    return tuple(Node(name=f"node{i}", gpus=per_node, gpu=gpu) for i in range(count))


def cluster_from_dict(raw: Any) -> ClusterSpec:
    if not isinstance(raw, dict):
        raise UserError("cluster spec must be a YAML mapping with nodes, gpus_per_node, gpu")
    nodes = _nodes(raw)
    kinds = {n.gpu.name for n in nodes}
    if len(kinds) > 1:
        raise UserError(
            f"cluster mixes GPU types ({', '.join(sorted(kinds))}): plan each type as its own "
            "pool (one cluster file per GPU type)"
        )
    return ClusterSpec(
        nodes=nodes,
        intra_node=_intra(raw.get("intra_node")),
        inter_node=_inter(raw.get("inter_node"), len(nodes) == 1),
        vllm_version=raw.get("vllm_version"),
    )


def load_cluster(path: Path, allow_partial: bool = False) -> ClusterSpec:
    """A cluster YAML file, or a directory of probe facts (artifacts/<env>/facts)."""
    if path.is_dir():
        from vfleet.facts import cluster_from_facts_dir  # probe parsing only when needed

        return cluster_from_facts_dir(path, allow_partial=allow_partial)
    if not path.is_file():
        raise UserError(f"no cluster spec at {path}: pass a YAML file or a facts directory")
    import yaml

    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UserError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    return cluster_from_dict(raw)
