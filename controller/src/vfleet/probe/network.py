"""The network side of a host from the collector's sysfs records: InfiniBand/RoCE ports
(/sys/class/infiniband: state, rate, link layer, GIDs and the RoCE v2 GID NCCL should use),
the NICs (/sys/class/net), the PCIe links of the network controllers (/sys/bus/pci) and the
default route (/proc/net/route). These decide which rails
NCCL gets and which interface peers bootstrap over, so they are parsed apart from the GPUs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from vfleet.probe.text_numbers import int_or_none


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
    hca_type: str | None = None  # mlx5: "MT" and the PCI device ID (MT4129: ConnectX-7)

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
                    hca_type=(record.get("hca_type") or "").strip() or None,
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
        speed = int_or_none(str(record.get("speed") or "").strip() or None)
        out.append(
            NetIf(
                name=str(record["name"]),
                speed_mbps=speed if speed is not None and speed > 0 else -1,
                operstate=(record.get("operstate") or "").strip() or None,
                mtu=int_or_none(str(record.get("mtu") or "").strip() or None),
                mac=(record.get("address") or "").strip() or None,
                ipv4=tuple(record.get("ipv4") or ()),
                virtual=bool(record.get("virtual")),
            )
        )
    return out


# The kernel's PCIe speed strings (drivers/pci/pci-sysfs.c) and the generation each is.
PCIE_GENERATIONS = {"2.5": 1, "5.0": 2, "8.0": 3, "16.0": 4, "32.0": 5, "64.0": 6}


@dataclass(frozen=True)
class PcieLink:
    address: str
    vendor: str | None
    device: str | None
    names: tuple[str, ...]  # its network devices and RDMA devices (e.g. ibp25s0, mlx5_0)
    width: int | None
    width_max: int | None
    gen: int | None
    gen_max: int | None


def pcie_generation(speed: str | None) -> int | None:
    """'16.0 GT/s PCIe' -> 4; 'Unknown' or absent -> None."""
    match = re.match(r"^\s*([\d.]+)\s*GT/s", speed or "")
    return PCIE_GENERATIONS.get(match.group(1)) if match else None


def pcie_width(text: str | None) -> int | None:
    """A link width in lanes; the kernel writes 0 or 255 where it could not read one."""
    width = int_or_none((text or "").strip() or None)
    return width if width is not None and 0 < width <= 32 else None


def parse_pci_nic_records(records: Sequence[dict[str, Any]]) -> list[PcieLink]:
    return [
        PcieLink(
            address=str(r["address"]),
            vendor=r.get("vendor"),
            device=r.get("device"),
            names=tuple(str(n) for n in [*(r.get("netdevs") or ()), *(r.get("rdma") or ())]),
            width=pcie_width(r.get("current_link_width")),
            width_max=pcie_width(r.get("max_link_width")),
            gen=pcie_generation(r.get("current_link_speed")),
            gen_max=pcie_generation(r.get("max_link_speed")),
        )
        for r in records
    ]


def default_route_interface(proc_net_route: str | None) -> str | None:
    """The interface of the IPv4 default route in /proc/net/route (destination and mask 0)."""
    for line in (proc_net_route or "").splitlines()[1:]:
        cols = line.split()
        default = len(cols) >= 8 and cols[1] == "00000000" and cols[7] == "00000000"
        if default and int(cols[3], 16) & 0x1:  # RTF_UP
            return cols[0]
    return None
