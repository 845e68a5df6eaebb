"""The health fields of one GPU in `nvidia-smi -q -x`: ECC error counts, retired pages,
remapped rows, the PCIe link against the device's capability, the active clock event
(throttle) reasons and persistence mode. Read as they are; what counts as sick is
`vfleet.health`'s call.

Two generations of field names are read: drivers from R535 on write
`<clocks_event_reasons>` and `<dram_uncorrectable>`-style ECC counters; older ones
`<clocks_throttle_reasons>` and `<single_bit>/<double_bit>` totals.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

# Reasons that say nothing about health: an idle GPU, clocks an operator set, the display.
BENIGN_REASONS = ("gpu_idle", "applications_clocks_setting", "display_clocks_setting", "sync_boost")


@dataclass(frozen=True)
class GpuHealth:
    persistence_mode: bool | None = None
    ecc_volatile_correctable: int | None = None
    ecc_volatile_uncorrectable: int | None = None
    ecc_aggregate_correctable: int | None = None
    ecc_aggregate_uncorrectable: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retirement_pending: bool | None = None
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    clock_event_reasons: list[str] = field(default_factory=list)
    """active reasons other than the benign ones (e.g. [hw_thermal_slowdown])"""


def _value(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    return None if not text or text in ("N/A", "Not Supported", "[N/A]") else text


def _int(node: ET.Element | None, path: str) -> int | None:
    match = re.match(r"^\s*(\d+)", _value(node, path) or "")
    return int(match.group(1)) if match else None


def _yes(node: ET.Element | None, path: str) -> bool | None:
    text = _value(node, path)
    if text is None:
        return None
    return text.lower() in ("yes", "enabled", "active", "true")


def _sum(*values: int | None) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _ecc(node: ET.Element | None) -> tuple[int | None, int | None]:
    """(correctable, uncorrectable) of one ECC section, in either generation's names."""
    if node is None:
        return None, None
    corr = _sum(_int(node, "sram_correctable"), _int(node, "dram_correctable"))
    unc = _sum(
        _int(node, "sram_uncorrectable"),
        _int(node, "sram_uncorrectable_parity"),
        _int(node, "sram_uncorrectable_secded"),
        _int(node, "dram_uncorrectable"),
    )
    if corr is None and unc is None:  # before R535: single_bit / double_bit totals
        corr, unc = _int(node, "single_bit/total"), _int(node, "double_bit/total")
    return corr, unc


def _reasons(gpu: ET.Element) -> list[str]:
    for section, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        node = gpu.find(section)
        if node is None:
            continue
        active = []
        for child in node:
            name = child.tag.removeprefix(prefix)
            if (child.text or "").strip() == "Active" and name not in BENIGN_REASONS:
                active.append(name)
        return active
    return []


def parse_gpu_health(gpu: ET.Element) -> GpuHealth:
    """The health fields of one `<gpu>` element."""
    ecc = gpu.find("ecc_errors")
    vol_corr, vol_unc = _ecc(ecc.find("volatile") if ecc is not None else None)
    agg_corr, agg_unc = _ecc(ecc.find("aggregate") if ecc is not None else None)
    link = gpu.find("pci/pci_gpu_link_info")
    width = re.match(r"^(\d+)x$", _value(link, "link_widths/current_link_width") or "")
    width_max = re.match(r"^(\d+)x$", _value(link, "link_widths/max_link_width") or "")
    return GpuHealth(
        persistence_mode=_yes(gpu, "persistence_mode"),
        ecc_volatile_correctable=vol_corr,
        ecc_volatile_uncorrectable=vol_unc,
        ecc_aggregate_correctable=agg_corr,
        ecc_aggregate_uncorrectable=agg_unc,
        retired_pages_sbe=_int(gpu, "retired_pages/multiple_single_bit_retirement/retired_count"),
        retired_pages_dbe=_int(gpu, "retired_pages/double_bit_retirement/retired_count"),
        retirement_pending=_yes(gpu, "retired_pages/pending_retirement"),
        remapped_rows_uncorrectable=_int(gpu, "remapped_rows/remapped_row_unc"),
        remap_pending=_yes(gpu, "remapped_rows/remapped_row_pending"),
        remap_failure=_yes(gpu, "remapped_rows/remapped_row_failure"),
        pcie_gen=_int(link, "pcie_gen/current_link_gen"),
        pcie_gen_max=_int(link, "pcie_gen/max_link_gen"),
        pcie_width=int(width.group(1)) if width else None,
        pcie_width_max=int(width_max.group(1)) if width_max else None,
        clock_event_reasons=_reasons(gpu),
    )
