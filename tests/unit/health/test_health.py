"""The pre-flight health gate (vfleet.health) on real captures and on the same captures
with one field made sick: each check's verdict and evidence, the gate's host verdict, and
the plan leaving a failed host out (the report says why) unless --allow-degraded."""

from __future__ import annotations

import copy
import json
import re
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from support.bundles import deploy_context
from support.cli_run import vfleet
from support.facts import (
    H100,
    H200,
    HOSTS,
    ok_output,
    raw_probe,
    second_host,
    with_bandwidth,
    write_dir,
)
from support.paths import DATA
from vfleet.deploy import flow
from vfleet.health import gate, preflight, ssh_sweep
from vfleet.health import probed as health_probed
from vfleet.health.links import iperf3_checks
from vfleet.probe.kernel_log import parse_xids, xid_events
from vfleet.probe.normalize import normalize
from vfleet.probe.to_cluster import iperf3_among

XID_LOG = DATA / "health" / "kernel-xid.log"
H200_XML = (HOSTS / H200 / "nvidia-smi-q.xml").read_text()


def _facts(raw: dict[str, Any]) -> dict[str, Any]:
    return normalize(copy.deepcopy(raw), host=raw.get("host") or "h", source="test")


def _with_xml(**swaps: tuple[str, str]) -> dict[str, Any]:
    """The real H200 capture with element texts replaced: name=(old element, new element)."""
    xml = H200_XML
    for old, new in swaps.values():
        assert old in xml, old
        xml = xml.replace(old, new, 1)
    raw = raw_probe(H200)
    raw["commands"]["nvidia_smi_query"] = ok_output(xml)
    return raw


def _swap(tag: str, old: str, new: str) -> tuple[str, str]:
    return f"<{tag}>{old}</{tag}>", f"<{tag}>{new}</{tag}>"


def _checks(facts: dict[str, Any]) -> dict[str, gate.Check]:
    (verdict,) = gate.assess([facts])
    return {c.name: c for c in verdict.checks}


def test_the_real_h200_capture_passes_what_it_has_data_for():
    checks = _checks(_facts(raw_probe(H200)))
    for name in ("gpu_count", "ecc", "retired_pages", "remapped_rows", "pcie", "clocks"):
        assert checks[name].verdict == "pass", checks[name]
    assert checks["persistence"].verdict == "pass"  # Enabled in the capture
    # What the capture has no data for says so instead of passing.
    assert checks["xid"].verdict == "skip" and "no kernel log" in checks["xid"].evidence
    assert checks["nvlink"].verdict == "skip"  # one GPU: no peer on the host
    assert checks["fabric_manager"].verdict == checks["infiniband"].verdict == "skip"


@pytest.mark.parametrize(
    "swap, check, verdict, evidence",
    [
        (
            _swap("dram_uncorrectable", "0", "2"),
            "ecc",
            "fail",
            "GPU0: 2 uncorrectable ECC error(s) since the driver loaded",
        ),
        (
            _swap("remapped_row_pending", "No", "Yes"),
            "remapped_rows",
            "fail",
            "a row remap is pending: reset the GPU",
        ),
        (
            _swap("remapped_row_failure", "No", "Yes"),
            "remapped_rows",
            "fail",
            "no spare rows left",
        ),
        (
            _swap("current_link_width", "16x", "8x"),
            "pcie",
            "fail",
            "PCIe x8 on an x16 device",
        ),
        (
            _swap("current_link_gen", "5", "3"),
            "pcie",
            "warn",
            "PCIe Gen3 of Gen5",
        ),
        (
            _swap("clocks_event_reason_hw_thermal_slowdown", "Not Active", "Active"),
            "clocks",
            "fail",
            "clocks held down by hw_thermal_slowdown",
        ),
        (
            _swap("persistence_mode", "Enabled", "Disabled"),
            "persistence",
            "warn",
            "persistence mode off",
        ),
    ],
    ids=["ecc-dbe", "remap-pending", "remap-failure", "pcie-x8", "pcie-gen3", "thermal", "persist"],
)
def test_a_sick_field_fails_or_warns_with_its_evidence(swap, check, verdict, evidence):
    got = _checks(_facts(_with_xml(one=swap)))[check]
    assert got.verdict == verdict and evidence in got.evidence, got


def test_retired_pages_in_the_older_drivers_format():
    """Pre-Ampere boards retire pages; near the 64 the framebuffer holds, the GPU goes."""
    old = "<double_bit_retirement>\n\t\t\t\t<retired_count>N/A</retired_count>"
    raw = _with_xml(dbe=(old, old.replace("N/A", "61")))
    got = _checks(_facts(raw))["retired_pages"]
    assert got.verdict == "fail" and "61 retired pages" in got.evidence
    pending = "<pending_retirement>N/A</pending_retirement>"
    raw = _with_xml(pending=(pending, "<pending_retirement>Yes</pending_retirement>"))
    assert _checks(_facts(raw))["retired_pages"].verdict == "fail"


def test_xids_from_the_kernel_log():
    events = parse_xids(XID_LOG.read_text())
    assert [(e["device"], e["code"]) for e in events] == [
        ("PCI:0000:18:00", 48),
        ("PCI:0000:18:00", 63),
        ("PCI:0000:9a:00", 79),
    ]
    raw = raw_probe(H200)
    raw["commands"]["kernel_xid"] = ok_output(XID_LOG.read_text())
    got = _checks(_facts(raw))["xid"]
    assert got.verdict == "fail"
    assert "Xid 48 on PCI:0000:18:00 (double-bit ECC error)" in got.evidence
    assert "Xid 79 on PCI:0000:9a:00 (GPU has fallen off the bus)" in got.evidence
    # journalctl --grep exits 1 with nothing printed: no Xid since boot, a pass.
    assert xid_events({"rc": 1, "stdout": "", "stderr": ""}) == []
    assert xid_events({"rc": 1, "stdout": "", "stderr": "Failed to open journal"}) is None
    quiet = raw_probe(H200)
    quiet["commands"]["kernel_xid"] = {"argv": [], "rc": 1, "stdout": "", "stderr": ""}
    assert _checks(_facts(quiet))["xid"].verdict == "pass"


def _nvlink_without(gpu: int, links: int) -> str:
    """The real H100 `nvlink -s` with `links` of GPU `gpu`'s links gone (inactive)."""
    out, current, dropped = [], -1, 0
    for line in (HOSTS / H100 / "nvlink-s.txt").read_text().splitlines():
        if line.startswith("GPU "):
            current += 1
        elif current == gpu and "GB/s" in line and dropped < links:
            dropped += 1
            line = line.split(":")[0] + ": <inactive>"
        out.append(line)
    return "\n".join(out) + "\n"


def test_an_nvlink_down_on_one_gpu_fails_the_host():
    raw = raw_probe(H100)
    raw["commands"]["nvidia_smi_nvlink"] = ok_output(_nvlink_without(3, 1))
    got = _checks(_facts(raw))["nvlink"]
    assert got.verdict == "fail" and got.evidence == "a GPU has 17 of 18 NVLinks active"
    assert _checks(_facts(raw_probe(H100)))["nvlink"].verdict == "pass"


def test_allreduce_against_what_the_topology_allows():
    """18 links x 26.562 GB/s: 478 GB/s a direction, NCCL reaching 80% of it."""
    for busbw, verdict in ((455.2, "pass"), (250.0, "warn"), (150.0, "fail")):
        got = _checks(_facts(with_bandwidth(raw_probe(H100), intra=busbw)))["allreduce"]
        assert got.verdict == verdict, (busbw, got)
        assert (
            f"{busbw:g} GB/s" in got.evidence and "382.5 GB/s the topology allows" in got.evidence
        )


def _ib_rates(raw: dict[str, Any], rates: dict[str, str]) -> dict[str, Any]:
    """The built H100 host (eight ConnectX-7, MT4129, at NDR 400) with some ports' rates
    replaced, as the kernel writes them: device name -> rate."""
    raw = copy.deepcopy(raw)
    for hca in raw["sysfs"]["infiniband"]:
        if hca["name"] in rates:
            hca["ports"][0]["rate"] = rates[hca["name"]]
    return raw


HDR = "200 Gb/sec (4X HDR)"


def test_infiniband_ports_at_their_hcas_rate_pass_and_say_which_rate_that_is():
    got = _checks(_facts(raw_probe(H100)))["infiniband"]
    assert got.verdict == "pass"
    assert got.evidence == "8 port(s) ACTIVE at 400 Gb/s, as its ConnectX-7's 400 Gb/s"


def test_hcas_below_their_rate_warn_when_another_host_shows_the_fabric_runs_faster():
    """A host whose eight NDR HCAs all trained at HDR: its own ports agree with each other,
    so the old rule (the host's fastest port) passed it. The other host's ConnectX-7s at 400
    show the fabric runs NDR. Alone, the host cannot be told from an HDR fabric (next test)."""
    slow = _ib_rates(raw_probe(H100), {f"mlx5_{i}": HDR for i in range(8)})
    alone = _checks(_facts(slow))["infiniband"]
    assert alone.verdict == "pass" and "the fabric's 200 Gb/s (ConnectX-7)" in alone.evidence
    peer = second_host(raw_probe(H100), "h2", "10.20.0.12")
    verdicts = {v.host: v for v in gate.assess([_facts(slow), _facts(peer)])}
    ib = {c.name: c for c in verdicts[slow["host"]].checks}["infiniband"]
    assert ib.verdict == "warn" and ib.evidence.count("below its ConnectX-7's 400 Gb/s") == 8
    assert {c.name: c for c in verdicts["h2"].checks}["infiniband"].verdict == "pass"


def test_a_fabric_that_runs_every_hca_below_its_rate_is_the_bar_not_a_fault():
    """ConnectX-7s on an HDR fabric: every port of every host at 200. Warning each host would
    mark every link degraded; the bar is the fabric's rate, and a port below it still warns."""
    hdr = {f"mlx5_{i}": HDR for i in range(8)}
    a = _ib_rates(raw_probe(H100), hdr)
    b = _ib_rates(second_host(raw_probe(H100), "h2", "10.20.0.12"), hdr)
    verdicts = {v.host: v for v in gate.assess([_facts(a), _facts(b)])}
    for v in verdicts.values():
        ib = {c.name: c for c in v.checks}["infiniband"]
        assert ib.verdict == "pass", ib
        assert ib.evidence.endswith("as the fabric's 200 Gb/s (ConnectX-7)")
    c = _ib_rates(b, {"mlx5_3": "100 Gb/sec (4X EDR)"})
    verdicts = {v.host: v for v in gate.assess([_facts(a), _facts(c)])}
    ib = {ch.name: ch for ch in verdicts["h2"].checks}["infiniband"]
    assert ib.verdict == "warn"
    assert ib.evidence == "mlx5_3 100 Gb/s, below the fabric's 200 Gb/s (ConnectX-7)"


def test_an_hca_type_not_in_the_table_is_judged_against_the_hosts_fastest_port():
    raw = _ib_rates(raw_probe(H100), {"mlx5_2": HDR})
    for hca in raw["sysfs"]["infiniband"]:
        hca["hca_type"] = "MT9999"
    got = _checks(_facts(raw))["infiniband"]
    assert got.verdict == "warn"
    assert got.evidence == "mlx5_2 200 Gb/s, below the host's 400 Gb/s"


def test_a_host_with_fewer_gpus_than_its_peers_fails():
    whole = _facts(raw_probe(H100))
    short = copy.deepcopy(whole)
    short["host"], short["gpu_count"], short["gpus"] = "h2", 7, short["gpus"][:7]
    verdicts = {v.host: v for v in gate.assess([whole, short])}
    assert (
        verdicts["h2"].verdict == "fail" and "7 GPUs, the other hosts 8" in verdicts["h2"].reason()
    )
    assert not verdicts[whole["host"]].failed


def _sick_second_host(tmp_path: Path) -> Any:
    """A prod bundle of two real H200 hosts, the second with a GPU whose row remap failed."""
    ctx = deploy_context(tmp_path, {})
    shutil.rmtree(ctx.artifacts / "facts")
    good = with_bandwidth(raw_probe(H200), inter=5.0)
    sick = second_host(good, "gpu-b", "10.0.0.12")
    xml = H200_XML.replace("<remapped_row_failure>No<", "<remapped_row_failure>Yes<")
    sick["commands"]["nvidia_smi_query"] = ok_output(xml)
    write_dir(ctx.artifacts / "facts", good, sick)
    return ctx


def test_the_plan_leaves_a_failed_host_out_and_the_report_says_why(tmp_path, capsys):
    ctx = _sick_second_host(tmp_path)
    probed = health_probed.probed_cluster(ctx, "deploy", allow_partial=False)
    out = capsys.readouterr().out
    assert "==> health gate" in out and "gpu-b" in out and "remapped_rows" in out
    assert [n.name for n in probed.cluster.nodes] == ["vm"] and probed.left_out == ["gpu-b"]
    health = json.loads((ctx.artifacts / "health.json").read_text())
    assert health["left_out"] == {"gpu-b": probed.why["gpu-b"]}
    assert {h["host"]: h["verdict"] for h in health["hosts"]} == {"vm": "pass", "gpu-b": "fail"}
    result = flow.plan(ctx, probed.cluster)
    assert result.plan.replicas == 1  # one host's GPU, not two
    rendered = flow.render(ctx, result.plan, probed.cluster)
    flow.write_report(ctx, result, rendered.endpoints, probed.cluster, probed)
    report = (ctx.artifacts / "report" / "report.md").read_text()
    section = report.split("## Health gate")[1].split("## ")[0]
    assert "| gpu-b | remapped_rows | fail |" in section
    assert "gpu-b left out of the plan: failed the health gate" in section


def test_allow_degraded_plans_on_the_sick_host_loudly(tmp_path, capsys):
    ctx = _sick_second_host(tmp_path)
    probed = health_probed.probed_cluster(ctx, "deploy", allow_partial=False, allow_degraded=True)
    assert len(probed.cluster.nodes) == 2 and not probed.left_out
    assert "WARNING: planning on 1 host(s) that failed a check (--allow-degraded): gpu-b" in (
        capsys.readouterr().out
    )


def test_preflight_sweeps_then_checks_the_facts_and_exits_1(tmp_path, monkeypatch):
    """Without hosts to reach (the prod inventory's addresses are not up here) every host
    fails the sweep in about the timeout; the facts checks still run and name gpu-b."""
    ctx = _sick_second_host(tmp_path)
    # Terraform's inventory of the two hosts, at TEST-NET addresses nothing answers on.
    (ctx.artifacts / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_hosts:\n      hosts:\n"
        "        vm: {ansible_host: 192.0.2.10}\n        gpu-b: {ansible_host: 192.0.2.11}\n"
    )
    monkeypatch.setattr(preflight, "load_context", lambda env, root=None: ctx)
    got = vfleet("preflight", "--env", "prod", "--root", str(ctx.root), "--timeout", "1")
    assert got.returncode == 1, got.stderr
    assert "==> SSH sweep" in got.stdout and "gpu-b: fail" in got.stdout
    listed = vfleet(
        "preflight", "--env", "prod", "--root", str(ctx.root), "--timeout", "1", "--json"
    )
    doc = json.loads(listed.stdout.split("\n", 1)[1])  # after the sweep's progress line
    assert {r["verdict"] for r in doc["sweep"]} == {"fail"}
    assert all(not r["reachable"] and r["error"] for r in doc["sweep"])
    hosts = {h["host"]: h for h in doc["checks"]}
    assert hosts["gpu-b"]["verdict"] == "fail" and hosts["vm"]["verdict"] == "pass"


def test_a_host_is_reached_as_its_ssh_config_says(tmp_path):
    """The Terraform envs hand Ansible `-F ssh_config`; the sweep reads the same file."""
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host h1\n    HostName 10.213.0.11\nHost *\n    User root\n"
        f"    IdentityFile {tmp_path}/key\n    StrictHostKeyChecking no\n"
        "    ProxyCommand /opt/proxy %h %p\n"
    )
    hostvars = {"ansible_ssh_common_args": f"-F {config}", "ansible_user": "ubuntu"}
    got = ssh_sweep.target_for("h1", "h1", 22, hostvars, tmp_path / "known_hosts")
    assert (got.address, got.user, got.proxy_command) == (
        "10.213.0.11",
        "root",
        "/opt/proxy 10.213.0.11 22",
    )
    assert got.key_files == (f"{tmp_path}/key",)
    assert got.known_hosts is None  # the config turns checking off: reported as not checked
    plain = ssh_sweep.target_for("h2", "10.0.0.2", 2222, {}, tmp_path / "known_hosts")
    assert (plain.port, plain.known_hosts) == (2222, tmp_path / "known_hosts")


def test_a_closed_port_is_unreachable_at_once():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        row = ssh_sweep.reach(ssh_sweep.Target("h", "127.0.0.1", port), 5.0, "/srv")
    assert not row.reachable and row.verdict == "fail" and row.seconds < 5
    assert "refused" in row.error.lower() or "unable to connect" in row.error.lower()


# ---- iperf3: which end of a slow run is the sick host ---------------------------------------


def _ring(rates: list[float], line_mbps: int | None = None) -> list[dict[str, Any]]:
    """Normalised facts of len(rates) hosts in an iperf3 ring: host i sent to host i+1 at
    rates[i] Gb/s. With line_mbps each bootstrap NIC is a physical one at that speed."""
    n = len(rates)
    out = []
    for i, gbps in enumerate(rates):
        peer = f"10.0.0.{11 + (i + 1) % n}"
        nic = {"name": "eth0", "virtual": line_mbps is None, "speed_mbps": line_mbps or 10000}
        out.append(
            {
                "host": f"h{i + 1}",
                "address": f"10.0.0.{11 + i}",
                "bootstrap_interface": "eth0",
                "nics": [nic],
                "bandwidth": {"iperf3_Gbps": {peer: gbps}},
            }
        )
    return out


def _iperf3(facts: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    return {h: (c.verdict, c.evidence) for h, c in iperf3_checks(facts).items()}


def test_the_host_both_slow_runs_share_fails_and_its_peers_pass():
    """h3's link at a tenth: the runs into and out of it are slow, h1->h2 is not."""
    got = _iperf3(_ring([2.4, 0.24, 0.25]))
    assert got["h3"][0] == "fail", got
    assert "slow both ways: this host's link" in got["h3"][1]
    assert "h2->h3 0.24 Gb/s (10% of 2.4)" in got["h3"][1]
    assert "the ring's fastest run" in got["h3"][1]
    assert got["h1"] == ("pass", got["h1"][1]) and "the slow end is h3" in got["h1"][1]
    assert got["h2"][0] == "pass" and "the slow end is h3" in got["h2"][1]


def test_one_slow_run_warns_both_its_ends():
    got = _iperf3(_ring([2.4, 0.3, 2.3, 2.35]))
    assert got["h2"][0] == got["h3"][0] == "warn"
    assert "slow one way only" in got["h2"][1]
    assert got["h1"][0] == got["h4"][0] == "pass"


def test_against_the_line_rate_when_the_nics_report_one():
    """Four hosts on 100 GbE: the bar is 90 Gb/s; h2 at 40 both ways is below half of it."""
    got = _iperf3(_ring([40.0, 41.0, 93.0, 92.0], line_mbps=100_000))
    assert got["h2"][0] == "fail" and "90% of 100 Gb/s" in got["h2"][1]
    assert got["h4"][0] == "pass"
    # Two hosts: both share both runs, so the slow end cannot be told; never a fail.
    two = _iperf3(_ring([30.0, 31.0], line_mbps=100_000))
    assert {v for v, _ in two.values()} == {"warn"}
    assert all("the slow end cannot be told" in e for _, e in two.values())


def test_two_virtual_nics_have_no_bar_and_say_so():
    got = _iperf3(_ring([2.4, 0.2]))
    assert {v for v, _ in got.values()} == {"skip"}
    assert "two hosts cannot be compared" in got["h1"][1]


def test_the_plan_costs_only_the_runs_between_the_hosts_it_keeps():
    """h3 left out: h2's run to it is not a link the plan uses."""
    kept = [f for f in _ring([2.4, 0.24, 0.25]) if f["host"] != "h3"]
    assert iperf3_among(kept) == [2.4]
    # With no run left between kept hosts, every run stands in as a lower bound.
    alone = [f for f in _ring([2.4, 0.24, 0.25]) if f["host"] == "h2"]
    assert iperf3_among(alone) == [0.24]


def test_free_disk_is_judged_with_the_copy_already_there():
    """need_kb: the checkpoint and 10% (at least 1 GiB); a copy on disk counts as free."""
    assert ssh_sweep.need_kb(100 * 2**30) == 110 * 2**20
    assert ssh_sweep.need_kb(2**20) == 2**10 + 2**20
    row = ssh_sweep.Reach("h", True, "recorded", 0.1, facts={"sudo": "yes", "disk_kb": "100"})
    assert row.verdict == "pass"  # nothing known about the model: shown, not judged
    row.need_kb = 150
    assert row.disk_short and row.verdict == "fail"
    row.facts["model_kb"] = "60"
    assert not row.disk_short and row.verdict == "pass"
    assert "need GiB" in ssh_sweep.table([row])


def test_the_checkpoint_size_follows_the_models_own_format():
    from vfleet.budget.params import checkpoint_bytes
    from vfleet.catalog.models import load_model

    dense, moe = "meta-llama/Llama-3.1-70B-Instruct", "deepseek-ai/DeepSeek-V3"
    gib = {m: checkpoint_bytes(load_model(m)) / 2**30 for m in (dense, moe)}
    assert 125 < gib[dense] < 135  # 70.6 B parameters in bf16: 141 GB on the hub
    assert 600 < gib[moe] < 660  # 671 B, fp8 weights, bf16 embeddings: 688 GB on the hub


# ---- the PCIe links of the HCAs and NICs ----------------------------------------------------

HEALTH = DATA / "health"
H100_NVSWITCH = "h100-sxm-8gpu-nvswitch"


def _lnk(lspci: str, field: str) -> tuple[str, str]:
    """(speed GT/s, lanes) of lspci -vv's LnkCap or LnkSta line."""
    match = re.search(rf"{field}:.*Speed ([\d.]+)GT/s, Width x(\d+)", lspci)
    assert match, field
    return match.group(1), match.group(2)


def test_the_probes_sysfs_figures_are_lspcis_lnkcap_and_lnksta():
    lspci = (HEALTH / "lspci-vv-hca-x8.txt").read_text()
    record = json.loads((HEALTH / "sysfs-hca-x8.json").read_text())
    speed = record["max_link_speed"].split()[0].removesuffix(".0")
    assert _lnk(lspci, "LnkCap") == (speed, record["max_link_width"])
    speed = record["current_link_speed"].split()[0].removesuffix(".0")
    assert _lnk(lspci, "LnkSta") == (speed, record["current_link_width"])
    assert lspci.startswith(record["address"].removeprefix("0000:"))


def _h100_with_nic(record: dict[str, Any] | None) -> dict[str, Any]:
    """The built 8 x H100 host with one HCA's PCI record replaced (None: all of them gone)."""
    raw = raw_probe(H100_NVSWITCH)
    nics = raw["sysfs"]["pci_nics"]
    if record is None:
        raw["sysfs"]["pci_nics"] = []
    else:
        raw["sysfs"]["pci_nics"] = [
            record if r["address"] == record.get("address") else r for r in nics
        ]
    return _facts(raw)


def test_an_hca_trained_at_x8_on_x16_fails_the_host_and_names_it():
    assert _checks(_h100_with_nic(None))["nic_pcie"].verdict == "skip"
    healthy = _checks(_h100_with_nic({}))["nic_pcie"]
    assert healthy.verdict == "pass" and "8 controller(s)" in healthy.evidence, healthy
    x8 = json.loads((HEALTH / "sysfs-hca-x8.json").read_text())
    got = _checks(_h100_with_nic(x8))["nic_pcie"]
    assert got.verdict == "fail" and got.evidence.endswith("ibp94s0/mlx5_3 x8 of x16"), got
    gen4 = {**x8, "current_link_width": "16", "current_link_speed": "16.0 GT/s PCIe"}
    got = _checks(_h100_with_nic(gen4))["nic_pcie"]
    assert got.verdict == "warn" and "mlx5_3 Gen4 of Gen5" in got.evidence, got
    # The kernel writes 255 lanes where it could not read the register: not judged.
    unread = {**x8, "current_link_width": "255"}
    assert _checks(_h100_with_nic(unread))["nic_pcie"].verdict == "pass"


def test_a_slow_hca_marks_the_link_degraded_not_the_gpus():
    gen4 = {
        **json.loads((HEALTH / "sysfs-hca-x8.json").read_text()),
        "current_link_width": "16",
        "current_link_speed": "16.0 GT/s PCIe",
    }
    (verdict,) = gate.assess([_h100_with_nic(gen4)])
    assert verdict.verdict == "warn"
    assert "nic_pcie: a lower generation" in gate.degraded_links([verdict])[verdict.host]


def test_the_collector_reads_the_physical_network_functions_links(tmp_path):
    """A tree laid out as /sys/bus/pci/devices: an HCA, one of its virtual functions, a
    virtio NIC without PCIe link files, and a GPU (not a network controller)."""
    import importlib.util

    from support.facts import COLLECTOR

    sysfs_reader = COLLECTOR.with_name("vfleet_probe_sysfs.py")
    spec = importlib.util.spec_from_file_location("vfleet_probe_sysfs", sysfs_reader)
    assert spec and spec.loader
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)

    def device(address: str, cls: str, vendor: str, **files: str) -> Path:
        d = tmp_path / address
        d.mkdir()
        for name, text in {"class": cls, "vendor": vendor, "device": "0x1021", **files}.items():
            (d / name).write_text(text + "\n")
        return d

    x8 = json.loads((HEALTH / "sysfs-hca-x8.json").read_text())
    hca = device(
        "0000:5e:00.0",
        "0x020700",
        "0x15b3",
        **{k: x8[k] for k in x8 if k.endswith(("_width", "_speed"))},
    )
    (hca / "net" / "ibp94s0").mkdir(parents=True)
    (hca / "infiniband" / "mlx5_3").mkdir(parents=True)
    vf = device("0000:5e:00.1", "0x020700", "0x15b3", current_link_width="16")
    (vf / "physfn").symlink_to(hca)
    device("0000:00:03.0", "0x020000", "0x1af4")
    device("0000:18:00.0", "0x030200", "0x10de", current_link_width="16")

    got = probe.sysfs_pci_nics(str(tmp_path))
    assert [r["address"] for r in got] == ["0000:00:03.0", "0000:5e:00.0"]
    virtio, hca_record = got
    assert virtio["current_link_width"] is None and virtio["netdevs"] == []
    assert hca_record == {k: x8[k] for k in hca_record}


def test_a_controller_off_the_data_path_is_not_judged():
    """A management NIC at x1 of x4: neither a rail nor the bootstrap NIC."""
    raw = raw_probe(H100_NVSWITCH)
    raw["sysfs"]["pci_nics"] = [
        {"address": "0000:02:00.0", "netdevs": ["eno8"], "rdma": [], "current_link_width": "1",
         "max_link_width": "4"},
    ]  # fmt: skip
    assert _checks(_facts(raw))["nic_pcie"].verdict == "skip"
