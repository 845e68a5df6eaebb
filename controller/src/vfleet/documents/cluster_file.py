"""The hand-written cluster spec (`vfleet plan --cluster FILE`) as a typed document.

Two forms, as vfleet.topology.cluster documents them: a node count with `gpus_per_node` and `gpu`,
or
a list of nodes. The model checks each value; `check_cluster` then applies the rules that
span fields (unique names and addresses, one GPU type, an inter-node fabric for more than one
node) and resolves GPU names, so every problem is one line naming the file, the line and the
field.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from vfleet.catalog.gpus import Gpu, resolve_gpu
from vfleet.errors import UserError
from vfleet.inputs.files import Document, Path_
from vfleet.inputs.strict import StrictModel
from vfleet.inputs.validate import validate
from vfleet.inputs.values import Address, Interface, Label

INTRA_LINKS = ("nvswitch", "nvlink-pairs", "pcie")
FABRICS = ("infiniband", "roce", "ethernet", "nvlink")
MAX_NODES = 4096
MAX_GPUS_PER_NODE = 72  # a GB200 NVL72 rack seen as one node
MAX_BUSBW_GBPS = 10_000  # well above any NVLink generation; a typo beyond this is a typo
MAX_NVLINK_DOMAIN = 1152  # the largest NVLink domain NVIDIA sells (NVL576 x 2)

_HCA = re.compile(r"[A-Za-z0-9_.-]{1,32}")
_VERSION = re.compile(r"v?[0-9]+(\.[0-9]+){0,3}([+.-][A-Za-z0-9.+_-]*)?")


def check_hca(value: str) -> str:
    if not _HCA.fullmatch(value):
        raise ValueError("must be an HCA name of 1-32 letters, digits, '_', '.' or '-'")
    return value


def check_version(value: str) -> str:
    if len(value) > 64 or not _VERSION.fullmatch(value):
        raise ValueError("must be a vLLM release number")
    return value


NodeCount = Annotated[int, Field(ge=1, le=MAX_NODES)]
GpuCount = Annotated[int, Field(ge=1, le=MAX_GPUS_PER_NODE)]
GpuName = Annotated[str, Field(min_length=1, max_length=100)]
Busbw = Annotated[float, Field(gt=0, le=MAX_BUSBW_GBPS, allow_inf_nan=False)]
Hca = Annotated[str, AfterValidator(check_hca)]
VllmVersion = Annotated[str, AfterValidator(check_version)]


class IntraNodeDoc(StrictModel):
    """How the GPUs inside one node reach each other."""

    link: Literal["nvswitch", "nvlink-pairs", "pcie"]
    """the GPU interconnect in a node: nvswitch, nvlink-pairs or pcie (e.g. nvswitch)"""
    busbw_GBps: Busbw
    """NCCL all-reduce bus bandwidth inside a node in GB/s, up to 10000 (e.g. 450)"""


class InterNodeDoc(StrictModel):
    """How nodes reach each other."""

    fabric: Literal["infiniband", "roce", "ethernet", "nvlink"]
    """the fabric between nodes: infiniband, roce, ethernet or nvlink (e.g. infiniband)"""
    busbw_GBps: Busbw
    """NCCL all-reduce bus bandwidth between nodes in GB/s, up to 10000 (e.g. 350)"""
    nvlink_domain_gpus: Annotated[int, Field(ge=0, le=MAX_NVLINK_DOMAIN)] = 0
    """GPUs in one multi-node NVLink domain, 0-1152, needed with fabric nvlink (e.g. 72)"""


class NodeDoc(StrictModel):
    """One entry of the per-node list."""

    name: Label | None = None
    """the node's host name, unique in the cluster (e.g. gpu-a)"""
    address: Address | None = None
    """the IP address or DNS name peers reach the node at, unique (e.g. 10.0.0.11)"""
    gpus: GpuCount | None = None
    """GPUs on this node, 1-72 (e.g. 8)"""
    gpu: GpuName | None = None
    """the GPU type as in `vfleet gpus` or nvidia-smi (e.g. H100-SXM-80GB)"""
    bootstrap_interface: Interface | None = None
    """the NIC other nodes reach this one through, for NCCL and gloo (e.g. ens5f0)"""
    ib_hcas: Annotated[list[Hca], Field(max_length=64)] = Field(default_factory=list)
    """the InfiniBand/RoCE HCAs NCCL may use (e.g. [mlx5_0, mlx5_1])"""
    roce_gid_index: Annotated[int, Field(ge=0, le=255)] | None = None
    """the RoCE GID index NCCL uses, 0-255 (e.g. 3)"""


class ClusterDoc(StrictModel):
    """A hand-written cluster spec, either form."""

    nodes: NodeCount | Annotated[list[NodeDoc], Field(min_length=1, max_length=MAX_NODES)]
    """a node count, 1-4096 (e.g. 2), or a list of nodes (e.g. [{name: gpu-a, gpus: 8}])"""
    gpus_per_node: GpuCount | None = None
    """GPUs on each node, 1-72 (e.g. 8)"""
    gpu: GpuName | None = None
    """the GPU type as in `vfleet gpus` or nvidia-smi (e.g. H100-SXM-80GB)"""
    intra_node: IntraNodeDoc
    """the link inside a node (e.g. {link: nvswitch, busbw_GBps: 450})"""
    inter_node: InterNodeDoc | None = None
    """the fabric between nodes (e.g. {fabric: infiniband, busbw_GBps: 350})"""
    vllm_version: VllmVersion | None = None
    """the vLLM release the nodes run, quoted (e.g. "0.11.0")"""


@dataclass(frozen=True)
class CheckedNode:
    """One node with the spec's defaults applied and its GPU resolved."""

    name: str
    gpus: int
    gpu: Gpu
    entry: NodeDoc | None  # None in the short form


@dataclass(frozen=True)
class CheckedCluster:
    """A spec that passed every rule, ready to become a vfleet.topology.cluster.Cluster."""

    doc: ClusterDoc
    nodes: tuple[CheckedNode, ...]


def _where(doc: Document, path: Path_) -> str:
    line = doc.line_of(path)
    return doc.source + (f" line {line}" if line else "")


def _dotted(path: Path_) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _fail(doc: Document, path: Path_, message: str) -> UserError:
    return UserError(f"{_where(doc, path)}: {_dotted(path)}: {message}")


def _same_address(value: str) -> str:
    """One spelling per address: 2001:DB8::1 and 2001:db8:0::1, or GPU-A. and gpu-a, are
    the same node."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return value.lower().removesuffix(".")


def _gpu(doc: Document, path: Path_, name: str) -> Gpu:
    try:
        return resolve_gpu(name)
    except UserError as exc:
        raise _fail(doc, path, str(exc)) from None


def _list_nodes(doc: Document, spec: ClusterDoc, entries: list[NodeDoc]) -> list[CheckedNode]:
    out: list[CheckedNode] = []
    names: dict[str, int] = {}
    addresses: dict[str, int] = {}
    resolved: dict[str, Gpu] = {}
    for i, entry in enumerate(entries):
        name = entry.name or f"node{i}"
        first = names.setdefault(name.lower(), i)
        if first != i:
            raise _fail(
                doc,
                ("nodes", i, "name"),
                f"node name {name!r} appears twice (nodes[{first}] and nodes[{i}]): "
                "names must be unique",
            )
        if entry.address is not None:
            other = addresses.setdefault(_same_address(entry.address), i)
            if other != i:
                raise _fail(
                    doc,
                    ("nodes", i, "address"),
                    f"address {entry.address!r} appears twice (nodes {out[other].name!r} and "
                    f"{name!r}): give each node its own address",
                )
        gpus = entry.gpus if entry.gpus is not None else spec.gpus_per_node
        if gpus is None:
            raise _fail(
                doc, ("nodes", i, "gpus"), "is missing: set gpus on the node or gpus_per_node"
            )
        gpu_name = entry.gpu or spec.gpu
        if gpu_name is None:
            raise _fail(
                doc, ("nodes", i, "gpu"), "is missing: set gpu on the node or once at the top"
            )
        if gpu_name not in resolved:
            where: Path_ = ("nodes", i, "gpu") if entry.gpu else ("gpu",)
            resolved[gpu_name] = _gpu(doc, where, gpu_name)
        out.append(CheckedNode(name, gpus, resolved[gpu_name], entry))
    return out


def check_cluster(doc: Document) -> CheckedCluster:
    """`doc` as a checked cluster spec, or a UserError naming the first problem."""
    if doc.data is None:
        raise UserError(f"{doc.source}: the cluster spec is empty: write nodes, gpus_per_node, gpu")
    if not isinstance(doc.data, dict):
        raise UserError(
            f"{doc.source}: a cluster spec must be a YAML mapping with nodes, gpus_per_node, gpu"
        )
    listed = doc.data.get("nodes")
    # pydantic would blame the int member of the union ("should be a valid integer").
    if isinstance(listed, list) and not 1 <= len(listed) <= MAX_NODES:
        raise _fail(
            doc,
            ("nodes",),
            f"lists {len(listed)} nodes: list 1 to {MAX_NODES} (e.g. [{{name: gpu-a, gpus: 8}}])",
        )
    spec = validate(ClusterDoc, doc)
    if isinstance(spec.nodes, list):
        nodes = _list_nodes(doc, spec, spec.nodes)
    else:
        if spec.gpu is None:
            raise _fail(doc, ("gpu",), "is missing: name the GPU as in `vfleet gpus`")
        if spec.gpus_per_node is None:
            raise _fail(doc, ("gpus_per_node",), "is missing: write the GPUs per node (e.g. 8)")
        gpu = _gpu(doc, ("gpu",), spec.gpu)
        nodes = [CheckedNode(f"node{i}", spec.gpus_per_node, gpu, None) for i in range(spec.nodes)]
    kinds = sorted({n.gpu.name for n in nodes})
    if len(kinds) > 1:
        raise _fail(
            doc,
            ("nodes",),
            f"cluster mixes GPU types ({', '.join(kinds)}): plan each type as its own pool "
            "(one cluster file per GPU type)",
        )
    inter = spec.inter_node
    if inter is None and len(nodes) > 1:
        raise _fail(
            doc,
            ("inter_node",),
            f"is missing: {len(nodes)} nodes need inter_node.fabric ({', '.join(FABRICS)}) and "
            "busbw_GBps (e.g. inter_node: {fabric: infiniband, busbw_GBps: 350})",
        )
    if inter is not None and inter.fabric == "nvlink" and inter.nvlink_domain_gpus <= 0:
        raise _fail(
            doc,
            ("inter_node", "nvlink_domain_gpus"),
            "fabric nvlink needs nvlink_domain_gpus, the GPUs in one NVLink domain (e.g. 72)",
        )
    return CheckedCluster(spec, tuple(nodes))


def checked_from_dict(raw: Any, source: str = "cluster spec") -> CheckedCluster:
    """A spec that arrives as a mapping (tests, callers that built it): no line numbers."""
    return check_cluster(Document(raw, source))
