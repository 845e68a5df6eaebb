"""Normalised probe facts (schema `vfleet.facts/1`): one JSON object per GPU host, as
`vfleet.probe.normalize` writes it from the probe's raw output, or as an operator writes it
by hand. The field docstrings below are the schema; `python -m vfleet.documents.facts` writes the
JSON Schema generated from them to vfleet/schemas/facts.schema.json.

Values that reach rendered files or the planner are narrowed here: the host is an RFC 1123
label, interfaces are Linux interface names, HCA names and vLLM flags have a fixed
character set, counts and sizes are bounded integers and bandwidths finite and >= 0. Free
text (reasons, errors, nvidia-smi strings) is only bounded in length: it is shown, not run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator
from pydantic_core import CoreSchema, core_schema

from vfleet.inputs.strict import StrictModel
from vfleet.inputs.values import Address, Interface, Label

FACTS_SCHEMA = "vfleet.facts/1"
MAX_GPUS = 72  # a GB200 NVL72 rack seen as one host
MAX_MIB = 10**8  # ~95 TiB: above any host or GPU memory
MAX_COUNT = 1 << 20  # CPUs, NUMA nodes, links, GID indexes: far above real hardware
MAX_TEXT = 4096

# Patterns checked inside pydantic-core: a facts file holds hundreds of matrix keys, device
# names and flags, and a Python check per value would double the time a 1,024-host dir loads.
_DEVICE = r"^[A-Za-z0-9_.-]{1,32}$"  # mlx5_0, ibp24s0: NCCL_IB_HCA takes them
_FLAG = r"^--[a-z0-9][a-z0-9-]{0,98}$"
_GPU_KEY = r"^GPU(?:[0-9]|[1-6][0-9]|7[01])$"  # GPU0 to GPU71
_IFNAME = r"^[A-Za-z0-9_.:@-]{1,15}$"  # the charset of vfleet.inputs.values.Interface
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"^{_OCTET}(?:\.{_OCTET}){{3}}$"
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")


def check_version(value: str) -> str:
    if not _VERSION.fullmatch(value):
        raise ValueError("must be a version of 1-64 letters, digits, '.', '+', '_' or '-'")
    return value


@dataclass(frozen=True)
class Matches:
    """A string matching `pattern`, checked in pydantic-core, with `message` as its error
    (pydantic's own would quote the regex at the operator)."""

    pattern: str
    message: str

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> CoreSchema:
        inner = core_schema.str_schema(pattern=self.pattern, strict=True)
        return core_schema.custom_error_schema(
            inner, custom_error_type="string_mismatch", custom_error_message=self.message
        )


Device = Annotated[
    str, Matches(_DEVICE, "must be a device name of 1-32 letters, digits, '_', '.' or '-'")
]
Flag = Annotated[
    str, Matches(_FLAG, "must be a long option: '--', then lowercase letters, digits and '-'")
]
Version = Annotated[str, AfterValidator(check_version)]
GpuKey = Annotated[
    str, Matches(_GPU_KEY, "must be a GPU column of nvidia-smi topo -m (GPU0-GPU71)")
]
Ipv4 = Annotated[str, Matches(_IPV4, "must be an IPv4 address (e.g. 10.0.0.11)")]
NetIf = Annotated[  # the rule of vfleet.inputs.values.Interface, for the many NICs of a host
    str, Matches(_IFNAME, "must be a Linux interface name of 1-15 characters (e.g. eth0, ens5f0)")
]
Text = Annotated[str, Field(max_length=MAX_TEXT)]
Mib = Annotated[int, Field(ge=0, le=MAX_MIB)]
Small = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Bandwidth = Annotated[float, Field(ge=0, allow_inf_nan=False)]
NumaId = Annotated[str, Field(pattern=r"^[0-9]{1,6}$")]
Cell = Annotated[str, Field(max_length=32)]  # X, NV18, PIX, PXB, PHB, NODE, SYS


class GpuFabricFacts(StrictModel):
    """One GPU's multi-node NVLink fabric registration (nvidia-smi -q: fabric)."""

    state: Text | None = None
    """fabric state (e.g. Completed)"""
    status: Text | None = None
    """fabric status (e.g. Success)"""
    clique_id: Annotated[int, Field(ge=0, le=2**32)] | None = None
    """NVLink clique id (e.g. 32766; 0 or null: none)"""
    cluster_uuid: Text | None = None
    """NVLink cluster UUID (e.g. 3f1d2c6e-8a4b-4c3d-9e5f-7a6b5c4d3e2f)"""
    health: Text | None = None
    """fabric health summary (e.g. Healthy)"""


class HostFabricFacts(GpuFabricFacts):
    """The first GPU's fabric registration, and whether every GPU is in one NVLink domain."""

    multi_node: bool = False
    """every GPU registered in one multi-node NVLink clique (e.g. true on GB200 NVL72)"""


Count = Annotated[int, Field(ge=0, le=10**12)]


class GpuHealthFacts(StrictModel):
    """One GPU's health fields in nvidia-smi -q -x; null where the driver does not report."""

    persistence_mode: bool | None = None
    """persistence mode on (e.g. true)"""
    ecc_volatile_correctable: Count | None = None
    """correctable ECC errors since the driver loaded (e.g. 0)"""
    ecc_volatile_uncorrectable: Count | None = None
    """uncorrectable ECC errors since the driver loaded (e.g. 0)"""
    ecc_aggregate_correctable: Count | None = None
    """correctable ECC errors over the board's life (e.g. 0)"""
    ecc_aggregate_uncorrectable: Count | None = None
    """uncorrectable ECC errors over the board's life (e.g. 0)"""
    retired_pages_sbe: Count | None = None
    """pages retired for repeated single-bit errors (pre-Ampere; e.g. 0)"""
    retired_pages_dbe: Count | None = None
    """pages retired for double-bit errors (pre-Ampere; e.g. 0)"""
    retirement_pending: bool | None = None
    """a page retirement waits for a GPU reset"""
    remapped_rows_uncorrectable: Count | None = None
    """rows remapped for uncorrectable errors (Ampere on; e.g. 0)"""
    remap_pending: bool | None = None
    """a row remap waits for a GPU reset"""
    remap_failure: bool | None = None
    """a row remap failed: the bank has no spare rows left"""
    pcie_gen: Annotated[int, Field(ge=1, le=16)] | None = None
    """current PCIe generation (e.g. 5)"""
    pcie_gen_max: Annotated[int, Field(ge=1, le=16)] | None = None
    """the most the GPU and its slot support (e.g. 5)"""
    pcie_width: Annotated[int, Field(ge=1, le=64)] | None = None
    """current PCIe lanes (e.g. 16)"""
    pcie_width_max: Annotated[int, Field(ge=1, le=64)] | None = None
    """the most lanes the device supports (e.g. 16)"""
    clock_event_reasons: Annotated[list[Text], Field(max_length=64)] = Field(default_factory=list)
    """active clock event (throttle) reasons other than idle, application clocks, display and
    sync boost (e.g. [hw_thermal_slowdown])"""


class GpuFacts(StrictModel):
    """One GPU as nvidia-smi -q -x lists it."""

    index: Annotated[int, Field(ge=0, lt=MAX_GPUS)]
    """position in nvidia-smi's list (e.g. 0)"""
    name: Annotated[str, Field(min_length=1, max_length=100)]
    """product name (e.g. NVIDIA H200)"""
    uuid: Text | None = None
    """GPU UUID (e.g. GPU-5b1c...)"""
    pci_bus_id: Text | None = None
    """PCI bus id (e.g. 00000000:00:06.0)"""
    architecture: Text | None = None
    """product architecture (e.g. Hopper)"""
    memory_total_mib: Mib | None = None
    """frame buffer total in MiB (e.g. 143771)"""
    memory_used_mib: Mib | None = None
    """frame buffer in use in MiB (e.g. 0)"""
    memory_reserved_mib: Mib | None = None
    """frame buffer the driver reserves in MiB (e.g. 616)"""
    module_id: Text | None = None
    """board module id (e.g. 1)"""
    fabric: GpuFabricFacts = GpuFabricFacts()
    """multi-node NVLink registration of this GPU"""
    health: GpuHealthFacts = GpuHealthFacts()
    """ECC, retired pages, remapped rows, PCIe link, clock event reasons, persistence mode"""


class TopologyFacts(StrictModel):
    """What nvidia-smi topo -m shows: the GPU-to-GPU link class and the device matrix."""

    intra_link: Literal["nvswitch", "nvlink-pairs", "pcie", "none"] | None = None
    """GPU-to-GPU link class: nvswitch, nvlink-pairs, pcie, none (one GPU), null (not captured)"""
    reason: Text | None = None
    """why that class (e.g. all 28 GPU pairs NV18)"""
    matrix: dict[GpuKey, dict[GpuKey, Cell]] = Field(default_factory=dict)
    """GPU-to-GPU cells (e.g. {GPU0: {GPU0: X, GPU1: NV18}})"""
    gpu_nic: dict[GpuKey, dict[Device, Cell]] = Field(default_factory=dict)
    """GPU-to-NIC cells (e.g. {GPU0: {mlx5_0: PIX}})"""
    nics: list[Device] = Field(default_factory=list)
    """NICs in the matrix (e.g. [mlx5_0, mlx5_1])"""
    cpu_affinity: dict[GpuKey, Text] = Field(default_factory=dict)
    """CPUs near each GPU (e.g. {GPU0: 0-55})"""
    numa_affinity: dict[GpuKey, Text] = Field(default_factory=dict)
    """NUMA node near each GPU (e.g. {GPU0: "0"})"""
    gpu_numa_id: dict[GpuKey, Text] = Field(default_factory=dict)
    """each GPU's own NUMA id (e.g. {GPU0: "2"}, N/A on most hosts)"""


class NvlinkFacts(StrictModel):
    """NVLinks per GPU and their speed."""

    links_per_gpu: Small = 0
    """active NVLinks of the least-linked GPU (e.g. 18)"""
    link_GBps: Bandwidth | None = None
    """one link's speed in GB/s, one direction (e.g. 26.562)"""
    per_gpu_GBps: Bandwidth | None = None
    """links_per_gpu x link_GBps (e.g. 478.116)"""
    source: Literal["nvidia-smi nvlink -s", "nvidia-smi topo -m"] | None = None
    """where the link count comes from (nvidia-smi nvlink -s or nvidia-smi topo -m)"""


class GidFacts(StrictModel):
    """One GID of an RDMA port."""

    index: Small
    """GID index (e.g. 3)"""
    gid: Annotated[str, Field(min_length=1, max_length=64)]
    """the GID (e.g. 0000:0000:0000:0000:0000:ffff:0a14:000b)"""
    type: Text | None = None
    """GID type (e.g. RoCE v2)"""
    ndev: NetIf | None = None
    """network device of the GID (e.g. ens1f0)"""


class HcaFacts(StrictModel):
    """One port of an RDMA device (/sys/class/infiniband)."""

    name: Device
    """RDMA device (e.g. mlx5_0)"""
    port: Annotated[int, Field(ge=1, le=255)] = 1
    """port number (e.g. 1)"""
    state: Text | None = None
    """port state (e.g. ACTIVE)"""
    phys_state: Text | None = None
    """physical state (e.g. LinkUp)"""
    rate: Text | None = None
    """rate as the kernel writes it (e.g. 400 Gb/sec (4X NDR))"""
    rate_gbps: Bandwidth | None = None
    """rate in Gb/s (e.g. 400.0)"""
    link_layer: Text | None = None
    """link layer (InfiniBand or Ethernet)"""
    netdevs: list[NetIf] = Field(default_factory=list)
    """network devices on the RDMA device (e.g. [ens1f0])"""
    hca_type: Text | None = None
    """the device's type as its driver names it (mlx5: MT and the PCI device ID, e.g. MT4129)"""
    roce_gid_index: Small | None = None
    """the RoCE v2 GID NCCL_IB_GID_INDEX names (e.g. 3; null on InfiniBand)"""
    gids: list[GidFacts] = Field(default_factory=list)
    """the port's GIDs"""


class NicFacts(StrictModel):
    """One network interface (/sys/class/net)."""

    name: NetIf
    """interface name (e.g. eno1)"""
    speed_mbps: Annotated[int, Field(ge=-1, le=10**7)] = -1
    """link speed in Mb/s (e.g. 25000; -1 unknown)"""
    operstate: Text | None = None
    """operational state (e.g. up)"""
    mtu: Annotated[int, Field(ge=0, le=1 << 20)] | None = None
    """MTU in bytes (e.g. 9000)"""
    mac: Annotated[str, Field(max_length=64)] | None = None
    """hardware address (e.g. 0c:42:a1:5d:4d:b8)"""
    ipv4: list[Ipv4] = Field(default_factory=list)
    """IPv4 addresses (e.g. [10.20.0.11])"""
    virtual: bool = False
    """a virtual interface (bridge, veth, ...)"""
    default_route: bool = False
    """carries the IPv4 default route"""
    cluster_route: bool = False
    """holds the address peers reach the host at"""
    rdma_device: Device | None = None
    """the RDMA device behind it (e.g. mlx5_0)"""


class PcieLinkFacts(StrictModel):
    """The PCIe link of one network or InfiniBand controller (/sys/bus/pci/devices)."""

    address: Annotated[str, Field(min_length=1, max_length=64)]
    """PCI address (e.g. 0000:19:00.0)"""
    vendor: Annotated[str, Field(max_length=16)] | None = None
    """PCI vendor id (e.g. 0x15b3, Mellanox)"""
    device: Annotated[str, Field(max_length=16)] | None = None
    """PCI device id (e.g. 0x1021, ConnectX-7)"""
    names: list[Text] = Field(default_factory=list)
    """its network and RDMA devices (e.g. [ibp25s0, mlx5_0])"""
    width: Annotated[int, Field(ge=1, le=32)] | None = None
    """lanes negotiated (LnkSta of lspci -vv; e.g. 16)"""
    width_max: Annotated[int, Field(ge=1, le=32)] | None = None
    """lanes the device and slot allow (LnkCap; e.g. 16)"""
    gen: Annotated[int, Field(ge=1, le=8)] | None = None
    """PCIe generation negotiated (e.g. 5)"""
    gen_max: Annotated[int, Field(ge=1, le=8)] | None = None
    """PCIe generation the device and slot allow (e.g. 5)"""


class CpuFacts(StrictModel):
    """The host's CPUs and NUMA layout (lscpu, numactl -H)."""

    architecture: Text | None = None
    """CPU architecture (e.g. x86_64)"""
    model: Text | None = None
    """CPU model name (e.g. Intel(R) Xeon(R) Platinum 8480+)"""
    sockets: Small | None = None
    """sockets (e.g. 2)"""
    cores_per_socket: Small | None = None
    """cores per socket (e.g. 56)"""
    threads_per_core: Small | None = None
    """threads per core (e.g. 2)"""
    cpus: Small | None = None
    """logical CPUs (e.g. 224)"""
    numa_nodes: Small | None = None
    """NUMA nodes (e.g. 2)"""
    numa_cpus: dict[NumaId, Text] = Field(default_factory=dict)
    """CPUs per NUMA node (e.g. {"0": 0-55})"""
    numa_memory_mib: dict[NumaId, Mib] = Field(default_factory=dict)
    """memory per NUMA node in MiB (e.g. {"0": 1031800})"""


class VllmFacts(StrictModel):
    """The vLLM installed in the probed venv."""

    version: Version | None = None
    """vLLM version (e.g. 0.11.0)"""
    flags: Annotated[list[Flag], Field(max_length=10_000)] = Field(default_factory=list)
    """long options vllm serve defines (e.g. [--tensor-parallel-size])"""


class BandwidthFacts(StrictModel):
    """What the probe measured; null where it did not measure."""

    intra_allreduce_busbw_GBps: Bandwidth | None = None
    """all_reduce busbw between the host's GPUs in GB/s (e.g. 455.2)"""
    inter_allreduce_busbw_GBps: Bandwidth | None = None
    """all_reduce busbw across hosts in GB/s (e.g. 371.5)"""
    iperf3_Gbps: dict[Address, Bandwidth] = Field(default_factory=dict)
    """iperf3 throughput per peer in Gbit/s (e.g. {10.20.0.12: 94.1})"""
    backend: Annotated[str, Field(pattern=r"^[a-z0-9/]{1,32}$")] | None = None
    """torch.distributed backend of the all_reduce runs (e.g. nccl)"""


class XidFacts(StrictModel):
    """One NVIDIA Xid event from the kernel log."""

    device: Annotated[str, Field(max_length=64)]
    """the device the driver names (e.g. PCI:0000:3b:00)"""
    code: Annotated[int, Field(ge=0, le=100000)]
    """the Xid (e.g. 79)"""
    text: Annotated[str, Field(max_length=500)] = ""
    """the rest of the line (e.g. pid=1234, GPU has fallen off the bus.)"""


class FactsModel(StrictModel):
    """What the topology probe saw on one GPU host, normalised (schema vfleet.facts/1)."""

    schema_: Literal["vfleet.facts/1"] = Field(alias="schema")
    """the document schema (vfleet.facts/1)"""
    host: Label
    """inventory name of the host (e.g. gpu-node-01)"""
    address: Address | None = None
    """address peers reach the host at (e.g. 10.20.0.11)"""
    gpu_count: Annotated[int, Field(ge=0, le=MAX_GPUS)]
    """GPUs on the host (e.g. 8)"""
    gpu_name: Annotated[str, Field(min_length=1, max_length=100)] | None
    """GPU product name as nvidia-smi prints it (e.g. NVIDIA H200; null without GPUs)"""
    gpus: Annotated[list[GpuFacts], Field(max_length=MAX_GPUS)] = Field(default_factory=list)
    """each GPU as nvidia-smi -q -x lists it"""
    gpu_memory_total_mib: Mib | None = None
    """smallest frame buffer over the GPUs in MiB (e.g. 81559)"""
    gpu_memory_used_mib: Mib | None = None
    """largest frame buffer in use over the GPUs in MiB, held by other processes (e.g. 0)"""
    topology: TopologyFacts = TopologyFacts()
    """the GPU and NIC matrix of nvidia-smi topo -m"""
    nvlink: NvlinkFacts = NvlinkFacts()
    """NVLinks per GPU and their speed"""
    fabric: HostFabricFacts = HostFabricFacts()
    """multi-node NVLink registration"""
    nvswitch: bool = False
    """an NVSwitch on the host (PCI bridges) or in the rack (fabric)"""
    nvswitch_devices: Annotated[list[Text], Field(max_length=1024)] = Field(default_factory=list)
    """NVSwitch PCI bridges on the host (e.g. [0000:05:00.0])"""
    fabric_manager: bool = False
    """nvidia-fabricmanager is active"""
    hcas: Annotated[list[HcaFacts], Field(max_length=1024)] = Field(default_factory=list)
    """RDMA device ports"""
    nics: Annotated[list[NicFacts], Field(max_length=4096)] = Field(default_factory=list)
    """network interfaces other than lo"""
    nic_pcie: Annotated[list[PcieLinkFacts], Field(max_length=1024)] = Field(default_factory=list)
    """the PCIe links of the network and InfiniBand controllers"""
    bootstrap_interface: Interface | None = None
    """the NIC peers reach, NCCL/GLOO_SOCKET_IFNAME (e.g. eno1)"""
    cpu: CpuFacts = CpuFacts()
    """CPUs and NUMA layout"""
    host_memory_mib: Mib | None = None
    """MemTotal in MiB (e.g. 2063600)"""
    driver_version: Version | None = None
    """NVIDIA driver version (e.g. 580.159.04)"""
    cuda_version: Version | None = None
    """CUDA version the driver supports (e.g. 13.0)"""
    nccl_version: Version | None = None
    """NCCL version torch loads (e.g. 2.27.3)"""
    vllm: VllmFacts = VllmFacts()
    """the vLLM in the probed venv"""
    bandwidth: BandwidthFacts = BandwidthFacts()
    """measured bandwidths"""
    xid_events: Annotated[list[XidFacts], Field(max_length=10000)] | None = None
    """NVIDIA Xid events in the kernel log since boot ([] none; null: not captured)"""
    probe_failed: bool = False
    """the probe failed on this host (see errors)"""
    errors: Annotated[list[Text], Field(max_length=1000)] = Field(default_factory=list)
    """what went wrong during the probe (e.g. [iperf3 not installed])"""
    notes: Annotated[list[Text], Field(max_length=1000)] = Field(default_factory=list)
    """remarks from normalising (e.g. [GPUs report different NVLink cliques])"""

    @field_validator("gpu_name")
    @classmethod
    def _named_when_present(cls, value: str | None, info: ValidationInfo) -> str | None:
        count = info.data.get("gpu_count")
        if value is None and count:
            raise ValueError(f"is null for {count} GPUs: name the GPU model")
        return value

    @field_validator("gpus")
    @classmethod
    def _one_per_gpu(cls, value: list[GpuFacts], info: ValidationInfo) -> list[GpuFacts]:
        count = info.data.get("gpu_count")
        if value and count is not None and len(value) != count:
            raise ValueError(f"lists {len(value)} GPUs but gpu_count is {count}")
        return value
