"""Host profiles (which recorded GPU host a test host pretends to be) and link shapes.

A profile names a fixture directory under `tests/data/gpu-hosts/`: the recorded
`nvidia-smi -q -x`, `topo -m` and `nvlink -s` outputs the stand-in replays, and the
`probe-sysfs.json` description of the host's NICs and InfiniBand HCAs, which is copied next
to them on each test host (`/opt/vfleet/gpu/`). The kernel's real sysfs cannot be replaced
inside a container, so the topology probe still sees the test host's own `/sys`.

Link shapes, scaled 1:100 so that both fit the machine: the namespace path tops out at about
7 Gbit/s unshaped on a 2-core VM (3 Gbit/s under load), so real rates cannot be used. Token
bucket filters (`tc tbf`) on the hub's port towards each host limit what that host receives.

| Shape | Rate | Stands for |
|---|---|---|
| ethernet | 250 Mbit/s | one 25 GbE port (the seed cluster's fabric) |
| infiniband | 2000 Mbit/s | one 200 Gb/s HDR InfiniBand port: 8 x the Ethernet rate |
| none | unshaped | whatever the machine gives (about 3-7 Gbit/s) |

The ratio (8x) is what the shapes preserve. An 8 x 400G NDR node (3.2 Tbit/s) would be
32 Gbit/s at this scale, beyond any namespace link, so no shape models a full HGX node's
rail-optimised fabric.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Profile:
    """A recorded GPU host the test hosts replay."""

    name: str
    fixture: str  # directory under tests/data/gpu-hosts
    gpu: str  # product name nvidia-smi -q -x reports
    gpus: int
    shape: str  # default link shape
    summary: str


@dataclass(frozen=True)
class Shape:
    """A link speed the hub enforces on every port towards a host."""

    name: str
    rate_mbit: int | None  # None: unshaped
    stands_for: str


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "h200-1gpu",
            "h200-1gpu-ubuntu2404",
            "NVIDIA H200",
            1,
            "ethernet",
            "1 x H200 in a VM (real capture)",
        ),
        Profile(
            "h100-sxm-8gpu",
            "h100-sxm-8gpu-nvswitch",
            "NVIDIA H100 80GB HBM3",
            8,
            "infiniband",
            "HGX H100, 8 GPUs on NVSwitch, 8 x 400G NDR InfiniBand (built)",
        ),
        Profile(
            "l40s-pcie-8gpu",
            "l40s-pcie-8gpu",
            "NVIDIA L40S",
            8,
            "ethernet",
            "8 x L40S on PCIe, 2 x 100GbE, no RDMA (built)",
        ),
        Profile(
            "gb200-4gpu",
            "gb200-nvl72-4gpu",
            "NVIDIA GB200",
            4,
            "infiniband",
            "one GB200 NVL72 compute tray, 4 GPUs, multi-node NVLink (built)",
        ),
    )
}

SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("ethernet", 250, "one 25 GbE port at 1:100"),
        Shape("infiniband", 2000, "one 200 Gb/s HDR InfiniBand port at 1:100 (8 x ethernet)"),
        Shape("none", None, "unshaped"),
    )
}


def fixtures_root() -> Path:
    """Where the recorded GPU hosts live: $VFLEET_GPU_HOSTS, else the repository's copy."""
    env = os.environ.get("VFLEET_GPU_HOSTS")
    if env:
        return Path(env)
    # tools/testbed/src/vfleet_testbed/profiles.py -> the repository root is four levels up
    # (tools/testbed is installed in editable mode; a wheel install must set the variable).
    return Path(__file__).resolve().parents[4] / "tests" / "data" / "gpu-hosts"
