"""The hand-written cluster spec: every bad spec is one line naming the file, the line, the
field and what to write; good specs build the same Cluster as before the typed model;
no generated mapping gets past `cluster_from_dict` as anything but a spec or a UserError."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from support.hostile import LOADER_SETTINGS, assert_one_line, document_values
from support.paths import REPO
from vfleet.cli.main import main
from vfleet.errors import UserError
from vfleet.probe.load import load_cluster
from vfleet.topology.cluster import Cluster, cluster_from_dict

BASE = "gpus_per_node: 8\ngpu: H100-SXM-80GB\nintra_node: {link: nvswitch, busbw_GBps: 450}\n"
TWO = "inter_node: {fabric: roce, busbw_GBps: 90}\n"


def _refused(tmp_path: Path, body: str) -> str:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(body)
    with pytest.raises(UserError) as caught:
        load_cluster(spec)
    message = str(caught.value)
    assert "\n" not in message, message
    assert message.startswith(str(spec)), message
    return message


# (body, what the one line must say: file line, field, problem and hint)
BAD = [
    ("nodes: 1e308\n" + BASE, "line 1: nodes: Input should be a valid integer, got '1e308'"),
    ("nodes: 1.0e308\n" + BASE, "line 1: nodes: Input should be a valid integer, got '1.0e308'"),
    ("nodes: 1.0e+308\n" + BASE, "line 1: nodes: Input should be a valid integer, got 1e+308"),
    ("nodes: 2.5\n" + BASE, "line 1: nodes: Input should be a valid integer, got 2.5"),
    ("nodes: 0\n" + BASE, "line 1: nodes: Input should be greater than or equal to 1, got 0"),
    ("nodes: 4097\n" + BASE, "nodes: Input should be less than or equal to 4096, got 4097"),
    ("nodes: '2'\n" + BASE, "nodes: Input should be a valid integer, got '2'; expected a node"),
    ("nodes: []\n" + BASE, "line 1: nodes: lists 0 nodes: list 1 to 4096"),
    ("nodes: 1\nconcurrency: 3\n" + BASE, "line 2: concurrency: unknown key: known keys: nodes"),
    (
        "nodes: 1\ngpus_per_nod: 8\n" + BASE[17:],
        "line 2: gpus_per_nod: unknown key: did you mean 'gpus_per_node'?",
    ),
    ("nodes: 1\n" + BASE.replace(": 8", ": 73"), "line 2: gpus_per_node: Input should be less"),
    ("nodes: 1\n" + BASE.replace(": 8", ": true"), "gpus_per_node: Input should be a valid int"),
    (
        "nodes: 1\n" + BASE.replace("450", ".inf"),
        "line 4: intra_node.busbw_GBps: Input should be a",
    ),
    ("nodes: 1\n" + BASE.replace("450", ".nan"), "intra_node.busbw_GBps: Input should be a finite"),
    ("nodes: 1\n" + BASE.replace("450", "0"), "intra_node.busbw_GBps: Input should be greater"),
    ("nodes: 1\n" + BASE.replace("450", "10001"), "busbw_GBps: Input should be less than or"),
    ("nodes: 1\n" + BASE.replace("450", "'450'"), "busbw_GBps: Input should be a valid number"),
    ("nodes: 1\n" + BASE.replace("nvswitch", "nvswich"), "intra_node.link: Input should be 'nvs"),
    (
        "nodes: 1\n" + BASE.replace("link: nvswitch", "lnk: nvswitch"),
        "line 4: intra_node.lnk: unknown key: did you mean 'link'?",
    ),
    ("nodes: 1\ngpus_per_node: 8\nintra_node: {link: pcie, busbw_GBps: 20}\n", "gpu: is missing"),
    ("nodes: 1\n" + BASE.replace("H100-SXM-80GB", "H1OO"), "line 3: gpu: unknown GPU 'H1OO'"),
    (
        "nodes: 1\n" + BASE.replace("intra_node", "#"),
        "line 1: intra_node: is missing; expected the link inside a node (e.g. {link: nvswitch",
    ),
    ("nodes: 2\n" + BASE, "line 1: inter_node: is missing: 2 nodes need inter_node.fabric"),
    (
        "nodes: 2\n" + BASE + "inter_node: {fabric: token-ring, busbw_GBps: 9}\n",
        "line 5: inter_node.fabric: Input should be 'infiniband', 'roce', 'ethernet' or 'nvlink'",
    ),
    (
        "nodes: 2\n" + BASE + "inter_node: {fabric: nvlink, busbw_GBps: 900}\n",
        "line 5: inter_node.nvlink_domain_gpus: fabric nvlink needs nvlink_domain_gpus",
    ),
    (
        "nodes: 2\n"
        + BASE
        + "inter_node: {fabric: nvlink, busbw_GBps: 9, nvlink_domain_gpus: 1153}",
        "nvlink_domain_gpus: Input should be less than or equal to 1152",
    ),
    (
        "nodes: 2\n" + BASE + "inter_node: {fabric: roce, busbw_GBps: 9, nvlink_domain_gpu: 72}",
        "line 5: inter_node.nvlink_domain_gpu: unknown key: did you mean 'nvlink_domain_gpus'?",
    ),
    ("nodes: 1\n" + BASE + "intra_node:\n  link: pcie\n  busbw_GBps: 1\n", "'intra_node' appears"),
    ("nodes: 1\n" + BASE + "vllm_version: 0.11\n", "line 5: vllm_version: Input should be a valid"),
    ("nodes: 1\n" + BASE + "vllm_version: 'x; rm'\n", "vllm_version: must be a vLLM release"),
    (
        "nodes:\n  - {name: a, address: 10.0.0.1}\n  - {name: b, address: 10.0.0.1}\n" + BASE + TWO,
        "line 3: nodes[1].address: address '10.0.0.1' appears twice (nodes 'a' and 'b')",
    ),
    (
        "nodes:\n  - {name: a, address: gpu.example}\n  - {name: b, address: GPU.example.}\n"
        + BASE
        + TWO,
        "nodes[1].address: address 'GPU.example.' appears twice (nodes 'a' and 'b')",
    ),
    (
        "nodes:\n  - {name: gpu-a}\n  - {name: GPU-A}\n" + BASE + TWO,
        "line 3: nodes[1].name: node name 'GPU-A' appears twice (nodes[0] and nodes[1])",
    ),
    ("nodes:\n  - {name: node1}\n  - {}\n" + BASE + TWO, "nodes[1].name: node name 'node1' appe"),
    ("nodes:\n  - {name: 'a b'}\n" + BASE, "line 2: nodes[0].name: must be an RFC 1123 label"),
    ("nodes:\n  - {name: a, address: 'x..y'}\n" + BASE, "nodes[0].address: must be an IP address"),
    ("nodes:\n  - {name: a, adress: 10.0.0.1}\n" + BASE, "nodes[0].adress: unknown key: did you"),
    ("nodes:\n  - {name: a, gpus: 0}\n" + BASE, "line 2: nodes[0].gpus: Input should be greater"),
    (
        "nodes:\n  - {name: a}\nintra_node: {link: pcie, busbw_GBps: 20}\ngpu: L4\n",
        "nodes[0].gpus: is missing: set gpus on the node or gpus_per_node",
    ),
    (
        "nodes:\n  - {name: a, gpus: 2}\nintra_node: {link: pcie, busbw_GBps: 20}\n",
        "nodes[0].gpu: is missing: set gpu on the node or once at the top",
    ),
    ("nodes:\n  - {name: a, gpu: H1OO}\n" + BASE, "line 2: nodes[0].gpu: unknown GPU 'H1OO'"),
    (
        "nodes:\n  - {name: a, gpu: H100-SXM-80GB}\n  - {name: b, gpu: L40S}\n" + BASE + TWO,
        "line 1: nodes: cluster mixes GPU types (H100-SXM-80GB, L40S): plan each type",
    ),
    (
        "nodes:\n  - {name: a, bootstrap_interface: 'eth0; rm -rf /'}\n" + BASE,
        "nodes[0].bootstrap_interface: must be a Linux interface name",
    ),
    (
        "nodes:\n  - {name: a, bootstrap_interface: averyveryverylongname}\n" + BASE,
        "nodes[0].bootstrap_interface: must be a Linux interface name of 1-15 characters",
    ),
    (
        "nodes:\n  - {name: a, ib_hcas: [mlx5_0, 'mlx5 1']}\n" + BASE,
        "line 2: nodes[0].ib_hcas[1]: must be an HCA name of 1-32 letters",
    ),
    (
        "nodes:\n  - {name: a, ib_hcas: mlx5_0}\n" + BASE,
        "nodes[0].ib_hcas: Input should be a valid",
    ),
    ("nodes:\n  - {name: a, ib_hcas: ['" + "m" * 33 + "']}\n" + BASE, "ib_hcas[0]: must be an HCA"),
    ("nodes:\n  - {name: a, roce_gid_index: 256}\n" + BASE, "roce_gid_index: Input should be less"),
    ("nodes:\n  - {name: a, roce_gid_index: -1}\n" + BASE, "roce_gid_index: Input should be great"),
    ("nodes:\n  - 8\n" + BASE, "line 2: nodes[0]: Input should be a valid dictionary"),
    ("[not, a, mapping]\n", "a cluster spec must be a YAML mapping"),
    ("", "the cluster spec is empty"),
    ("nodes: 1\nnodes: 2\n" + BASE, "'nodes' appears twice (lines 1 and 2)"),
    ("nodes: " + "9" * 5000 + "\n" + BASE, "cannot read a value"),
]


@pytest.mark.parametrize(("body", "says"), BAD)
def test_bad_spec_is_one_line_with_file_line_field_and_hint(tmp_path, body, says):
    message = _refused(tmp_path, body)
    assert says in message, message


def test_errors_name_what_to_write(tmp_path):
    """The hint after `expected` is the field's docstring, with an example."""
    message = _refused(tmp_path, "nodes: 1\n" + BASE.replace(": 8", ": 99"))
    assert message.endswith("got 99; expected GPUs on each node, 1-72 (e.g. 8)"), message


def test_bad_spec_exits_2_from_the_cli(tmp_path):
    spec = tmp_path / "cluster.yaml"
    spec.write_text("nodes: 1e308\n" + BASE)
    out = subprocess.run(
        [sys.executable, "-m", "vfleet.cli.main", "plan", "--cluster", str(spec), "--model", "x/y"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert f"vfleet: error: {spec} line 1: nodes: Input should be a valid integer" in out.stderr


def test_a_dict_without_a_file_names_the_spec():
    with pytest.raises(UserError, match=r"^cluster spec: nodes\[0\]\.gpus: Input should be gre"):
        cluster_from_dict({"nodes": [{"gpus": 0}], "gpu": "L4", "intra_node": {}})
    with pytest.raises(UserError, match="must be a YAML mapping"):
        cluster_from_dict([1, 2])


def test_a_directory_still_reads_probe_facts(tmp_path, monkeypatch):
    import vfleet.probe.load

    seen = []
    monkeypatch.setattr(
        vfleet.probe.load,
        "cluster_from_facts_dir",
        lambda p, allow_partial: seen.append(p) or "facts",
    )
    assert load_cluster(tmp_path) == "facts" and seen == [tmp_path]


def test_missing_file_says_so(tmp_path):
    with pytest.raises(UserError, match=r"no cluster spec at .*: pass a YAML file"):
        load_cluster(tmp_path / "nope.yaml")


# ---- good specs: the same Cluster as before the typed model -------------------------


def _summary(spec: Cluster) -> tuple:
    return (
        tuple((n.name, n.gpus, n.gpu.name, n.address) for n in spec.nodes),
        (spec.intra_node.link, spec.intra_node.busbw_GBps),
        (spec.inter_node.fabric, spec.inter_node.busbw_GBps, spec.inter_node.nvlink_domain_gpus),
        spec.vllm_version,
    )


def _short(nodes, per, gpu, intra, inter=("ethernet", 1.0, 0)):
    return (tuple((f"node{i}", per, gpu, None) for i in range(nodes)), intra, inter, None)


# What the hand-written checker built from each example (recorded before the change).
EXAMPLES = {
    "1x4-h100.yaml": _short(1, 4, "H100-SXM-80GB", ("nvswitch", 350.0)),
    "1x8-h100.yaml": _short(1, 8, "H100-SXM-80GB", ("nvswitch", 450.0)),
    "1x8-h200.yaml": _short(1, 8, "H200-SXM-141GB", ("nvswitch", 440.0)),
    "2x8-h100-25gbe.yaml": _short(2, 8, "H100-SXM-80GB", ("nvswitch", 450.0), ("ethernet", 2.9, 0)),
    "2x8-h200-ib.yaml": _short(
        2, 8, "H200-SXM-141GB", ("nvswitch", 440.0), ("infiniband", 350.0, 0)
    ),
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_build_the_same_cluster(name):
    spec = load_cluster(REPO / "examples" / "clusters" / name)
    assert _summary(spec) == EXAMPLES[name]
    assert all(isinstance(n.gpus, int) for n in spec.nodes)
    assert isinstance(spec.intra_node.busbw_GBps, float)


def test_render_case_specs_build_the_same_cluster():
    from support.render_cases import CASES

    two = (
        (("gpu-a", 8, "H100-SXM-80GB", "10.20.0.11"), ("gpu-b", 8, "H100-SXM-80GB", "10.20.0.12")),
        ("nvswitch", 450.0),
        ("ethernet", 2.9, 0),
        None,
    )
    by_name = {c.name: _summary(cluster_from_dict(yaml.safe_load(c.cluster))) for c in CASES}
    assert by_name["mp-tp8-pp2"] == two
    assert by_name["single-replicas"] == (
        (("gpu-a", 4, "H100-SXM-80GB", "10.20.0.11"),),
        ("nvswitch", 350.0),
        ("ethernet", 1.0, 0),
        None,
    )


def test_per_node_fields_reach_the_nodes(tmp_path):
    spec = tmp_path / "c.yaml"
    spec.write_text(
        "nodes:\n"
        "  - {name: gpu-a, address: 10.0.0.11, gpus: 4, bootstrap_interface: ens5f0,\n"
        "     ib_hcas: [mlx5_0, mlx5_1], roce_gid_index: 3}\n"
        "  - {address: 10.0.0.12}\n"
        "gpus_per_node: 8\ngpu: NVIDIA H100 80GB HBM3\n"
        "intra_node: {link: nvswitch, busbw_GBps: 450}\n"
        "inter_node: {fabric: nvlink, busbw_GBps: 800, nvlink_domain_gpus: 72}\n"
        "vllm_version: '0.11.0'\n"
    )
    cluster = load_cluster(spec)
    a, b = cluster.nodes
    assert (a.name, a.gpus, a.bootstrap_interface, a.ib_hcas, a.roce_gid_index) == (
        "gpu-a",
        4,
        "ens5f0",
        ("mlx5_0", "mlx5_1"),
        3,
    )
    assert (b.name, b.gpus, b.address, b.bootstrap_interface, b.ib_hcas) == (
        "node1",
        8,
        "10.0.0.12",
        None,
        (),
    )
    assert a.gpu.name == b.gpu.name == "H100-SXM-80GB"
    assert cluster.inter_node.nvlink_domain_gpus == 72 and cluster.vllm_version == "0.11.0"


def test_limits_are_inclusive():
    spec = cluster_from_dict(
        {
            "nodes": 4096,
            "gpus_per_node": 72,
            "gpu": "GB200",
            "intra_node": {"link": "nvswitch", "busbw_GBps": 10_000},
            "inter_node": {"fabric": "nvlink", "busbw_GBps": 0.001, "nvlink_domain_gpus": 1152},
        }
    )
    assert spec.total_gpus == 4096 * 72


# ---- generated input: a spec or one UserError line, never anything else -----------------

TOP_KEYS = ["nodes", "gpus_per_node", "gpu", "intra_node", "inter_node", "vllm_version"]
NODE_KEYS = ["name", "address", "gpus", "gpu", "bootstrap_interface", "ib_hcas", "roce_gid_index"]
SECTION_KEYS = ["link", "fabric", "busbw_GBps", "nvlink_domain_gpus"]
ODD = ["1e308", "1.0e308", "nan", ".inf", "-1", "H100-SXM-80GB", "L40S", "nvswitch", "nvlink"]
ODD += ["10.0.0.1", "mlx5_0", "eth0\n", "a\x00b", "\u202e", "x" * 200, "node0", "NODE0"]

CLUSTER_ODD = [*ODD, 72, 73, 4096, 4097]
keys, values = document_values(TOP_KEYS + NODE_KEYS + SECTION_KEYS, CLUSTER_ODD)
GOOD_NODE = {"name": "gpu-a", "address": "10.0.0.1", "gpus": 8}
GOOD = {
    "nodes": [GOOD_NODE],
    "gpu": "H100-SXM-80GB",
    "intra_node": {"link": "nvswitch", "busbw_GBps": 450},
}


@st.composite
def cluster_mappings(draw):
    """A good spec with random keys replaced, added or nested, so deep fields get hit too."""
    spec = dict(GOOD)
    spec.update(draw(st.dictionaries(keys, values, max_size=3)))
    if draw(st.booleans()):
        nodes = [
            {**GOOD_NODE, "name": f"n{i}", "address": f"10.0.0.{i}", **extra}
            for i, extra in enumerate(draw(st.lists(st.dictionaries(keys, values), max_size=4)))
        ]
        spec["nodes"] = nodes or draw(values)
    if draw(st.booleans()):
        spec["inter_node"] = {
            "fabric": "roce",
            "busbw_GBps": 90,
            **draw(st.dictionaries(keys, values)),
        }
    if draw(st.booleans()):
        spec["intra_node"] = {**GOOD["intra_node"], **draw(st.dictionaries(keys, values))}
    return spec


@LOADER_SETTINGS
@given(st.one_of(cluster_mappings(), values))
def test_generated_mappings_give_a_spec_or_one_user_error_line(raw):
    try:
        spec = cluster_from_dict(raw)
    except UserError as exc:
        assert_one_line(str(exc))
        return
    assert isinstance(spec, Cluster)
    assert 1 <= len(spec.nodes) <= 4096 and all(1 <= n.gpus <= 72 for n in spec.nodes)
    assert 0 < spec.intra_node.busbw_GBps <= 10_000


def test_a_hand_given_interface_reaches_nccl_and_gloo(tmp_path):
    """The interface written in a hand-made spec is set for NCCL and Gloo as a probed one is."""
    spec = tmp_path / "c.yaml"
    spec.write_text(
        "nodes:\n"
        "  - {name: gpu-a, address: 10.0.0.11, bootstrap_interface: ens5f0, ib_hcas: [mlx5_0]}\n"
        "  - {name: gpu-b, address: 10.0.0.12, bootstrap_interface: ens5f1, ib_hcas: [mlx5_0]}\n"
        "gpus_per_node: 8\ngpu: H100-SXM-80GB\n"
        "intra_node: {link: nvswitch, busbw_GBps: 450}\n"
        "inter_node: {fabric: infiniband, busbw_GBps: 45}\n"
    )
    plan, out = tmp_path / "plan.json", tmp_path / "launch"
    model, layout = "meta-llama/Llama-3.1-405B-Instruct", "TP8 PP2"  # one engine on both
    argv = ["plan", "--cluster", str(spec), "--model", model, "--layout", layout]
    assert main([*argv, "--out", str(plan)]) == 0
    assert main(["render", "--plan", str(plan), "--cluster", str(spec), "--out", str(out)]) == 0
    for host, nic in (("gpu-a", "ens5f0"), ("gpu-b", "ens5f1")):
        env = (out / host / "engine-0" / "vllm.env").read_text().splitlines()
        assert f"NCCL_SOCKET_IFNAME={nic}" in env and f"GLOO_SOCKET_IFNAME={nic}" in env, env
        assert "NCCL_IB_HCA=mlx5_0" in env
