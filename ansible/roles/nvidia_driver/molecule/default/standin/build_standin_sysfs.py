#!/usr/bin/env python3
"""Build a stand-in sysfs tree on a test host from its testbed profile's recorded host.

A container cannot replace the kernel's /sys, so the role reads NVSwitch chips, RDMA devices
and loaded modules below nvidia_driver_sysfs_root, which the scenario points here. The tree
holds what the profile's probe-sysfs.json recorded (tests/data/gpu-hosts/<fixture>, bound at
/opt/vfleet/gpu by the testbed):

- bus/pci/devices/<address>/{vendor,device,class,numa_node} for every NVIDIA PCI function
  (GPUs, and on HGX boards the NVSwitch bridges of class 0x068000);
- class/infiniband/<hca>/ for every HCA;
- module/nvidia/version when --loaded is given: the driver the kernel "has loaded".

Usage: build_standin_sysfs.py OUT [--probe /opt/vfleet/gpu/probe-sysfs.json] [--loaded VERSION]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--probe", type=Path, default=Path("/opt/vfleet/gpu/probe-sysfs.json"))
    parser.add_argument("--loaded", default="", help="version of the loaded nvidia module")
    args = parser.parse_args()
    recorded = json.loads(args.probe.read_text())["sysfs"]
    if args.out.exists():
        shutil.rmtree(args.out)
    for dev in recorded.get("pci_nvidia", []):
        node = args.out / "bus" / "pci" / "devices" / dev["address"]
        node.mkdir(parents=True)
        (node / "vendor").write_text("0x10de\n")
        (node / "device").write_text(dev["device"] + "\n")
        (node / "class").write_text(dev["class"] + "\n")
        (node / "numa_node").write_text(str(dev.get("numa_node", "-1")) + "\n")
    for hca in recorded.get("infiniband", []):
        node = args.out / "class" / "infiniband" / hca["name"]
        node.mkdir(parents=True)
        (node / "node_type").write_text(hca.get("node_type", "1: CA") + "\n")
    (args.out / "class" / "infiniband").mkdir(parents=True, exist_ok=True)
    (args.out / "module").mkdir(parents=True, exist_ok=True)
    if args.loaded:
        (args.out / "module" / "nvidia").mkdir()
        (args.out / "module" / "nvidia" / "version").write_text(args.loaded + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
