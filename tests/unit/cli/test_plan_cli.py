"""`vfleet plan` as users run it: JSON keys, the ranked table, bad input."""

import json

import pytest

from support.cli_run import Result, vfleet
from support.paths import REPO

CLUSTERS = REPO / "examples" / "clusters"
KEYS = {
    "replicas",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "enable_expert_parallel",
    "decode_context_parallel_size",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "kv_cache_dtype",
    "predicted",
    "alternatives",
    "hosts",
}
PREDICTED = {"tokens_per_s", "tokens_per_s_per_gpu", "tpot_ms", "ttft_ms", "max_concurrency"}


def run(*args: str) -> Result:
    return vfleet("plan", *args)


def test_json_plan_has_every_documented_key():
    out = run(
        "--cluster",
        str(CLUSTERS / "2x8-h100-25gbe.yaml"),
        "--model",
        "deepseek-ai/DeepSeek-V3",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc.keys() >= KEYS
    assert doc["predicted"].keys() >= PREDICTED
    assert doc["alternatives"] and all("why_not" in a for a in doc["alternatives"])
    assert all(a["predicted"].keys() >= PREDICTED for a in doc["alternatives"])
    ranks = [r for h in doc["hosts"] for e in h["engines"].values() for r in e]
    assert len(ranks) == 16 and {h["host"] for h in doc["hosts"]} == {"node0", "node1"}


def test_table_shows_communication_costs_and_the_reason(tmp_path):
    out = run(
        "--cluster",
        str(CLUSTERS / "2x8-h100-25gbe.yaml"),
        "--model",
        "deepseek-ai/DeepSeek-V3",
        "--out",
        str(tmp_path / "plan.json"),
    )
    assert out.returncode == 0, out.stderr
    assert "TP ms" in out.stdout and "MoE ms" in out.stdout and "PP ms" in out.stdout
    assert "Chosen:" in out.stdout and "never crosses slow links" in out.stdout
    assert json.loads((tmp_path / "plan.json").read_text())["tensor_parallel_size"] == 8


def test_minimal_hand_written_spec_is_accepted(tmp_path):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(
        "nodes: 2\ngpus_per_node: 8\ngpu: NVIDIA H100 80GB HBM3\n"
        "intra_node: {link: nvswitch, busbw_GBps: 450}\n"
        "inter_node: {fabric: ethernet, busbw_GBps: 2.9}\n"
    )
    out = run("--cluster", str(spec), "--model", "meta-llama/Llama-3.1-8B-Instruct", "--json")
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (
            "nodes: 0\ngpus_per_node: 8\ngpu: H100-SXM-80GB\nintra_node: {link: nvswitch, "
            "busbw_GBps: 450}\n",
            "line 1: nodes: Input should be greater than or equal to 1, got 0",
        ),
        (
            "nodes: 1\ngpus_per_node: 8\ngpu: H1OO\nintra_node: {link: nvswitch, "
            "busbw_GBps: 450}\n",
            "unknown GPU",
        ),
        (
            "nodes: 2\ngpus_per_node: 8\ngpu: H100-SXM-80GB\nintra_node: {link: nvswitch, "
            "busbw_GBps: 450}\n",
            "inter_node.fabric",
        ),
        (
            "nodes: 1\ngpus_per_node: 8\ngpu: H100-SXM-80GB\nintra_node: {link: token-ring, "
            "busbw_GBps: 450}\n",
            "intra_node.link",
        ),
        (
            "nodes: [{name: a, gpus: 8, gpu: H100-SXM-80GB}, {name: a, gpus: 8, "
            "gpu: H100-SXM-80GB}]\nintra_node: {link: nvswitch, busbw_GBps: 450}\n"
            "inter_node: {fabric: infiniband, busbw_GBps: 300}\n",
            "appears twice",
        ),
        (
            "nodes: [{name: a, gpus: 8, gpu: H100-SXM-80GB}, {name: b, gpus: 8, "
            "gpu: L40S}]\nintra_node: {link: nvswitch, busbw_GBps: 450}\n"
            "inter_node: {fabric: infiniband, busbw_GBps: 300}\n",
            "mixes GPU types",
        ),
        ("[not, a, mapping]\n", "YAML mapping"),
        (
            "nodes: 1\ngpus_per_node: 2\ngpu: L4\nintra_node: {link: pcie, busbw_GBps: 20}\n",
            "smallest cluster that fits",
        ),
    ],
)
def test_bad_cluster_specs_exit_2_with_one_line(tmp_path, body, needle):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(body)
    out = run("--cluster", str(spec), "--model", "deepseek-ai/DeepSeek-V3")
    assert out.returncode == 2, out.stdout
    assert needle in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_bad_workload_exits_2(tmp_path):
    wl = tmp_path / "wl.yaml"
    wl.write_text("input_len: {mean: -5}\n")
    out = run(
        "--cluster",
        str(CLUSTERS / "1x8-h100.yaml"),
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--workload",
        str(wl),
    )
    assert out.returncode == 2
    assert "wl.yaml line 1: input_len.mean: Input should be greater than or equal to 1" in (
        out.stderr
    )
