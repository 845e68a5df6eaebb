"""Probe facts: what the topology probe saw on each GPU host, parsed and normalised, and the
cluster spec built from a directory of them.

Input is one JSON file per host in `artifacts/<env>/facts/`, as the collector
(`ansible/roles/topology_probe/files/vfleet_probe.py`, schema `vfleet.probe/1`) writes it:
raw command outputs under `commands` (`nvidia_smi_query` = `nvidia-smi -q -x`,
`nvidia_smi_topo` = `nvidia-smi topo -m`, `nvidia_smi_nvlink` = `nvidia-smi nvlink -s`,
`lscpu`, `numactl` = `numactl -H`, `fabricmanager` = `systemctl is-active
nvidia-fabricmanager`, `vllm_help` = `vllm serve --help=all`), each
`{argv, rc, stdout, stderr, error}`; sysfs records under `sysfs` (`infiniband`, `net`,
`pci_nvidia`); files under `files` (`/proc/net/route`, `/proc/meminfo`); the `python`
section (vLLM/torch/NCCL versions read in the given venv); `route_to` (the source address
the kernel picks towards the cluster); measurements under `bandwidth`; `probe_failed` and
`errors`. Parsing happens here, on the controller, so it is tested against real captures.

`normalize(raw)` turns that into the normalised facts (schema `vfleet.probe.facts/1`); a file
that already holds normalised facts is checked and taken as is, so facts can be written by
hand. The model `vfleet.spec.facts.FactsModel` is the schema: its field docstrings say what
each key holds (host, address, gpus, gpu_name, gpu_count, topology, nvlink, fabric, hcas,
nics, bootstrap_interface, cpu, versions, vllm, bandwidth, probe_failed, errors, notes), and
vfleet/schemas/facts.schema.json is generated from it. Both what `normalize` builds and
what a hand-written file holds pass through that model, so every problem is one line naming
the file, the field and what it should hold.

`cluster_from_facts_dir(path, allow_partial=False)` builds the ClusterSpec: one Node per
file (name = host; ib_hcas = the active RDMA ports of the fabric's link layer, less the
bootstrap NIC's own port when there are others; roce_gid_index = their RoCE v2 GID, IPv4
first; gpu_memory_used_gib from the busiest GPU). The intra-node link is the weakest class
over the multi-GPU hosts with the lowest measured busbw; the inter-node fabric is the one
every host has (InfiniBand, else RoCE, else Ethernet) with the lowest measured inter busbw,
else iperf3. It refuses, naming the host and field: an empty directory, unreadable files,
zero or unknown GPUs, hosts with different GPU types or vLLM versions, a multi-GPU host
without topology, and, unless `allow_partial`, a failed probe or a bandwidth the plan needs
but nobody measured (intra for multi-GPU hosts, inter or iperf3 for several hosts).

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

Multi-node NVLink (GB200 NVL72-style): a GPU's fabric counts when state is Completed,
status Success, and clique id and cluster UUID are non-zero (the checks Azure/azhpc-images
PR #506 applies). Hosts that share one clique make the inter-node fabric `nvlink` with
`nvlink_domain_gpus` = their GPUs together.
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vfleet.catalog.gpus import Gpu, resolve_gpu
from vfleet.errors import UserError
from vfleet.plan.cluster import ClusterSpec, InterNode, IntraNode, Node
from vfleet.spec.facts import FACTS_SCHEMA, FactsModel
from vfleet.spec.files import Document, parse_json, read_text
from vfleet.spec.validate import validate

PROBE_SCHEMA = "vfleet.probe/1"

# Most NVLinks one GPU has (H100/H200/B200: 18). A direct mesh splits them among its peers,
# so more links per pair x peers than this means the pairs meet in an NVSwitch.
MAX_DIRECT_NVLINKS = 18
NVLINK_LINK_GBPS = 25.0  # one NVLink 3/4 link, one direction
NVSWITCH_EXPECTED_GBPS = 450.0  # H100-class 8-GPU all_reduce busbw
PCIE_EXPECTED_GBPS = 25.0
UNKNOWN_ETHERNET_MBPS = 10_000
WIRE_EFFICIENCY = 0.9  # busbw reached on a network link, as a share of its line rate
LINK_RANK = {"pcie": 0, "nvlink-pairs": 1, "nvswitch": 2}

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_ZERO_UUID = re.compile(r"^[0-]+$")
_VLLM_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")


# ---------------------------------------------------------------- nvidia-smi -q -x


@dataclass(frozen=True)
class GpuFabric:
    state: str | None = None
    status: str | None = None
    clique_id: int | None = None
    cluster_uuid: str | None = None
    health: str | None = None

    @property
    def multi_node(self) -> bool:
        """Registered in a multi-node NVLink fabric; H100 can say Completed with a zero UUID."""
        return (
            self.state == "Completed"
            and self.status == "Success"
            and bool(self.clique_id)
            and self.cluster_uuid is not None
            and not _ZERO_UUID.match(self.cluster_uuid)
        )


@dataclass(frozen=True)
class SmiGpu:
    index: int
    name: str
    uuid: str | None
    pci_bus_id: str | None
    architecture: str | None
    memory_total_mib: int | None
    memory_used_mib: int | None
    memory_reserved_mib: int | None
    module_id: str | None
    fabric: GpuFabric


@dataclass(frozen=True)
class SmiReport:
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[SmiGpu, ...]


def _text(node: ET.Element | None, path: str) -> str | None:
    """Element text with nvidia-smi's placeholders ('N/A', 'Not Supported') as None."""
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    if not value or value in ("N/A", "Not Supported", "[N/A]", "Unknown Error"):
        return None
    return value


def _mib(text: str | None) -> int | None:
    if text is None:
        return None
    match = re.match(r"^\s*(\d+)\s*MiB\s*$", text)
    return int(match.group(1)) if match else None


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text, 0) if text is not None else None
    except ValueError:
        return None


def parse_nvidia_smi_xml(text: str) -> SmiReport:
    """`nvidia-smi -q -x`: product name, memory, PCI bus id and fabric per GPU."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"nvidia-smi -q -x output is not valid XML ({exc})") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"nvidia-smi -q -x output has root <{root.tag}>, not <nvidia_smi_log>")
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        name = _text(gpu, "product_name")
        if name is None:
            raise ValueError(f"GPU {index} in nvidia-smi -q -x has no product_name")
        fabric = gpu.find("fabric")
        gpus.append(
            SmiGpu(
                index=index,
                name=name,
                uuid=_text(gpu, "uuid"),
                pci_bus_id=_text(gpu, "pci/pci_bus_id") or gpu.get("id"),
                architecture=_text(gpu, "product_architecture"),
                memory_total_mib=_mib(_text(gpu, "fb_memory_usage/total")),
                memory_used_mib=_mib(_text(gpu, "fb_memory_usage/used")),
                memory_reserved_mib=_mib(_text(gpu, "fb_memory_usage/reserved")),
                module_id=_text(gpu, "platformInfo/module_id"),
                fabric=GpuFabric(
                    state=_text(fabric, "state"),
                    status=_text(fabric, "status"),
                    clique_id=_int_or_none(_text(fabric, "cliqueId")),
                    cluster_uuid=_text(fabric, "clusterUuid"),
                    health=_text(fabric, "health/summary"),
                ),
            )
        )
    return SmiReport(_text(root, "driver_version"), _text(root, "cuda_version"), tuple(gpus))


# ---------------------------------------------------------------- nvidia-smi topo -m


@dataclass(frozen=True)
class TopoMatrix:
    gpus: tuple[str, ...]  # GPU0, GPU1, ...
    nics: dict[str, str]  # column label -> device name (NIC0 -> mlx5_0; mlx5_0 -> mlx5_0)
    cells: dict[str, dict[str, str]]  # row label -> column label -> X/NV#/PIX/...
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    gpu_numa_id: dict[str, str] = field(default_factory=dict)

    def nv_count(self, a: str, b: str) -> int:
        match = re.fullmatch(r"NV(\d+)", self.cells.get(a, {}).get(b, ""))
        return int(match.group(1)) if match else 0

    def gpu_matrix(self) -> dict[str, dict[str, str]]:
        return {a: {b: self.cells[a][b] for b in self.gpus} for a in self.gpus}

    def gpu_nic(self) -> dict[str, dict[str, str]]:
        return {a: {name: self.cells[a][col] for col, name in self.nics.items()} for a in self.gpus}


def _split_cells(line: str) -> list[str]:
    # nvidia-smi separates with tabs; pasted copies often carry runs of spaces instead.
    if "\t" in line:
        return [cell.strip() for cell in line.split("\t")]
    return re.split(r"\s{2,}", line.strip())


def parse_topo_matrix(text: str) -> TopoMatrix:
    """`nvidia-smi topo -m`: the device matrix, NIC legend and CPU/NUMA affinity columns."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header_at = next(
        (
            i
            for i, line in enumerate(lines)
            if "GPU0" in line.split() and "X" not in line.split() and "=" not in line
        ),
        None,
    )
    if header_at is None:
        raise ValueError("nvidia-smi topo -m output has no header row with GPU0")
    header = [cell for cell in _split_cells(lines[header_at]) if cell]
    devices = [cell for cell in header if cell not in _AFFINITY_COLUMNS]
    extra = [cell for cell in header if cell in _AFFINITY_COLUMNS]
    width = len(devices)
    cells: dict[str, dict[str, str]] = {}
    affinity: dict[str, dict[str, str]] = {name: {} for name in _AFFINITY_COLUMNS}
    legend: dict[str, str] = {}
    in_legend = False
    for line in lines[header_at + 1 :]:
        stripped = line.strip()
        if stripped.startswith("NIC Legend"):
            in_legend = True
            continue
        if in_legend:
            match = re.match(r"^(NIC\d+):\s*(\S+)$", stripped)
            if match:
                legend[match.group(1)] = match.group(2)
            continue
        if not stripped or stripped.startswith("Legend"):
            continue
        if "\t" in line:
            row = [cell.strip() for cell in line.split("\t")]
            label, values = row[0], row[1 : 1 + width]
            rest = [cell for cell in row[1 + width :] if cell]
        else:
            tokens = stripped.split()
            label, values, rest = tokens[0], tokens[1 : 1 + width], tokens[1 + width :]
        if label not in devices:
            continue
        if len(values) < width:
            raise ValueError(
                f"nvidia-smi topo -m row {label} has {len(values)} cells for {width} columns"
            )
        cells[label] = dict(zip(devices, values, strict=True))
        for column, value in zip(extra, rest, strict=False):
            affinity[column][label] = value
    gpus = tuple(d for d in devices if re.fullmatch(r"GPU\d+", d))
    missing = [g for g in gpus if g not in cells]
    if missing:
        raise ValueError(f"nvidia-smi topo -m has no row for {', '.join(missing)}")
    nics = {d: legend.get(d, d) for d in devices if d not in gpus}
    return TopoMatrix(
        gpus=gpus,
        nics=nics,
        cells=cells,
        cpu_affinity={g: v for g, v in affinity["CPU Affinity"].items() if g in gpus},
        numa_affinity={g: v for g, v in affinity["NUMA Affinity"].items() if g in gpus},
        gpu_numa_id={g: v for g, v in affinity["GPU NUMA ID"].items() if g in gpus},
    )


def classify_intra(topo: TopoMatrix, switch_evidence: bool) -> tuple[str, str]:
    """The intra-node link class and why: nvswitch, nvlink-pairs, pcie, or none (1 GPU)."""
    gpus = topo.gpus
    if len(gpus) < 2:
        return "none", "one GPU: no GPU-to-GPU link"
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]
    counts = [topo.nv_count(a, b) for a, b in pairs]
    linked = [c for c in counts if c]
    if not linked:
        kinds = sorted({topo.cells[a][b] for a, b in pairs})
        return "pcie", f"no NVLink between the {len(pairs)} GPU pairs ({'/'.join(kinds)})"
    if len(linked) == len(pairs):
        equal = len(set(linked)) == 1
        switch_shaped = equal and linked[0] * (len(gpus) - 1) > MAX_DIRECT_NVLINKS
        nv = f"NV{linked[0]}" if equal else f"NV{min(linked)}-NV{max(linked)}"
        if switch_shaped or switch_evidence:
            why = "NVSwitch/fabric seen" if switch_evidence else "more links than a direct mesh"
            return "nvswitch", f"all {len(pairs)} GPU pairs {nv} ({why})"
        return "nvlink-pairs", f"all {len(pairs)} GPU pairs NVLinked directly ({nv})"
    note = "; NVSwitch present, so NVLink is degraded" if switch_evidence else ""
    return "nvlink-pairs", f"{len(linked)} of {len(pairs)} GPU pairs NVLinked{note}"


# ---------------------------------------------------------------- nvidia-smi nvlink -s


@dataclass(frozen=True)
class NvlinkStatus:
    links_per_gpu: tuple[int, ...]
    link_GBps: float | None


def parse_nvlink_status(text: str) -> NvlinkStatus:
    """`nvidia-smi nvlink -s`: active links per GPU and the per-link speed (GB/s)."""
    per_gpu: list[int] = []
    speeds: list[float] = []
    for line in text.splitlines():
        if re.match(r"^GPU \d+:", line.strip()):
            per_gpu.append(0)
            continue
        match = re.match(r"^\s*Link \d+:\s*([\d.]+)\s*GB/s", line)
        if match and per_gpu:
            per_gpu[-1] += 1
            speeds.append(float(match.group(1)))
    return NvlinkStatus(tuple(per_gpu), max(speeds) if speeds else None)


# ---------------------------------------------------------------- sysfs: IB/RoCE and NICs


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str
    type: str | None
    ndev: str | None


@dataclass(frozen=True)
class HcaPort:
    name: str
    port: int
    state: str | None
    phys_state: str | None
    rate: str | None
    rate_gbps: float | None
    link_layer: str | None
    netdevs: tuple[str, ...]
    gids: tuple[Gid, ...]

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"

    @property
    def roce_gid_index(self) -> int | None:
        return roce_gid_index(self.gids) if self.link_layer == "Ethernet" else None


def _sysfs_enum(text: str | None) -> str | None:
    """'4: ACTIVE' -> 'ACTIVE'; '5: LinkUp' -> 'LinkUp'."""
    if text is None:
        return None
    return text.strip().split(":", 1)[-1].strip() or None


def parse_ib_rate(text: str | None) -> float | None:
    """The kernel's '%d Gb/sec (%dX%s)' rate, e.g. '400 Gb/sec (4X NDR)' -> 400.0."""
    match = re.match(r"^\s*([\d.]+)\s*Gb/sec", text or "")
    return float(match.group(1)) if match else None


def roce_gid_index(gids: Iterable[Gid]) -> int | None:
    """The GID NCCL_IB_GID_INDEX should name: RoCE v2 over IPv4 first, then a RoCE v2
    global GID; link-local GIDs fail across subnets (NVIDIA/nccl#426, #769)."""
    v2 = [g for g in gids if (g.type or "").strip().lower() == "roce v2"]
    ipv4 = [g for g in v2 if g.gid.lower().startswith("0000:0000:0000:0000:0000:ffff:")]
    routable = [g for g in v2 if not g.gid.lower().startswith("fe80:")]
    for group in (ipv4, routable):
        if group:
            return min(g.index for g in group)
    return None


def parse_hca_records(records: Sequence[dict[str, Any]]) -> list[HcaPort]:
    """The collector's /sys/class/infiniband records, one HcaPort per device port."""
    ports = []
    for record in records:
        name = str(record["name"])
        for port in record.get("ports") or []:
            gids = tuple(
                Gid(int(g["index"]), str(g["gid"]), g.get("type"), g.get("ndev"))
                for g in port.get("gids") or []
            )
            ports.append(
                HcaPort(
                    name=name,
                    port=int(port.get("port", 1)),
                    state=_sysfs_enum(port.get("state")),
                    phys_state=_sysfs_enum(port.get("phys_state")),
                    rate=(port.get("rate") or "").strip() or None,
                    rate_gbps=parse_ib_rate(port.get("rate")),
                    link_layer=(port.get("link_layer") or "").strip() or None,
                    netdevs=tuple(record.get("netdevs") or ()),
                    gids=gids,
                )
            )
    return ports


@dataclass(frozen=True)
class NetIf:
    name: str
    speed_mbps: int  # -1: unknown (virtual NICs, links down, EINVAL)
    operstate: str | None
    mtu: int | None
    mac: str | None
    ipv4: tuple[str, ...]
    virtual: bool


def parse_net_records(records: Sequence[dict[str, Any]]) -> list[NetIf]:
    out = []
    for record in records:
        speed = _int_or_none(str(record.get("speed") or "").strip() or None)
        out.append(
            NetIf(
                name=str(record["name"]),
                speed_mbps=speed if speed is not None and speed > 0 else -1,
                operstate=(record.get("operstate") or "").strip() or None,
                mtu=_int_or_none(str(record.get("mtu") or "").strip() or None),
                mac=(record.get("address") or "").strip() or None,
                ipv4=tuple(record.get("ipv4") or ()),
                virtual=bool(record.get("virtual")),
            )
        )
    return out


def default_route_interface(proc_net_route: str | None) -> str | None:
    """The interface of the IPv4 default route in /proc/net/route (destination and mask 0)."""
    for line in (proc_net_route or "").splitlines()[1:]:
        cols = line.split()
        default = len(cols) >= 8 and cols[1] == "00000000" and cols[7] == "00000000"
        if default and int(cols[3], 16) & 0x1:  # RTF_UP
            return cols[0]
    return None


# ---------------------------------------------------------------- lscpu, numactl, vllm


def parse_lscpu(text: str) -> dict[str, Any]:
    raw = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            raw[key.strip()] = value.strip()
    numa_cpus = {}
    for key, value in raw.items():
        match = re.fullmatch(r"NUMA node(\d+) CPU\(s\)", key)
        if match and value:
            numa_cpus[match.group(1)] = value
    return {
        "architecture": raw.get("Architecture"),
        "model": raw.get("Model name"),
        "sockets": _int_or_none(raw.get("Socket(s)")),
        "cores_per_socket": _int_or_none(raw.get("Core(s) per socket")),
        "threads_per_core": _int_or_none(raw.get("Thread(s) per core")),
        "cpus": _int_or_none(raw.get("CPU(s)")),
        "numa_nodes": _int_or_none(raw.get("NUMA node(s)")),
        "numa_cpus": numa_cpus,
    }


def parse_numactl(text: str) -> dict[str, int]:
    """`numactl -H`: memory per NUMA node in MiB."""
    sizes = {}
    for line in text.splitlines():
        match = re.match(r"^node (\d+) size: (\d+) MB", line.strip())
        if match:
            sizes[match.group(1)] = int(match.group(2))
    return sizes


def parse_meminfo_mib(text: str | None) -> int | None:
    match = re.search(r"^MemTotal:\s+(\d+) kB", text or "", re.MULTILINE)
    return int(match.group(1)) // 1024 if match else None


def parse_vllm_flags(help_text: str) -> list[str]:
    """The long options `vllm serve --help=all` defines (not the ones its prose mentions);
    only the lowercase dashed form vLLM uses, which is what the facts model accepts."""
    flags = set()
    for line in help_text.splitlines():
        if not re.match(r"^\s{2,}-", line):
            continue
        spec = re.split(r"\s{2,}", line.strip())[0]
        found = re.findall(r"(?<![\w-])--[A-Za-z0-9][A-Za-z0-9._-]*", spec)
        flags.update(f for f in found if _VLLM_FLAG.fullmatch(f))
    return sorted(flags)


# ---------------------------------------------------------------- normalise one host


def _command(raw: dict[str, Any], name: str) -> str | None:
    """A command's stdout when it ran and succeeded."""
    entry = (raw.get("commands") or {}).get(name)
    if not isinstance(entry, dict) or entry.get("rc") != 0:
        return None
    out = entry.get("stdout")
    return out if isinstance(out, str) and out.strip() else None


def _allreduce_busbw(result: Any) -> float | None:
    """busbw at the largest message size (nccl-tests' plateau) of a correct run."""
    if not isinstance(result, dict) or not result.get("ok") or not result.get("rows"):
        return None
    rows = sorted(result["rows"], key=lambda r: r.get("bytes", 0))
    value = rows[-1].get("busbw_GBps")
    return float(value) if value is not None else None


def _bandwidth(raw: dict[str, Any]) -> dict[str, Any]:
    bw = raw.get("bandwidth") or {}
    iperf = {}
    for peer, result in (bw.get("iperf3") or {}).items():
        if isinstance(result, dict) and result.get("bits_per_second_received"):
            iperf[peer] = round(float(result["bits_per_second_received"]) / 1e9, 3)
    backends = {
        (bw.get(k) or {}).get("backend") for k in ("intra_allreduce", "inter_allreduce")
    } - {None}
    return {
        "intra_allreduce_busbw_GBps": _allreduce_busbw(bw.get("intra_allreduce")),
        "inter_allreduce_busbw_GBps": _allreduce_busbw(bw.get("inter_allreduce")),
        "iperf3_Gbps": iperf,
        "backend": "/".join(sorted(backends)) or None,
    }


def _nvlink(
    status_text: str | None, topo: TopoMatrix | None, intra_link: str | None
) -> dict[str, Any]:
    """NVLinks per GPU and their speed: exact from `nvlink -s`, else counted in `topo -m`."""
    status = parse_nvlink_status(status_text) if status_text else None
    if status is not None and status.links_per_gpu and max(status.links_per_gpu) > 0:
        links, link_gbps = min(status.links_per_gpu), status.link_GBps
        source = "nvidia-smi nvlink -s"
    elif topo is not None and len(topo.gpus) > 1:
        counts = [[topo.nv_count(a, b) for b in topo.gpus if b != a] for a in topo.gpus]
        # Through a switch every pair shows all of a GPU's links; in a mesh they add up.
        if intra_link == "nvswitch":
            links = max(max(c) for c in counts)
        else:
            links = min(sum(c) for c in counts)
        link_gbps, source = None, "nvidia-smi topo -m"
    else:
        links, link_gbps, source = 0, None, None
    return {
        "links_per_gpu": links,
        "link_GBps": link_gbps,
        "per_gpu_GBps": round(links * link_gbps, 3) if links and link_gbps else None,
        "source": source,
    }


def _bootstrap(
    nics: list[NetIf], address: str | None, route_source: str | None, default_if: str | None
) -> tuple[str | None, str | None]:
    """The interface peers reach, and the interface towards the cluster."""
    by_ip = {ip: nic.name for nic in nics for ip in nic.ipv4}
    cluster_if = by_ip.get(address or "") or by_ip.get(route_source or "")
    if cluster_if:
        return cluster_if, cluster_if
    if default_if:
        return default_if, None
    candidates = [n.name for n in nics if n.ipv4 and n.name != "lo" and n.operstate != "down"]
    return (candidates[0] if len(candidates) == 1 else None), None


def normalize(
    raw: dict[str, Any], host: str | None = None, source: str | None = None
) -> dict[str, Any]:
    """One host's facts in the normalised schema (vfleet.spec.facts.FactsModel), from the
    collector JSON or from facts already normalised; `source` names the file in errors."""
    if raw.get("schema") == FACTS_SCHEMA:
        facts = {**raw, "host": raw.get("host") or host}
        validate(FactsModel, Document(facts, source or f"facts for host {facts['host']}"))
        return facts
    if raw.get("schema") != PROBE_SCHEMA:
        raise UserError(
            f"{source or 'probe facts'}: schema is {raw.get('schema')!r}: write "
            f"{FACTS_SCHEMA!r} for normalised facts, or rerun the probe (it writes "
            f"{PROBE_SCHEMA!r})"
        )
    try:
        facts = _from_probe(raw, host)
    except (TypeError, KeyError, AttributeError, IndexError, ValueError) as exc:
        # The collector writes this file; a section of the wrong shape means it was cut
        # short or edited, and no part of it can be trusted.
        raise UserError(
            f"{source or 'probe facts'}: not a whole {PROBE_SCHEMA} capture "
            f"({type(exc).__name__}: {str(exc)[:80]}): rerun the topology probe"
        ) from None
    # vfleet built these, but from text the host printed: a bad value stops here, named.
    validate(FactsModel, Document(facts, f"{source or 'facts'} (from the probe output)"))
    return facts


def _from_probe(raw: dict[str, Any], host: str | None) -> dict[str, Any]:
    host = str(raw.get("host") or host or "?")
    errors = [str(e) for e in raw.get("errors") or []]
    notes: list[str] = []

    def bad(what: str) -> UserError:
        return UserError(f"facts for host {host}: {what}: rerun the topology probe on it")

    smi_xml = _command(raw, "nvidia_smi_query")
    smi = SmiReport(None, None, ())
    if smi_xml is None and not errors:
        errors.append("no nvidia-smi -q -x output (commands.nvidia_smi_query)")
    if smi_xml is not None:
        try:
            smi = parse_nvidia_smi_xml(smi_xml)
        except ValueError as exc:
            raise bad(f"commands.nvidia_smi_query: {exc}") from None
    topo_text = _command(raw, "nvidia_smi_topo")
    topo = None
    if topo_text is not None:
        try:
            topo = parse_topo_matrix(topo_text)
        except ValueError as exc:
            raise bad(f"commands.nvidia_smi_topo: {exc}") from None
    if topo is not None and smi.gpus and len(topo.gpus) != len(smi.gpus):
        raise bad(
            f"nvidia-smi -q lists {len(smi.gpus)} GPUs but topo -m {len(topo.gpus)} "
            "(field topology.matrix)"
        )

    sysfs = raw.get("sysfs") or {}
    files = raw.get("files") or {}
    try:
        hcas = parse_hca_records(sysfs.get("infiniband") or [])
        nics = [n for n in parse_net_records(sysfs.get("net") or []) if n.name != "lo"]
    except (KeyError, TypeError, ValueError) as exc:
        raise bad(f"sysfs records are malformed ({exc!r})") from None
    nvswitch_devices = [
        d["address"]
        for d in sysfs.get("pci_nvidia") or []
        if str(d.get("class", "")).lower().startswith("0x0680") and d.get("address")
    ]
    fm_state = (_command(raw, "fabricmanager") or "").strip()
    fabric_manager = fm_state == "active"

    fabrics = [g.fabric for g in smi.gpus]
    fabric = fabrics[0] if fabrics else GpuFabric()
    multi_node = bool(fabrics) and all(f.multi_node for f in fabrics)
    if multi_node and len({(f.clique_id, f.cluster_uuid) for f in fabrics}) > 1:
        notes.append("GPUs report different NVLink cliques: not treated as one NVLink domain")
        multi_node = False

    switch_evidence = bool(nvswitch_devices) or fabric_manager or multi_node
    if topo is not None:
        intra_link, reason = classify_intra(topo, switch_evidence)
    elif len(smi.gpus) == 1:
        intra_link, reason = "none", "one GPU: no GPU-to-GPU link"
    else:
        intra_link, reason = None, "nvidia-smi topo -m was not captured"

    default_if = default_route_interface(files.get("/proc/net/route"))
    route_source = (raw.get("route_to") or {}).get("source")
    address = raw.get("address")
    bootstrap, cluster_if = _bootstrap(nics, address, route_source, default_if)
    if address is None and bootstrap:
        address = next((n.ipv4[0] for n in nics if n.name == bootstrap and n.ipv4), None)
    rdma_of = {dev: h.name for h in hcas for dev in h.netdevs}

    python = raw.get("python") or {}
    help_text = _command(raw, "vllm_help")
    lscpu = _command(raw, "lscpu")
    numactl = _command(raw, "numactl")
    cpu = parse_lscpu(lscpu) if lscpu else {}
    if numactl:
        cpu["numa_memory_mib"] = parse_numactl(numactl)

    totals = [g.memory_total_mib for g in smi.gpus if g.memory_total_mib is not None]
    used = [g.memory_used_mib for g in smi.gpus if g.memory_used_mib is not None]
    names = sorted({g.name for g in smi.gpus})
    if len(names) > 1:
        raise UserError(
            f"facts for host {host}: field gpu_name: the host mixes GPU types "
            f"({', '.join(names)}): vfleet plans one GPU type per pool"
        )
    return {
        "schema": FACTS_SCHEMA,
        "host": host,
        "address": address,
        "gpus": [asdict(g) for g in smi.gpus],
        "gpu_name": names[0] if names else None,
        "gpu_count": len(smi.gpus),
        "gpu_memory_total_mib": min(totals) if totals else None,
        "gpu_memory_used_mib": max(used) if used else None,
        "topology": {
            "intra_link": intra_link,
            "reason": reason,
            "matrix": topo.gpu_matrix() if topo else {},
            "gpu_nic": topo.gpu_nic() if topo else {},
            "nics": list(topo.nics.values()) if topo else [],
            "cpu_affinity": topo.cpu_affinity if topo else {},
            "numa_affinity": topo.numa_affinity if topo else {},
            "gpu_numa_id": topo.gpu_numa_id if topo else {},
        },
        "nvlink": _nvlink(_command(raw, "nvidia_smi_nvlink"), topo, intra_link),
        "fabric": {**asdict(fabric), "multi_node": multi_node},
        "nvswitch": bool(nvswitch_devices) or multi_node or intra_link == "nvswitch",
        "nvswitch_devices": nvswitch_devices,
        "fabric_manager": fabric_manager,
        "hcas": [
            {
                **{k: v for k, v in asdict(h).items() if k not in ("gids", "netdevs")},
                "netdevs": list(h.netdevs),
                "roce_gid_index": h.roce_gid_index,
                "gids": [asdict(g) for g in h.gids],
            }
            for h in hcas
        ],
        "nics": [
            {
                **asdict(n),
                "ipv4": list(n.ipv4),
                "default_route": n.name == default_if,
                "cluster_route": n.name == cluster_if,
                "rdma_device": rdma_of.get(n.name),
            }
            for n in nics
        ],
        "bootstrap_interface": bootstrap,
        "cpu": cpu,
        "host_memory_mib": parse_meminfo_mib(files.get("/proc/meminfo")),
        "driver_version": smi.driver_version,
        "cuda_version": smi.cuda_version,
        "nccl_version": python.get("nccl_version"),
        "vllm": {
            "version": python.get("vllm_version"),
            "flags": parse_vllm_flags(help_text) if help_text else [],
        },
        "bandwidth": _bandwidth(raw),
        "probe_failed": bool(raw.get("probe_failed")),
        "errors": errors,
        "notes": notes,
    }


# ---------------------------------------------------------------- facts dir -> ClusterSpec


def load_facts_file(path: Path) -> dict[str, Any]:
    """One facts file, normalised and checked; the host defaults to the file name."""
    raw = parse_json(read_text(path, "facts file"), str(path)).data
    if not isinstance(raw, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean"}.get(type(raw), "a number")
        raise UserError(
            f"facts file {path} must hold one JSON object per host, not "
            f"{'null' if raw is None else kind}: rerun the probe or fix the file"
        )
    return normalize(raw, host=path.stem, source=str(path))


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
    return IntraNode(min(links, key=LINK_RANK.__getitem__), round(min(speeds), 3))


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
    iperf = [
        float(v)
        for f in hosts
        for v in ((f.get("bandwidth") or {}).get("iperf3_Gbps") or {}).values()
    ]
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
    return InterNode(fabric, round(busbw, 3), domain_gpus)


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


def cluster_from_facts(hosts: Sequence[dict[str, Any]], allow_partial: bool = False) -> ClusterSpec:
    """The ClusterSpec from normalised facts, one dict per host, as `normalize` or
    `load_facts_file` return them (checked by the facts model)."""
    hosts = list(hosts)
    if not hosts:
        raise UserError("no probe facts given: run the topology probe first")
    seen: set[str] = set()
    for facts in hosts:
        host = facts["host"]
        if host in seen:
            raise UserError(f"facts for host {host} appear twice: keep one file per host")
        seen.add(host)
    nodes = [_node(f, allow_partial) for f in hosts]
    kinds = {n.gpu.name for n in nodes}
    if len(kinds) > 1:
        listing = ", ".join(f"{n.name}: {n.gpu.name}" for n in nodes)
        raise UserError(
            f"hosts disagree on GPU type ({listing}): plan each GPU type as its own pool "
            "(one facts directory per type)"
        )
    intra = _intra(hosts, nodes, allow_partial)
    inter = _inter(hosts, nodes, allow_partial)
    version, flags = _vllm(hosts)
    return ClusterSpec(
        nodes=tuple(nodes),
        intra_node=intra,
        inter_node=inter,
        vllm_version=version,
        vllm_flags=flags,
    )


def load_facts_dir(path: Path) -> list[dict[str, Any]]:
    files = sorted(p for p in path.glob("*.json") if p.is_file())
    if not files:
        raise UserError(
            f"no probe facts (*.json) in {path}: run the topology probe (ansible role "
            "topology_probe) or point at the facts directory it wrote"
        )
    return [load_facts_file(p) for p in files]


def cluster_from_facts_dir(path: Path, allow_partial: bool = False) -> ClusterSpec:
    """The ClusterSpec from a directory of per-host probe facts (artifacts/<env>/facts)."""
    return cluster_from_facts(load_facts_dir(Path(path)), allow_partial=allow_partial)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m vfleet.probe.normalize DIR [--allow-partial]`: print the normalised facts and spec."""
    args = list(sys.argv[1:] if argv is None else argv)
    allow = "--allow-partial" in args
    paths = [a for a in args if a != "--allow-partial"]
    if len(paths) != 1:
        print("usage: python -m vfleet.probe.normalize FACTS_DIR [--allow-partial]", file=sys.stderr)
        return 2
    try:
        hosts = load_facts_dir(Path(paths[0]))
        spec = cluster_from_facts(hosts, allow_partial=allow)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summary = {
        "nodes": [{**asdict(n), "gpu": n.gpu.name} for n in spec.nodes],
        "intra_node": asdict(spec.intra_node),
        "inter_node": asdict(spec.inter_node),
        "vllm_version": spec.vllm_version,
        "vllm_flags": len(spec.vllm_flags),
    }
    print(json.dumps({"facts": hosts, "cluster": summary}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
