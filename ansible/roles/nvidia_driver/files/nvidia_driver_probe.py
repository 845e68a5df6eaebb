#!/usr/bin/env python3
"""What the nvidia_driver role needs to know about a host, as one JSON object on stdout.

Reads sysfs (the root is an argument, /sys on real hosts) and /run/reboot-required.pkgs:

- nvswitch: PCI addresses of NVIDIA NVSwitch chips (vendor 0x10de, class 0x0680xx,
  "bridge, other"), as HGX A100/H100/H200 boards show them;
- rdma: RDMA devices under class/infiniband (InfiniBand and RoCE HCAs alike);
- loaded: the version of the nvidia module the kernel has loaded ("" when none);
- peermem_loaded: whether nvidia_peermem is loaded;
- reboot_pkgs: the packages /run/reboot-required.pkgs lists (a reboot is still owed for them).

Standard library only; changes nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

NVIDIA_VENDOR = "0x10de"
BRIDGE_OTHER = "0x0680"


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def nvswitches(sysfs: Path) -> list[str]:
    found = []
    devices = sysfs / "bus" / "pci" / "devices"
    if devices.is_dir():
        for dev in sorted(devices.iterdir()):
            if _read(dev / "vendor") == NVIDIA_VENDOR and _read(dev / "class").startswith(
                BRIDGE_OTHER
            ):
                found.append(dev.name)
    return found


def rdma_devices(sysfs: Path) -> list[str]:
    hcas = sysfs / "class" / "infiniband"
    return sorted(p.name for p in hcas.iterdir()) if hcas.is_dir() else []


def main(argv: list[str]) -> int:
    sysfs = Path(argv[1] if len(argv) > 1 else "/sys")
    flag = Path(argv[2] if len(argv) > 2 else "/run/reboot-required.pkgs")
    facts = {
        "nvswitch": nvswitches(sysfs),
        "rdma": rdma_devices(sysfs),
        "loaded": _read(sysfs / "module" / "nvidia" / "version"),
        "peermem_loaded": (sysfs / "module" / "nvidia_peermem").is_dir(),
        "reboot_pkgs": sorted(set(_read(flag).split())),
    }
    json.dump(facts, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
