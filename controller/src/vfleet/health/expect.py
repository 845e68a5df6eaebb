"""What a host should measure, derived from its own topology rather than a per-SKU table,
and the shares of it that make a warning or a failure.

Sources of the numbers:
- NVLink lanes per GPU and per-link rate by generation: NVIDIA's NVLink pages (NVLink 3,
  A100: 12 links of 25 GB/s a direction; NVLink 4, H100/H200: 18 of 25; NVLink 5, B200/B300:
  18 of 50). The GPU catalog's `nvlink_gb_s` is the bidirectional total.
- NCCL all_reduce bus bandwidth inside an NVSwitch node reaches 80-90% of one direction's
  NVLink bandwidth at large messages (nccl-tests on H100 HGX: ~450-480 GB/s of 450-478).
- The fastest port rate of each NVIDIA (Mellanox) HCA, by the `hca_type` the mlx5 driver
  writes to sysfs ("MT" and the PCI device ID in decimal; the IDs from the PCI ID
  Repository, pci-ids.ucw.cz, vendor 15b3), from NVIDIA's ConnectX and BlueField product
  briefs: ConnectX-5 EDR 100 Gb/s, ConnectX-6 HDR 200, ConnectX-7 NDR 400, ConnectX-8 XDR
  800, BlueField-3 NDR 400.
- Retired pages: the framebuffer holds at most 64 retirements (NVIDIA, "Row Remapping",
  docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/row-remapping.html); a GPU near that is
  replaced.
"""

from __future__ import annotations

from typing import Any

from vfleet.errors import UserError

WARN_SHARE = 0.75  # below this share of the expectation: warn
FAIL_SHARE = 0.5  # below this: fail (the host drags its TP or EP group down)
SLOW_LINK = 0.9  # a link slower than this share of the other hosts' runs below its rate
ALLREDUCE_SHARE = 0.8  # NCCL all_reduce busbw over one direction's NVLink bandwidth
IPERF3_SHARE = 0.9  # one iperf3 run over the NIC's line rate (TCP and framing overhead)
RETIRED_PAGES_LIMIT = 60  # of the 64 the framebuffer can retire
LINK_RATE_GBPS = {"ampere": 25.0, "hopper": 25.0, "blackwell": 50.0}  # one direction, one link
# hca_type -> (model, fastest InfiniBand port rate in Gb/s).
HCA_MAX_RATE_GBPS = {
    "MT4115": ("ConnectX-4", 100.0),
    "MT4119": ("ConnectX-5", 100.0),
    "MT4121": ("ConnectX-5 Ex", 100.0),
    "MT4123": ("ConnectX-6", 200.0),
    "MT4129": ("ConnectX-7", 400.0),
    "MT4131": ("ConnectX-8", 800.0),
    "MT41692": ("BlueField-3", 400.0),
}


def hca_capability(hca_type: str | None) -> tuple[str, float] | None:
    """The HCA's model and its fastest port rate, or None for a type not in the table (the
    probe strips the sysfs text; the fabric's rates are keyed by the same string)."""
    return HCA_MAX_RATE_GBPS.get(hca_type or "")


def _gpu(name: str | None) -> Any:
    if not name:
        return None
    from vfleet.catalog.gpus import resolve_gpu

    try:
        return resolve_gpu(name)
    except UserError:
        return None


def nvlink_links(gpu_name: str | None) -> int:
    """NVLinks an SXM GPU of this model has (0: none or unknown)."""
    gpu = _gpu(gpu_name)
    if gpu is None or not gpu.nvlink_gb_s or gpu.form_factor not in ("sxm", "superchip"):
        return 0
    rate = LINK_RATE_GBPS.get(gpu.arch)
    return round(gpu.nvlink_gb_s / 2 / rate) if rate else 0


def intra_allreduce_GBps(facts: dict[str, Any]) -> float | None:
    """NCCL all_reduce busbw the host's GPUs should reach: over NVLink, a share of one
    direction's bandwidth as the probe counted it (links x rate); over PCIe, the slot's."""
    nv = facts.get("nvlink") or {}
    if nv.get("per_gpu_GBps"):
        return ALLREDUCE_SHARE * float(nv["per_gpu_GBps"])
    gpu = _gpu(facts.get("gpu_name"))
    if gpu is None or not gpu.pcie_gen:
        return None
    # x16 PCIe: ~4 GB/s a lane a direction at Gen5, half per generation below.
    return float(ALLREDUCE_SHARE * 16 * 4.0 / 2 ** max(0, 5 - int(gpu.pcie_gen)))


def bootstrap_nic_Gbps(facts: dict[str, Any]) -> float | None:
    """Line rate of the NIC peers reach the host on (Gb/s), when the kernel knows it and
    the NIC is a physical one."""
    name = facts.get("bootstrap_interface")
    for nic in facts.get("nics") or []:
        # A virtual NIC (veth, bridge) reports a nominal speed, not a line rate.
        if nic.get("name") == name and not nic.get("virtual") and (nic.get("speed_mbps") or -1) > 0:
            return float(nic["speed_mbps"]) / 1000
    return None
