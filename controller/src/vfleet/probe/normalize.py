"""One host's probe output, raw or already normalised, turned into the normalised host
facts (schema `vfleet.facts/1`). This is the one place that knows the collector's
capture layout; the parsers it calls each know one tool, and the cluster is built from its
output elsewhere (vfleet.probe.to_cluster), so facts can be checked per host first.

Input is one JSON file per host in `artifacts/<env>/facts/`, as the collector
(`ansible/roles/topology_probe/files/vfleet_probe.py`, schema `vfleet.probe/1`) writes it:
raw command outputs under `commands` (`nvidia_smi_query` = `nvidia-smi -q -x`,
`nvidia_smi_topo` = `nvidia-smi topo -m`, `nvidia_smi_nvlink` = `nvidia-smi nvlink -s`,
`lscpu`, `numactl` = `numactl -H`, `fabricmanager` = `systemctl is-active
nvidia-fabricmanager`, `vllm_help` = `vllm serve --help=all`), each
`{argv, rc, stdout, stderr, error}`; sysfs records under `sysfs` (`infiniband`, `net`,
`pci_nvidia`, `pci_nics`); files under `files` (`/proc/net/route`, `/proc/meminfo`); the `python`
section (vLLM/torch/NCCL versions read in the given venv); `route_to` (the source address
the kernel picks towards the cluster); measurements under `bandwidth`; `probe_failed` and
`errors`. Parsing happens on the controller, so it is tested against real captures.

`normalize(raw)` turns that into the normalised facts; a file that already holds normalised
facts is checked and taken as is, so facts can be written by hand. The model
`vfleet.documents.facts.FactsModel` is the schema: its field docstrings say what each key holds
(host, address, gpus, gpu_name, gpu_count, topology, nvlink, fabric, hcas, nics,
bootstrap_interface, cpu, versions, vllm, bandwidth, probe_failed, errors, notes), and
vfleet/schemas/facts.schema.json is generated from it. Both what `normalize` builds and what
a hand-written file holds pass through that model, so every problem is one line naming the
file, the field and what it should hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from vfleet.documents.facts import FACTS_SCHEMA, FactsModel
from vfleet.errors import UserError
from vfleet.inputs.files import Document, parse_json, read_text
from vfleet.inputs.validate import validate
from vfleet.probe.gpu_tools import (
    GpuFabric,
    SmiReport,
    TopoMatrix,
    classify_intra,
    parse_nvidia_smi_xml,
    parse_nvlink_status,
    parse_topo_matrix,
)
from vfleet.probe.host import parse_lscpu, parse_meminfo_mib, parse_numactl, parse_vllm_flags
from vfleet.probe.kernel_log import xid_events
from vfleet.probe.network import (
    NetIf,
    default_route_interface,
    parse_hca_records,
    parse_net_records,
    parse_pci_nic_records,
)
from vfleet.probe.text_numbers import significant

PROBE_SCHEMA = "vfleet.probe/1"


def _command(raw: dict[str, Any], name: str) -> str | None:
    """A command's stdout when it ran and succeeded."""
    entry = (raw.get("commands") or {}).get(name)
    if not isinstance(entry, dict) or entry.get("rc") != 0:
        return None
    out = entry.get("stdout")
    return out if isinstance(out, str) and out.strip() else None


def _allreduce_busbw(result: Any) -> float | None:
    """busbw at the largest message size (nccl-tests' plateau) of a correct run."""
    if not isinstance(result, dict) or not result.get("ok") or not result.get("rows"):
        return None
    rows = sorted(result["rows"], key=lambda r: r.get("bytes", 0))
    value = rows[-1].get("busbw_GBps")
    return float(value) if value is not None else None


def _bandwidth(raw: dict[str, Any]) -> dict[str, Any]:
    bw = raw.get("bandwidth") or {}
    iperf = {}
    for peer, result in (bw.get("iperf3") or {}).items():
        if isinstance(result, dict) and result.get("bits_per_second_received"):
            iperf[peer] = significant(float(result["bits_per_second_received"]) / 1e9)
    backends: set[Any] = {
        (bw.get(k) or {}).get("backend") for k in ("intra_allreduce", "inter_allreduce")
    } - {None}
    return {
        "intra_allreduce_busbw_GBps": _allreduce_busbw(bw.get("intra_allreduce")),
        "inter_allreduce_busbw_GBps": _allreduce_busbw(bw.get("inter_allreduce")),
        "iperf3_Gbps": iperf,
        "backend": "/".join(sorted(backends)) or None,
    }


def _nvlink(
    status_text: str | None, topo: TopoMatrix | None, intra_link: str | None
) -> dict[str, Any]:
    """NVLinks per GPU and their speed: exact from `nvlink -s`, else counted in `topo -m`."""
    status = parse_nvlink_status(status_text) if status_text else None
    if status is not None and status.links_per_gpu and max(status.links_per_gpu) > 0:
        links, link_gbps = min(status.links_per_gpu), status.link_GBps
        source = "nvidia-smi nvlink -s"
    elif topo is not None and len(topo.gpus) > 1:
        counts = [[topo.nv_count(a, b) for b in topo.gpus if b != a] for a in topo.gpus]
        # Through a switch every pair shows all of a GPU's links; in a mesh they add up.
        if intra_link == "nvswitch":
            links = max(max(c) for c in counts)
        else:
            links = min(sum(c) for c in counts)
        link_gbps, source = None, "nvidia-smi topo -m"
    else:
        links, link_gbps, source = 0, None, None
    return {
        "links_per_gpu": links,
        "link_GBps": link_gbps,
        "per_gpu_GBps": round(links * link_gbps, 3) if links and link_gbps else None,
        "source": source,
    }


def _bootstrap(
    nics: list[NetIf], address: str | None, route_source: str | None, default_if: str | None
) -> tuple[str | None, str | None]:
    """The interface peers reach, and the interface towards the cluster."""
    by_ip = {ip: nic.name for nic in nics for ip in nic.ipv4}
    cluster_if = by_ip.get(address or "") or by_ip.get(route_source or "")
    if cluster_if:
        return cluster_if, cluster_if
    if default_if:
        return default_if, None
    candidates = [n.name for n in nics if n.ipv4 and n.name != "lo" and n.operstate != "down"]
    return (candidates[0] if len(candidates) == 1 else None), None


def normalize(
    raw: dict[str, Any], host: str | None = None, source: str | None = None
) -> dict[str, Any]:
    """One host's facts in the normalised schema (vfleet.documents.facts.FactsModel), from the
    collector JSON or from facts already normalised; `source` names the file in errors."""
    if raw.get("schema") == FACTS_SCHEMA:
        facts = {**raw, "host": raw.get("host") or host}
        validate(FactsModel, Document(facts, source or f"facts for host {facts['host']}"))
        return facts
    if raw.get("schema") != PROBE_SCHEMA:
        raise UserError(
            f"{source or 'probe facts'}: schema is {raw.get('schema')!r}: write "
            f"{FACTS_SCHEMA!r} for normalised facts, or rerun the probe (it writes "
            f"{PROBE_SCHEMA!r})"
        )
    try:
        facts = _from_probe(raw, host)
    except (TypeError, KeyError, AttributeError, IndexError, ValueError) as exc:
        # The collector writes this file; a section of the wrong shape means it was cut
        # short or edited, and no part of it can be trusted.
        raise UserError(
            f"{source or 'probe facts'}: not a whole {PROBE_SCHEMA} capture "
            f"({type(exc).__name__}: {str(exc)[:80]}): rerun the topology probe"
        ) from None
    # vfleet built these, but from text the host printed: a bad value stops here, named.
    validate(FactsModel, Document(facts, f"{source or 'facts'} (from the probe output)"))
    return facts


def _gpu_reports(
    raw: dict[str, Any], errors: list[str], bad: Callable[[str], UserError]
) -> tuple[SmiReport, TopoMatrix | None]:
    """nvidia-smi -q -x and topo -m, parsed, and checked to describe the same GPUs."""
    smi_xml = _command(raw, "nvidia_smi_query")
    smi = SmiReport(None, None, ())
    if smi_xml is None and not errors:
        errors.append("no nvidia-smi -q -x output (commands.nvidia_smi_query)")
    if smi_xml is not None:
        try:
            smi = parse_nvidia_smi_xml(smi_xml)
        except ValueError as exc:
            raise bad(f"commands.nvidia_smi_query: {exc}") from None
    topo_text = _command(raw, "nvidia_smi_topo")
    topo = None
    if topo_text is not None:
        try:
            topo = parse_topo_matrix(topo_text)
        except ValueError as exc:
            raise bad(f"commands.nvidia_smi_topo: {exc}") from None
    if topo is not None and smi.gpus and len(topo.gpus) != len(smi.gpus):
        raise bad(
            f"nvidia-smi -q lists {len(smi.gpus)} GPUs but topo -m {len(topo.gpus)} "
            "(field topology.matrix)"
        )
    return smi, topo


def _nvlink_fabric(smi: SmiReport, notes: list[str]) -> tuple[GpuFabric, bool]:
    """The first GPU's fabric record, and whether the GPUs form one multi-node NVLink domain."""
    fabrics = [g.fabric for g in smi.gpus]
    fabric = fabrics[0] if fabrics else GpuFabric()
    multi_node = bool(fabrics) and all(f.multi_node for f in fabrics)
    if multi_node and len({(f.clique_id, f.cluster_uuid) for f in fabrics}) > 1:
        notes.append("GPUs report different NVLink cliques: not treated as one NVLink domain")
        multi_node = False
    return fabric, multi_node


def _intra_link(
    topo: TopoMatrix | None, smi: SmiReport, switch_evidence: bool
) -> tuple[str | None, str]:
    if topo is not None:
        return classify_intra(topo, switch_evidence)
    if len(smi.gpus) == 1:
        return "none", "one GPU: no GPU-to-GPU link"
    return None, "nvidia-smi topo -m was not captured"


def _from_probe(raw: dict[str, Any], host: str | None) -> dict[str, Any]:
    host = str(raw.get("host") or host or "?")
    errors = [str(e) for e in raw.get("errors") or []]
    notes: list[str] = []

    def bad(what: str) -> UserError:
        return UserError(f"facts for host {host}: {what}: rerun the topology probe on it")

    smi, topo = _gpu_reports(raw, errors, bad)

    sysfs = raw.get("sysfs") or {}
    files = raw.get("files") or {}
    try:
        hcas = parse_hca_records(sysfs.get("infiniband") or [])
        nics = [n for n in parse_net_records(sysfs.get("net") or []) if n.name != "lo"]
        nic_pcie = parse_pci_nic_records(sysfs.get("pci_nics") or [])
    except (KeyError, TypeError, ValueError) as exc:
        raise bad(f"sysfs records are malformed ({exc!r})") from None
    nvswitch_devices = [
        d["address"]
        for d in sysfs.get("pci_nvidia") or []
        if str(d.get("class", "")).lower().startswith("0x0680") and d.get("address")
    ]
    fm_state = (_command(raw, "fabricmanager") or "").strip()
    fabric_manager = fm_state == "active"

    fabric, multi_node = _nvlink_fabric(smi, notes)
    switch_evidence = bool(nvswitch_devices) or fabric_manager or multi_node
    intra_link, reason = _intra_link(topo, smi, switch_evidence)

    default_if = default_route_interface(files.get("/proc/net/route"))
    route_source = (raw.get("route_to") or {}).get("source")
    address = raw.get("address")
    bootstrap, cluster_if = _bootstrap(nics, address, route_source, default_if)
    if address is None and bootstrap:
        address = next((n.ipv4[0] for n in nics if n.name == bootstrap and n.ipv4), None)
    rdma_of = {dev: h.name for h in hcas for dev in h.netdevs}

    python = raw.get("python") or {}
    help_text = _command(raw, "vllm_help")
    lscpu = _command(raw, "lscpu")
    numactl = _command(raw, "numactl")
    cpu = parse_lscpu(lscpu) if lscpu else {}
    if numactl:
        cpu["numa_memory_mib"] = parse_numactl(numactl)

    totals = [g.memory_total_mib for g in smi.gpus if g.memory_total_mib is not None]
    used = [g.memory_used_mib for g in smi.gpus if g.memory_used_mib is not None]
    names = sorted({g.name for g in smi.gpus})
    if len(names) > 1:
        raise UserError(
            f"facts for host {host}: field gpu_name: the host mixes GPU types "
            f"({', '.join(names)}): vfleet plans one GPU type per pool"
        )
    return {
        "schema": FACTS_SCHEMA,
        "host": host,
        "address": address,
        "gpus": [asdict(g) for g in smi.gpus],
        "gpu_name": names[0] if names else None,
        "gpu_count": len(smi.gpus),
        "gpu_memory_total_mib": min(totals) if totals else None,
        "gpu_memory_used_mib": max(used) if used else None,
        "topology": {
            "intra_link": intra_link,
            "reason": reason,
            "matrix": topo.gpu_matrix() if topo else {},
            "gpu_nic": topo.gpu_nic() if topo else {},
            "nics": list(topo.nics.values()) if topo else [],
            "cpu_affinity": topo.cpu_affinity if topo else {},
            "numa_affinity": topo.numa_affinity if topo else {},
            "gpu_numa_id": topo.gpu_numa_id if topo else {},
        },
        "nvlink": _nvlink(_command(raw, "nvidia_smi_nvlink"), topo, intra_link),
        "fabric": {**asdict(fabric), "multi_node": multi_node},
        "nvswitch": bool(nvswitch_devices) or multi_node or intra_link == "nvswitch",
        "nvswitch_devices": nvswitch_devices,
        "fabric_manager": fabric_manager,
        "hcas": [
            {
                **{k: v for k, v in asdict(h).items() if k not in ("gids", "netdevs")},
                "netdevs": list(h.netdevs),
                "roce_gid_index": h.roce_gid_index,
                "gids": [asdict(g) for g in h.gids],
            }
            for h in hcas
        ],
        "nic_pcie": [{**asdict(link), "names": list(link.names)} for link in nic_pcie],
        "nics": [
            {
                **asdict(n),
                "ipv4": list(n.ipv4),
                "default_route": n.name == default_if,
                "cluster_route": n.name == cluster_if,
                "rdma_device": rdma_of.get(n.name),
            }
            for n in nics
        ],
        "bootstrap_interface": bootstrap,
        "cpu": cpu,
        "host_memory_mib": parse_meminfo_mib(files.get("/proc/meminfo")),
        "driver_version": smi.driver_version,
        "cuda_version": smi.cuda_version,
        "nccl_version": python.get("nccl_version"),
        "vllm": {
            "version": python.get("vllm_version"),
            "flags": parse_vllm_flags(help_text) if help_text else [],
        },
        "bandwidth": _bandwidth(raw),
        "xid_events": xid_events((raw.get("commands") or {}).get("kernel_xid")),
        "probe_failed": bool(raw.get("probe_failed")),
        "errors": errors,
        "notes": notes,
    }


def load_facts_file(path: Path) -> dict[str, Any]:
    """One facts file, normalised and checked; the host defaults to the file name."""
    raw = parse_json(read_text(path, "facts file"), str(path)).data
    if not isinstance(raw, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean"}.get(type(raw), "a number")
        raise UserError(
            f"facts file {path} must hold one JSON object per host, not "
            f"{'null' if raw is None else kind}: rerun the probe or fix the file"
        )
    return normalize(raw, host=path.stem, source=str(path))
