"""Probe facts as the collector writes them, built from the real captures in
tests/data/gpu-hosts: one host's raw probe, the same machine under another name, measured
bandwidth, a facts folder. Shared by the probe, health, deploy, plan, calibrate, documents and
render tests and the testbed's health gate."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from support.paths import DATA, REPO

HOSTS = DATA / "gpu-hosts"
H200, H100, L40S, GB200 = (
    "h200-1gpu-ubuntu2404",
    "h100-sxm-8gpu-nvswitch",
    "l40s-pcie-8gpu",
    "gb200-nvl72-4gpu",
)
COLLECTOR = REPO / "ansible" / "roles" / "topology_probe" / "files" / "vfleet_probe.py"
STANDIN = HOSTS / "nvidia-smi-standin"
OUTPUT_FILES = {
    "nvidia_smi_query": "nvidia-smi-q.xml",
    "nvidia_smi_topo": "topo-m.txt",
    "nvidia_smi_nvlink": "nvlink-s.txt",
    "lscpu": "lscpu.txt",
    "numactl": "numactl.txt",
}


def ok_output(stdout: str) -> dict[str, Any]:
    return {"argv": [], "rc": 0, "stdout": stdout, "stderr": "", "error": None}


def raw_probe(fixture: str, **changes: Any) -> dict[str, Any]:
    """The collector JSON a host like the fixture would produce: its sysfs record plus the
    command outputs, each from its own file."""
    folder = HOSTS / fixture
    raw = json.loads((folder / "probe-sysfs.json").read_text())
    for name, filename in OUTPUT_FILES.items():
        if (folder / filename).is_file():
            raw["commands"][name] = ok_output((folder / filename).read_text())
    raw.update(changes)
    return raw


def allreduce_result(busbw: float, world: int) -> dict[str, Any]:
    rows = [
        {"bytes": 1 << 20, "seconds": 1e-4, "algbw_GBps": 10.0, "busbw_GBps": busbw / 4},
        {"bytes": 256 << 20, "seconds": 1e-3, "algbw_GBps": 200.0, "busbw_GBps": busbw},
    ]
    return {"ok": True, "backend": "nccl", "world_size": world, "rows": rows}


def with_bandwidth(
    raw: dict[str, Any], intra: float | None = None, inter: float | None = None
) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    raw["bandwidth"] = {
        "intra_allreduce": allreduce_result(intra, 8) if intra else None,
        "inter_allreduce": allreduce_result(inter, 2) if inter else None,
        "iperf3": {},
    }
    return raw


def second_host(raw: dict[str, Any], name: str, address: str) -> dict[str, Any]:
    """The same machine probed under another name and address."""
    raw = copy.deepcopy(raw)
    old = raw["address"]
    raw["host"], raw["address"] = name, address
    for nic in raw["sysfs"]["net"]:
        nic["ipv4"] = [address if ip == old else ip for ip in nic["ipv4"]]
    if raw.get("route_to"):
        raw["route_to"]["source"] = address
    return raw


def write_dir(path: Path, *raws: dict[str, Any]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for raw in raws:
        (path / f"{raw['host']}.json").write_text(json.dumps(raw))
    return path
