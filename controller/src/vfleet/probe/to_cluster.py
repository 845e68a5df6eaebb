"""Normalised host facts -> the Cluster the planner consumes: one Node per host, the
intra-node link and inter-node fabric, their bandwidth (measured, or a documented
expectation), NVLink domains, and the vLLM version and flags every host shares. Kept apart
from normalisation so a caller can read the facts once (`load_facts_dir`), check each host,
and build the cluster from that same list (`cluster_from_facts`).

`cluster_from_facts(hosts, allow_partial=False)` builds the Cluster: one Node per host
(name = host; ib_hcas = the active RDMA ports of the fabric's link layer, less the bootstrap
NIC's own port when there are others; roce_gid_index = their RoCE v2 GID, IPv4 first;
gpu_memory_used_gib from the busiest GPU). The intra-node link is the weakest class over the
multi-GPU hosts with the lowest measured busbw; the inter-node fabric is the one every host
has (InfiniBand, else RoCE, else Ethernet) with the lowest measured inter busbw, else
iperf3. It refuses, naming the host and field: an empty directory, unreadable files, zero or
unknown GPUs, hosts with different GPU types or vLLM versions, a multi-GPU host without
topology, and, unless `allow_partial`, a failed probe or a bandwidth the plan needs but
nobody measured (intra for multi-GPU hosts, inter or iperf3 for several hosts).

Where a bandwidth was not measured (only with `allow_partial`, or where it is never used: a
single GPU or a single host) the spec carries an expectation, an assumption rather than a
measurement:

    intra nvswitch      half the catalog's bidirectional NVLink figure, i.e. one direction
                        (H100/H200: 450 GB/s, near the 440-480 GB/s 8-GPU all_reduce busbw
                        health checks use; B200/GB200: 900); 450 when the catalog has none
    intra nvlink-pairs  NVLink count of the weakest pair x the per-link speed (25 GB/s when
                        `nvlink -s` was not captured) when every pair is linked, else pcie
    intra pcie          25 GB/s (PCIe Gen4 x16 in practice)
    inter infiniband/roce   sum of the active RDMA rails in Gb/s / 8 x 0.9
    inter ethernet      bootstrap NIC speed / 8 x 0.9; unknown speed: 10 GbE
    inter nvlink        the intra nvswitch expectation
    iperf3 only         Gbit/s / 8 x 0.9

`degraded` (host -> why the health gate warned about its link) marks those Nodes
`link_degraded`; the inter-node fabric is then measured over the runs among the other hosts,
and the figure with the degraded hosts' runs in it is kept as `inter_node_with_degraded`,
what the planner costs an engine at when it has to reach onto them.

Hosts whose GPUs share one multi-node NVLink clique make the inter-node fabric `nvlink` with
`nvlink_domain_gpus` = their GPUs together.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from vfleet.catalog.gpus import Gpu, resolve_gpu
from vfleet.errors import UserError
from vfleet.probe.normalize import load_facts_file
from vfleet.probe.text_numbers import significant
from vfleet.topology.cluster import Cluster, InterNode, IntraNode, Node

NVLINK_LINK_GBPS = 25.0  # one NVLink 3/4 link, one direction
NVSWITCH_EXPECTED_GBPS = 450.0  # H100-class 8-GPU all_reduce busbw
PCIE_EXPECTED_GBPS = 25.0
UNKNOWN_ETHERNET_MBPS = 10_000
WIRE_EFFICIENCY = 0.9  # busbw reached on a network link, as a share of its line rate
LINK_RANK = {"pcie": 0, "nvlink-pairs": 1, "nvswitch": 2}


def _active_rails(facts: dict[str, Any], link_layer: str) -> list[dict[str, Any]]:
    """Active RDMA ports of one link layer, minus the bootstrap NIC's own port when
    others exist (a frontend NIC is not a GPU rail)."""
    ports = [
        h
        for h in facts.get("hcas") or []
        if h.get("state") == "ACTIVE" and h.get("link_layer") == link_layer
    ]
    if link_layer == "Ethernet":
        ports = [h for h in ports if h.get("roce_gid_index") is not None]
    boot = facts.get("bootstrap_interface")
    rails = [h for h in ports if boot not in (h.get("netdevs") or [])]
    return rails or ports


def _host_fabric(facts: dict[str, Any]) -> str:
    if _active_rails(facts, "InfiniBand"):
        return "infiniband"
    if _active_rails(facts, "Ethernet"):
        return "roce"
    return "ethernet"


def _rail_names(rails: list[dict[str, Any]]) -> tuple[str, ...]:
    """NCCL_IB_HCA names: the device for port 1, device:port for the others."""
    names = (h["name"] if int(h.get("port", 1)) == 1 else f"{h['name']}:{h['port']}" for h in rails)
    return tuple(sorted(names))


def _intra_expected(link: str, gpu: Gpu, facts: dict[str, Any]) -> float:
    if link == "nvswitch":
        return gpu.nvlink_gb_s / 2 if gpu.nvlink_gb_s > 0 else NVSWITCH_EXPECTED_GBPS
    if link == "nvlink-pairs":
        matrix = (facts.get("topology") or {}).get("matrix") or {}
        counts = [
            int(m.group(1)) if (m := re.fullmatch(r"NV(\d+)", cell)) else 0
            for a, row in matrix.items()
            for b, cell in row.items()
            if a != b
        ]
        per_link = (facts.get("nvlink") or {}).get("link_GBps") or NVLINK_LINK_GBPS
        if counts and min(counts) > 0:
            return min(counts) * per_link
    return PCIE_EXPECTED_GBPS


def _inter_expected(fabric: str, facts: dict[str, Any]) -> float:
    if fabric in ("infiniband", "roce"):
        layer = "InfiniBand" if fabric == "infiniband" else "Ethernet"
        gbps = sum(h.get("rate_gbps") or 0 for h in _active_rails(facts, layer))
        if gbps > 0:
            return gbps / 8 * WIRE_EFFICIENCY
    boot = facts.get("bootstrap_interface")
    speed = next(
        (n.get("speed_mbps") for n in facts.get("nics") or [] if n.get("name") == boot), -1
    )
    mbps = speed if isinstance(speed, int) and speed > 0 else UNKNOWN_ETHERNET_MBPS
    return mbps / 8000 * WIRE_EFFICIENCY


def iperf3_among(hosts: list[dict[str, Any]]) -> list[float]:
    """The iperf3 runs between the hosts planned on. A run to a host the plan left out (the
    health gate's slow end) says nothing about the links the plan uses; only when no run
    stays are they all kept, as a lower bound."""
    runs = [
        (peer, float(v))
        for f in hosts
        for peer, v in ((f.get("bandwidth") or {}).get("iperf3_Gbps") or {}).items()
    ]
    planned = {f["address"] for f in hosts if f.get("address")}
    among = [v for peer, v in runs if peer in planned]
    return among or [v for _, v in runs]


def _missing_bandwidth(host: str, what: str, how: str) -> UserError:
    return UserError(
        f"facts for host {host}: bandwidth.{what} was not measured: rerun the probe with "
        f"{how}, or pass allow_partial to plan on the documented expectation"
    )


def _node(facts: dict[str, Any], allow_partial: bool) -> Node:
    host = facts["host"]
    if facts.get("probe_failed") and not allow_partial:
        errors = " ".join("; ".join(facts.get("errors") or []).split()) or "no reason recorded"
        raise UserError(
            f"facts for host {host}: the probe failed ({errors}): fix that and rerun the "
            "probe, or pass allow_partial to plan on what it did collect"
        )
    count = facts["gpu_count"]
    if count <= 0:
        why = " ".join("; ".join(facts.get("errors") or []).split()) or "nvidia-smi listed no GPU"
        raise UserError(
            f"facts for host {host}: field gpu_count is 0 ({why}): check the driver with "
            "`nvidia-smi` on the host and rerun the probe"
        )
    try:
        gpu = resolve_gpu(facts["gpu_name"])
    except UserError as exc:
        raise UserError(f"facts for host {host}: field gpu_name: {exc}") from None
    used = facts.get("gpu_memory_used_mib") or 0
    fabric = _host_fabric(facts)
    rails = _active_rails(facts, "InfiniBand" if fabric == "infiniband" else "Ethernet")
    return Node(
        name=host,
        gpus=count,
        gpu=gpu,
        address=facts.get("address"),
        bootstrap_interface=facts.get("bootstrap_interface"),
        ib_hcas=_rail_names(rails) if fabric != "ethernet" else (),
        roce_gid_index=(min(h["roce_gid_index"] for h in rails) if fabric == "roce" else None),
        gpu_memory_used_gib=round(float(used) / 1024, 3),
    )


def _intra(hosts: list[dict[str, Any]], nodes: list[Node], allow_partial: bool) -> IntraNode:
    links, speeds = [], []
    for facts, node in zip(hosts, nodes, strict=True):
        link = (facts.get("topology") or {}).get("intra_link")
        if node.gpus < 2:
            continue  # one GPU never sends over an intra-node link
        if link not in LINK_RANK:
            raise UserError(
                f"facts for host {node.name}: field topology.intra_link is {link!r} for "
                f"{node.gpus} GPUs (nvidia-smi topo -m missing): rerun the topology probe"
            )
        links.append(link)
        measured = (facts.get("bandwidth") or {}).get("intra_allreduce_busbw_GBps")
        if measured is None and not allow_partial:
            raise _missing_bandwidth(
                node.name, "intra_allreduce_busbw_GBps", "topology_probe_measure_intra: true"
            )
        speeds.append(measured if measured else _intra_expected(link, node.gpu, facts))
    if not links:
        return IntraNode("pcie", PCIE_EXPECTED_GBPS)  # single-GPU hosts: never used
    # The weakest host bounds every layout that spans a node.
    return IntraNode(min(links, key=LINK_RANK.__getitem__), significant(min(speeds)))


def _nvlink_domains(hosts: list[dict[str, Any]], nodes: list[Node]) -> dict[Any, int]:
    domains: dict[Any, int] = {}
    for facts, node in zip(hosts, nodes, strict=True):
        fabric = facts.get("fabric") or {}
        if fabric.get("multi_node"):
            key = (fabric.get("cluster_uuid"), fabric.get("clique_id"))
            domains[key] = domains.get(key, 0) + node.gpus
        else:
            domains[("host", node.name)] = node.gpus
    return domains


def _inter(hosts: list[dict[str, Any]], nodes: list[Node], allow_partial: bool) -> InterNode:
    domains = _nvlink_domains(hosts, nodes)
    spanning = [size for key, size in domains.items() if key[0] != "host"]
    per_host = [_host_fabric(f) for f in hosts]
    fabric = per_host[0] if len(set(per_host)) == 1 else "ethernet"  # RDMA needs it everywhere
    domain_gpus = 0
    if len(domains) == 1 and spanning and len(nodes) > 1:
        fabric, domain_gpus = "nvlink", spanning[0]
    elif len(spanning) > 0 and len(nodes) > 1:
        domain_gpus = min(domains.values())  # NVLink inside each clique, `fabric` between
    measured = [
        v
        for f in hosts
        if (v := (f.get("bandwidth") or {}).get("inter_allreduce_busbw_GBps")) is not None
    ]
    iperf = iperf3_among(hosts)
    if len(nodes) > 1 and measured and (len(measured) == len(hosts) or allow_partial):
        busbw = min(measured)
    elif len(nodes) > 1 and iperf:
        busbw = min(iperf) / 8 * WIRE_EFFICIENCY
    elif len(nodes) > 1 and not allow_partial:
        first = next(
            n.name
            for f, n in zip(hosts, nodes, strict=True)
            if (f.get("bandwidth") or {}).get("inter_allreduce_busbw_GBps") is None
        )
        raise _missing_bandwidth(
            first,
            "inter_allreduce_busbw_GBps (and no iperf3_Gbps)",
            "topology_probe_measure_inter: true",
        )
    elif fabric == "nvlink":
        busbw = _intra_expected("nvswitch", nodes[0].gpu, hosts[0])
    else:
        busbw = min(_inter_expected(fabric, f) for f in hosts)
    return InterNode(fabric, significant(busbw), domain_gpus)


def _vllm(hosts: list[dict[str, Any]]) -> tuple[str | None, tuple[str, ...]]:
    versions = {
        f["host"]: v for f in hosts if (v := (f.get("vllm") or {}).get("version")) is not None
    }
    if len(set(versions.values())) > 1:
        seen = ", ".join(f"{h} {v}" for h, v in sorted(versions.items()))
        raise UserError(
            f"hosts run different vLLM versions ({seen}): install one version everywhere "
            "and rerun the probe"
        )
    flag_sets = [set(fl) for f in hosts if (fl := (f.get("vllm") or {}).get("flags"))]
    flags = tuple(sorted(set.intersection(*flag_sets))) if flag_sets else ()
    return (next(iter(versions.values()), None), flags)


def cluster_from_facts(
    hosts: Sequence[dict[str, Any]],
    allow_partial: bool = False,
    degraded: Mapping[str, str] | None = None,
) -> Cluster:
    """The Cluster from normalised facts, one dict per host, as `normalize`,
    `load_facts_file` or `load_facts_dir` return them (checked by the facts model).
    `allow_partial` plans on failed probes and unmeasured bandwidth (see the module doc).
    `degraded`: host -> why the health gate warned about its link; the inter-node fabric is
    then measured among the other hosts, and with them all as `inter_node_with_degraded`."""
    hosts = list(hosts)
    degraded = {h: why for h, why in (degraded or {}).items() if why}
    if not hosts:
        raise UserError("no probe facts given: run the topology probe first")
    seen: set[str] = set()
    for facts in hosts:
        host = facts["host"]
        if host in seen:
            raise UserError(f"facts for host {host} appear twice: keep one file per host")
        seen.add(host)
    nodes = [
        replace(_node(f, allow_partial), link_degraded=degraded.get(f["host"], "")) for f in hosts
    ]
    kinds = {n.gpu.name for n in nodes}
    if len(kinds) > 1:
        listing = ", ".join(f"{n.name}: {n.gpu.name}" for n in nodes)
        raise UserError(
            f"hosts disagree on GPU type ({listing}): plan each GPU type as its own pool "
            "(one facts directory per type)"
        )
    intra = _intra(hosts, nodes, allow_partial)
    inter = _inter(hosts, nodes, allow_partial)
    with_degraded = None
    sound = [(f, n) for f, n in zip(hosts, nodes, strict=True) if not n.link_degraded]
    if degraded and len(sound) > 1:
        with_degraded = inter
        inter = _inter([f for f, _ in sound], [n for _, n in sound], allow_partial)
    version, flags = _vllm(hosts)
    return Cluster(
        nodes=tuple(nodes),
        intra_node=intra,
        inter_node=inter,
        vllm_version=version,
        vllm_flags=flags,
        inter_node_with_degraded=with_degraded,
    )


def load_facts_dir(path: Path) -> list[dict[str, Any]]:
    """Every host's normalised facts in a facts directory (artifacts/<env>/facts: *.json, in
    name order), each read and checked by `load_facts_file`. Read the directory once and pass
    the list both to `cluster_from_facts` and to per-host checks (probe_failed, GPU counts),
    so they judge the same files."""
    # Everything but folders is read, so a pipe or a dangling link is refused by name
    # rather than skipped without a word.
    files = sorted(p for p in path.glob("*.json") if not p.is_dir())
    if not files:
        raise UserError(
            f"no probe facts (*.json) in {path}: run the topology probe (ansible role "
            "topology_probe) or point at the facts directory it wrote"
        )
    return [load_facts_file(p) for p in files]


def cluster_from_facts_dir(path: Path, allow_partial: bool = False) -> Cluster:
    """The Cluster from a directory of per-host probe facts (artifacts/<env>/facts)."""
    return cluster_from_facts(load_facts_dir(Path(path)), allow_partial=allow_partial)
