"""The GPU tools' captures: `nvidia-smi -q -x` (GPUs, memory, multi-node NVLink fabric),
`nvidia-smi topo -m` (the device matrix and affinity), `nvidia-smi nvlink -s` (links and their
speed), and the intra-node link class they add up to. Kept apart from the rest of the probe
because these formats are NVIDIA's and change with the driver, so they are tested against real
captures on their own.

Multi-node NVLink (GB200 NVL72-style): a GPU's fabric counts when state is Completed, status
Success, and clique id and cluster UUID are non-zero (the checks Azure/azhpc-images PR #506
applies).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from vfleet.probe.gpu_health import GpuHealth, parse_gpu_health
from vfleet.probe.text_numbers import int_or_none

# Most NVLinks one GPU has (H100/H200/B200: 18). A direct mesh splits them among its peers,
# so more links per pair x peers than this means the pairs meet in an NVSwitch.
MAX_DIRECT_NVLINKS = 18

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_ZERO_UUID = re.compile(r"^[0-]+$")


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
    health: GpuHealth = field(default_factory=GpuHealth)


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
                    clique_id=int_or_none(_text(fabric, "cliqueId")),
                    cluster_uuid=_text(fabric, "clusterUuid"),
                    health=_text(fabric, "health/summary"),
                ),
                health=parse_gpu_health(gpu),
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
