"""The pre-flight checks of one probed host, each a verdict with its evidence.

Every check reads the host's normalised facts (`vfleet.facts/1`, as the topology probe
wrote them) and, where a threshold is relative, the other hosts' facts or an expectation
derived from the topology (`vfleet.health.expect`), never a fixed per-SKU table. A check
without the data it needs says "skip" and why; it never passes by default.

Verdicts: fail (the host must not serve: the plan leaves it out), warn (serve, but look),
pass, skip.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vfleet.health import expect
from vfleet.health.xid import XID_SEVERITY

ORDER = {"fail": 0, "warn": 1, "pass": 2, "skip": 3}


@dataclass(frozen=True)
class Check:
    host: str
    name: str
    verdict: str  # fail | warn | pass | skip
    evidence: str

    def to_json(self) -> dict[str, str]:
        return {
            "host": self.host,
            "check": self.name,
            "verdict": self.verdict,
            "evidence": self.evidence,
        }


@dataclass(frozen=True)
class Peers:
    """What the other hosts of the same GPU show: the bar for relative checks."""

    gpu_count: int
    nvlink_links: int
    nvlink_link_GBps: float | None
    ib_rate_gbps: Mapping[str, float] = field(default_factory=dict)
    """the fastest ACTIVE InfiniBand port of each HCA type on any host: the fabric's rate"""


def _infiniband_ports(facts: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        h for h in facts.get("hcas") or [] if (h.get("link_layer") or "InfiniBand") == "InfiniBand"
    ]


def _fabric_rates(facts: Sequence[dict[str, Any]]) -> dict[str, float]:
    rates: dict[str, float] = {}
    for port in (p for f in facts for p in _infiniband_ports(f)):
        kind, rate = port.get("hca_type"), port.get("rate_gbps")
        if kind and rate and (port.get("state") or "").upper() == "ACTIVE":
            rates[kind] = max(rates.get(kind, 0.0), float(rate))
    return rates


def peers_of(facts: Sequence[dict[str, Any]]) -> Peers:
    return Peers(
        gpu_count=max((f.get("gpu_count") or 0 for f in facts), default=0),
        nvlink_links=max(
            ((f.get("nvlink") or {}).get("links_per_gpu") or 0 for f in facts), default=0
        ),
        nvlink_link_GBps=max(
            ((f.get("nvlink") or {}).get("link_GBps") or 0.0 for f in facts), default=0.0
        )
        or None,
        ib_rate_gbps=_fabric_rates(facts),
    )


def _gpus(facts: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    return [
        (g.get("index", i), g.get("health") or {}) for i, g in enumerate(facts.get("gpus") or [])
    ]


def _per_gpu(
    facts: dict[str, Any], name: str, judge: Callable[[dict[str, Any]], tuple[str, str] | None]
) -> Check:
    """One check over every GPU: the worst GPU's verdict, every sick GPU named."""
    host = facts["host"]
    gpus = _gpus(facts)
    if not gpus:
        return Check(host, name, "skip", "no GPU listed by nvidia-smi -q -x")
    found = [(i, judge(h)) for i, h in gpus]
    sick = [(i, v) for i, v in found if v is not None]
    if not sick:
        return Check(host, name, "pass", f"{len(gpus)} GPU(s) clear")
    worst = min((v[0] for _, v in sick), key=lambda x: ORDER[x])
    return Check(host, name, worst, "; ".join(f"GPU{i}: {v[1]}" for i, v in sick))


def check_gpu_count(facts: dict[str, Any], peers: Peers, expected: int | None) -> Check:
    want = expected or peers.gpu_count
    got = facts.get("gpu_count") or 0
    source = "the inventory" if expected else "the other hosts"
    if got < want:
        return Check(
            facts["host"], "gpu_count", "fail", f"{got} GPUs, {source} {want}: a GPU off the bus?"
        )
    return Check(facts["host"], "gpu_count", "pass", f"{got} GPUs ({source}: {want})")


def _ecc(h: dict[str, Any]) -> tuple[str, str] | None:
    vol, agg = h.get("ecc_volatile_uncorrectable"), h.get("ecc_aggregate_uncorrectable")
    if vol:
        return "fail", f"{vol} uncorrectable ECC error(s) since the driver loaded"
    if agg:
        return "warn", f"{agg} uncorrectable ECC error(s) over the board's life"
    return None


def _retired(h: dict[str, Any]) -> tuple[str, str] | None:
    if h.get("retirement_pending"):
        return "fail", "a page retirement is pending: reset the GPU"
    sbe, dbe = h.get("retired_pages_sbe") or 0, h.get("retired_pages_dbe") or 0
    if sbe + dbe >= expect.RETIRED_PAGES_LIMIT:
        return (
            "fail",
            f"{sbe + dbe} retired pages (NVIDIA's replacement point: {expect.RETIRED_PAGES_LIMIT})",
        )
    if dbe:
        return "warn", f"{dbe} page(s) retired for double-bit errors, {sbe} for single-bit"
    return None


def _remapped(h: dict[str, Any]) -> tuple[str, str] | None:
    if h.get("remap_failure"):
        return "fail", "a row remap failed: no spare rows left in a bank"
    if h.get("remap_pending"):
        return "fail", "a row remap is pending: reset the GPU"
    if h.get("remapped_rows_uncorrectable"):
        return (
            "warn",
            f"{h['remapped_rows_uncorrectable']} row(s) remapped for uncorrectable errors",
        )
    return None


def _pcie(h: dict[str, Any]) -> tuple[str, str] | None:
    width, width_max = h.get("pcie_width"), h.get("pcie_width_max")
    gen, gen_max = h.get("pcie_gen"), h.get("pcie_gen_max")
    if width and width_max and width < width_max:
        return "fail", f"PCIe x{width} on an x{width_max} device (a bad seat or riser)"
    if gen and gen_max and gen < gen_max:
        return "warn", f"PCIe Gen{gen} of Gen{gen_max} (reads low at idle: re-check under load)"
    return None


def _clocks(h: dict[str, Any]) -> tuple[str, str] | None:
    reasons = h.get("clock_event_reasons") or []
    hard = [r for r in reasons if r.startswith("hw_")]
    if hard:
        return "fail", "clocks held down by " + ", ".join(hard)
    if reasons:
        return "warn", "clocks held down by " + ", ".join(reasons)
    return None


def _persistence(h: dict[str, Any]) -> tuple[str, str] | None:
    if h.get("persistence_mode") is False:
        return "warn", "persistence mode off (slow starts; the driver unloads between jobs)"
    return None


def check_fabric_manager(facts: dict[str, Any]) -> Check:
    host = facts["host"]
    if not facts.get("nvswitch_devices"):
        return Check(host, "fabric_manager", "skip", "no NVSwitch on the host")
    if not facts.get("fabric_manager"):
        switches = len(facts["nvswitch_devices"])
        return Check(
            host, "fabric_manager", "fail", f"{switches} NVSwitch(es), nvidia-fabricmanager off"
        )
    return Check(host, "fabric_manager", "pass", "nvidia-fabricmanager active")


def check_nvlink(facts: dict[str, Any], peers: Peers) -> Check:
    host, nv = facts["host"], facts.get("nvlink") or {}
    if (facts.get("gpu_count") or 0) < 2 and not (facts.get("fabric") or {}).get("multi_node"):
        return Check(host, "nvlink", "skip", "one GPU and no multi-node NVLink: no peer to link to")
    want = max(expect.nvlink_links(facts.get("gpu_name")), peers.nvlink_links)
    if not want:
        return Check(host, "nvlink", "skip", "no NVLink expected on this GPU")
    links, speed = nv.get("links_per_gpu") or 0, nv.get("link_GBps")
    if links < want:
        return Check(host, "nvlink", "fail", f"a GPU has {links} of {want} NVLinks active")
    best = peers.nvlink_link_GBps
    if speed and best and speed < expect.SLOW_LINK * best:
        return Check(host, "nvlink", "warn", f"links at {speed:g} GB/s, other hosts {best:g} GB/s")
    return Check(host, "nvlink", "pass", f"{links} links per GPU at {speed or '?'} GB/s")


def _ib_bar(port: dict[str, Any], host_best: float, peers: Peers) -> tuple[float, str]:
    """What one port should run at, and why: its HCA's fastest rate, capped at the fastest
    port of that HCA type in the fabric (a ConnectX-7 on an HDR switch runs at 200, on every
    host); an HCA type not in the table, the host's fastest port."""
    capability = expect.hca_capability(port.get("hca_type"))
    if capability is None:
        return host_best, f"the host's {host_best:g} Gb/s"
    model, fastest = capability
    fabric = peers.ib_rate_gbps.get(port.get("hca_type") or "", 0.0)
    if fabric and fabric < fastest:
        return fabric, f"the fabric's {fabric:g} Gb/s ({model})"
    return fastest, f"its {model}'s {fastest:g} Gb/s"


def check_infiniband(facts: dict[str, Any], peers: Peers) -> Check:
    """Port state, and each port's rate against its HCA's capability as the fabric allows
    it: a port that trained at a lower rate (a bad cable or switch port) halves what its
    rail carries."""
    host = facts["host"]
    ports = _infiniband_ports(facts)
    if not ports:
        return Check(host, "infiniband", "skip", "no InfiniBand port")
    down = [f"{p['name']}/{p.get('port', 1)} {p.get('state') or '?'}" for p in ports
            if (p.get("state") or "").upper() != "ACTIVE"]  # fmt: skip
    if down:
        return Check(host, "infiniband", "fail", "not ACTIVE: " + ", ".join(down))
    host_best = max(p.get("rate_gbps") or 0.0 for p in ports)
    slow, bars = [], set()
    for port in ports:
        bar, why = _ib_bar(port, host_best, peers)
        bars.add(why)
        if (port.get("rate_gbps") or 0.0) < bar:
            rate = f"{port['rate_gbps']:g}" if port.get("rate_gbps") else "?"
            slow.append(f"{port['name']} {rate} Gb/s, below {why}")
    if slow:
        return Check(host, "infiniband", "warn", "; ".join(slow))
    return Check(
        host,
        "infiniband",
        "pass",
        f"{len(ports)} port(s) ACTIVE at {host_best:g} Gb/s, as " + " and ".join(sorted(bars)),
    )


def check_nic_pcie(facts: dict[str, Any]) -> Check:
    """The PCIe links of the network and InfiniBand controllers that carry the host's traffic
    against what each device and its slot allow: an HCA at x8 on x16 carries half its line
    rate whatever its port says."""
    host = facts["host"]
    # Only the controllers the plan's traffic crosses: the RDMA rails and the bootstrap NIC
    # (a management port at a low width costs nothing; in a container the host's own NICs
    # show no network device at all).
    data_path = {facts.get("bootstrap_interface")} | {
        name for h in facts.get("hcas") or [] for name in [h["name"], *(h.get("netdevs") or [])]
    }
    links = [
        x
        for x in facts.get("nic_pcie") or []
        if x.get("width") and x.get("width_max") and data_path & set(x.get("names") or [])
    ]
    if not links:
        return Check(
            host, "nic_pcie", "skip", "no network controller on the data path reports its link"
        )

    def shown(x: dict[str, Any]) -> str:
        return f"{'/'.join(x.get('names') or []) or x['address']}"

    narrow = [
        f"{shown(x)} x{x['width']} of x{x['width_max']}"
        for x in links
        if x["width"] < x["width_max"]
    ]
    if narrow:
        return Check(
            host, "nic_pcie", "fail", "fewer lanes than the device has: " + ", ".join(narrow)
        )
    slow = [
        f"{shown(x)} Gen{x['gen']} of Gen{x['gen_max']}"
        for x in links
        if x.get("gen") and x.get("gen_max") and x["gen"] < x["gen_max"]
    ]
    if slow:
        return Check(
            host, "nic_pcie", "warn", "a lower generation than allowed: " + ", ".join(slow)
        )
    best = max(links, key=lambda x: (x["width"], x.get("gen") or 0))
    gen = f" Gen{best['gen']}" if best.get("gen") else ""
    return Check(
        host,
        "nic_pcie",
        "pass",
        f"{len(links)} controller(s) at full width (up to x{best['width']}{gen})",
    )


def check_allreduce(facts: dict[str, Any]) -> Check:
    host, bw = facts["host"], facts.get("bandwidth") or {}
    measured = bw.get("intra_allreduce_busbw_GBps")
    if measured is None:
        return Check(host, "allreduce", "skip", "no all-reduce measured on this host")
    if bw.get("backend") != "nccl":
        return Check(
            host, "allreduce", "skip", f"measured with {bw.get('backend')}, not NCCL on the GPUs"
        )
    want = expect.intra_allreduce_GBps(facts)
    if not want:
        return Check(host, "allreduce", "skip", "no expectation for this topology")
    return _against(host, "allreduce", measured, want, "GB/s", "the topology allows")


def _against(host: str, name: str, got: float, want: float, unit: str, what: str) -> Check:
    share = got / want
    text = f"{got:g} {unit}, {share:.0%} of the {want:.4g} {unit} {what}"
    if share < expect.FAIL_SHARE:
        return Check(host, name, "fail", text)
    if share < expect.WARN_SHARE:
        return Check(host, name, "warn", text)
    return Check(host, name, "pass", text)


def check_xid(host: str, events: list[dict[str, Any]] | None) -> Check:
    if events is None:
        return Check(host, "xid", "skip", "no kernel log captured")
    if not events:
        return Check(host, "xid", "pass", "no NVRM Xid in the kernel log since boot")
    worst = min(
        (XID_SEVERITY.get(e["code"], ("warn", ""))[0] for e in events), key=lambda v: ORDER[v]
    )
    shown = sorted(
        {
            f"Xid {e['code']} on {e['device']} "
            f"({XID_SEVERITY.get(e['code'], ('', 'not in the table'))[1]})"
            for e in events
        }
    )
    return Check(
        host,
        "xid",
        worst,
        "; ".join(shown[:6]) + (f" (+{len(shown) - 6} more)" if len(shown) > 6 else ""),
    )


def host_checks(
    facts: dict[str, Any], peers: Peers, expected_gpus: int | None, iperf3: Check
) -> list[Check]:
    """Every check of one host, in the order the report lists them; `iperf3` comes from the
    whole ring's runs (vfleet.health.links)."""
    return [
        check_gpu_count(facts, peers, expected_gpus),
        check_xid(facts["host"], facts.get("xid_events")),
        _per_gpu(facts, "ecc", _ecc),
        _per_gpu(facts, "retired_pages", _retired),
        _per_gpu(facts, "remapped_rows", _remapped),
        _per_gpu(facts, "pcie", _pcie),
        _per_gpu(facts, "clocks", _clocks),
        _per_gpu(facts, "persistence", _persistence),
        check_nvlink(facts, peers),
        check_fabric_manager(facts),
        check_infiniband(facts, peers),
        check_nic_pcie(facts),
        check_allreduce(facts),
        iperf3,
    ]
