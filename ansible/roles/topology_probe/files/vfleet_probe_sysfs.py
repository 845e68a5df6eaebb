"""The topology probe's reads of this host's kernel view: sysfs devices (InfiniBand, network
interfaces, NVIDIA and network PCI functions), interface addresses and routes.

Part of the collector (vfleet_probe.py): stdlib only, Python 3.8 or newer. Every reader
returns what is there and never raises: an absent or refusing file reads as None.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from typing import Any

SIOCGIFADDR = 0x8915


def read(path: str) -> str | None:
    """A sysfs/proc file's text; None where it is absent or the kernel refuses (EINVAL)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _numeric(names: list[str]) -> list[str]:
    return sorted((n for n in names if n.isdigit()), key=int)


def sysfs_infiniband(root: str = "/sys/class/infiniband") -> list[dict[str, Any]]:
    devices = []
    for name in _listdir(root):
        dev = os.path.join(root, name)
        ports = []
        for port in _numeric(_listdir(os.path.join(dev, "ports"))):
            pdir = os.path.join(dev, "ports", port)
            gids = []
            for index in _numeric(_listdir(os.path.join(pdir, "gids"))):
                gid = read(os.path.join(pdir, "gids", index))
                if not gid or not gid.replace("0", "").replace(":", ""):
                    continue  # empty slot; its gid_attrs would only return EINVAL
                gids.append(
                    {
                        "index": int(index),
                        "gid": gid,
                        "type": read(os.path.join(pdir, "gid_attrs", "types", index)),
                        "ndev": read(os.path.join(pdir, "gid_attrs", "ndevs", index)),
                    }
                )
            ports.append(
                {
                    "port": int(port),
                    "state": read(os.path.join(pdir, "state")),
                    "phys_state": read(os.path.join(pdir, "phys_state")),
                    "rate": read(os.path.join(pdir, "rate")),
                    "link_layer": read(os.path.join(pdir, "link_layer")),
                    "lid": read(os.path.join(pdir, "lid")),
                    "gids": gids,
                }
            )
        devices.append(
            {
                "name": name,
                "node_type": read(os.path.join(dev, "node_type")),
                "fw_ver": read(os.path.join(dev, "fw_ver")),
                "hca_type": read(os.path.join(dev, "hca_type")),
                "board_id": read(os.path.join(dev, "board_id")),
                "netdevs": _listdir(os.path.join(dev, "device", "net")),
                "ports": ports,
            }
        )
    return devices


def ipv4_of(ifname: str) -> list[str]:
    """The interface's primary IPv4 address (SIOCGIFADDR), without needing iproute2."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            packed = fcntl.ioctl(
                sock.fileno(), SIOCGIFADDR, struct.pack("256s", ifname[:15].encode())
            )
        return [socket.inet_ntoa(packed[20:24])]
    except OSError:
        return []


def sysfs_net(root: str = "/sys/class/net") -> list[dict[str, Any]]:
    nics = []
    for name in _listdir(root):
        ndir = os.path.join(root, name)
        driver = os.path.join(ndir, "device", "driver")
        nics.append(
            {
                "name": name,
                "operstate": read(os.path.join(ndir, "operstate")),
                "speed": read(os.path.join(ndir, "speed")),
                "mtu": read(os.path.join(ndir, "mtu")),
                "address": read(os.path.join(ndir, "address")),
                "type": read(os.path.join(ndir, "type")),
                "virtual": not os.path.exists(os.path.join(ndir, "device")),
                "driver": os.path.basename(os.path.realpath(driver))
                if os.path.exists(driver)
                else None,
                "ipv4": ipv4_of(name),
            }
        )
    return nics


def sysfs_pci_nvidia(root: str = "/sys/bus/pci/devices") -> list[dict[str, Any]]:
    """NVIDIA PCI functions: GPUs (class 0x0302xx) and NVSwitch bridges (0x0680xx)."""
    found = []
    for address in _listdir(root):
        pdir = os.path.join(root, address)
        if read(os.path.join(pdir, "vendor")) != "0x10de":
            continue
        found.append(
            {
                "address": address,
                "class": read(os.path.join(pdir, "class")),
                "device": read(os.path.join(pdir, "device")),
                "numa_node": read(os.path.join(pdir, "numa_node")),
            }
        )
    return found


PCI_NIC_FILES = (
    "vendor",
    "device",
    "class",
    "current_link_width",
    "max_link_width",
    "current_link_speed",
    "max_link_speed",
)


def sysfs_pci_nics(root: str = "/sys/bus/pci/devices") -> list[dict[str, Any]]:
    """Network and InfiniBand controllers (class 0x02xxxx), physical functions only (a
    virtual function's link is its parent's), with the PCIe link the kernel negotiated and
    the most the device and slot allow: the same figures as LnkSta and LnkCap of lspci -vv."""
    found = []
    for address in _listdir(root):
        pdir = os.path.join(root, address)
        if not (read(os.path.join(pdir, "class")) or "").startswith("0x02"):
            continue
        if os.path.exists(os.path.join(pdir, "physfn")):
            continue
        found.append(
            {
                "address": address,
                "netdevs": _listdir(os.path.join(pdir, "net")),
                "rdma": _listdir(os.path.join(pdir, "infiniband")),
                **{name: read(os.path.join(pdir, name)) for name in PCI_NIC_FILES},
            }
        )
    return found


def route_source(target: str) -> str | None:
    """The source address the kernel would use towards `target` (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((target, 9))
            source: str = sock.getsockname()[0]
            return source
    except OSError:
        return None


def resolve(address: str) -> str:
    """An IPv4 literal as given; a host name as the IPv4 address it resolves to here."""
    try:
        socket.inet_aton(address)
        return address
    except OSError:
        pass
    try:
        return socket.gethostbyname(address)
    except OSError:
        return address


def interface_with(address: str | None, nics: list[dict[str, Any]]) -> str | None:
    return next((n["name"] for n in nics if address and address in n["ipv4"]), None)
