"""`vfleet render`: golden files per launch mode, version gating, bad input."""

import json
import os
import shutil
from pathlib import Path

import pytest

from support.render_cases import CASES, GOLDEN, ONE_H100_X4, TWO_H100_ETH, render_case, run_vfleet
from vfleet.catalog.flag_registry import flag_set
from vfleet.documents.plan import Plan
from vfleet.probe.load import load_cluster
from vfleet.render.engines import render
from vfleet.render.file_set import render_files
from vfleet.render.types import RenderOptions


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rendered_files_match_the_goldens(case, tmp_path):
    out = render_case(case, tmp_path)
    golden = GOLDEN / case.name
    if os.environ.get("VFLEET_UPDATE_GOLDENS") == "1":
        shutil.rmtree(golden, ignore_errors=True)
        shutil.copytree(out, golden)
    assert _tree(out) == _tree(golden)
    endpoints = json.loads((out / "endpoints.json").read_text())["endpoints"]
    assert {e["mode"] for e in endpoints} == set(case.modes)


def test_every_script_is_strict_and_commented(tmp_path):
    for case in CASES:
        out = render_case(case, tmp_path / case.name)
        for script in out.rglob("launch.sh"):
            text = script.read_text()
            assert "set -euo pipefail" in text and "# plan" in text
            assert os.access(script, os.X_OK)


def test_replicas_get_one_endpoint_each_on_their_own_gpus(tmp_path):
    out = render_case(CASES[0], tmp_path)
    endpoints = json.loads((out / "endpoints.json").read_text())["endpoints"]
    assert [e["port"] for e in endpoints] == [8000, 8001, 8002, 8003]
    envs = sorted(p.read_text() for p in out.rglob("vllm.env"))
    assert [
        line for env in envs for line in env.splitlines() if line.startswith("CUDA_VISIBLE_DEVICES")
    ] == [f"CUDA_VISIBLE_DEVICES={i}" for i in range(4)]


def test_api_key_comes_from_the_file_not_the_command_line(tmp_path):
    out = render_case(CASES[0], tmp_path)
    script = next(out.rglob("launch.sh")).read_text()
    assert 'VLLM_API_KEY="$(< /etc/vfleet/secrets/api-key)"' in script
    assert "--api-key" not in script


def test_followers_are_headless_and_only_the_head_binds_the_api(tmp_path):
    for case in (c for c in CASES if c.name in ("mp-tp8-pp2", "dp16-ep")):
        out = render_case(case, tmp_path / case.name)
        head = json.loads((out / "gpu-a/engine-0/command.json").read_text())
        follower = json.loads((out / "gpu-b/engine-0/command.json").read_text())
        assert "--headless" in follower and "--port" not in follower
        assert "--headless" not in head and head[head.index("--host") + 1] == "10.20.0.11"


def test_all2all_backend_is_a_flag_from_0_11_1_and_an_env_var_before(tmp_path):
    new = render_case(next(c for c in CASES if c.name == "dp16-ep"), tmp_path / "new")
    old = render_case(next(c for c in CASES if c.name == "dp16-ep-old-all2all"), tmp_path / "old")
    assert "--all2all-backend" in (new / "gpu-a/engine-0/launch.sh").read_text()
    assert "--all2all-backend" not in (old / "gpu-a/engine-0/launch.sh").read_text()
    assert "VLLM_ALL2ALL_BACKEND=" in (old / "gpu-a/engine-0/vllm.env").read_text()


def test_probe_facts_give_the_network_environment(tmp_path):
    from support.facts import raw_probe, second_host, with_bandwidth, write_dir

    first = with_bandwidth(raw_probe("h100-sxm-8gpu-nvswitch"), intra=450, inter=350)
    second = second_host(first, "gpu-h100-b", "10.30.0.12")
    facts = write_dir(tmp_path / "facts", first, second)
    plan = tmp_path / "plan.json"
    out = run_vfleet(
        "plan",
        "--cluster",
        str(facts),
        "--model",
        "deepseek-ai/DeepSeek-V3",
        "--vllm-version",
        "0.32.0",
        "--layout",
        "TP8 PP2 EP",
        "--out",
        str(plan),
    )
    assert out.returncode == 0, out.stderr
    out = run_vfleet(
        "render", "--plan", str(plan), "--facts", str(facts), "--out", str(tmp_path / "o")
    )
    assert out.returncode == 0, out.stderr
    envs = {p.parent.parent.name: p.read_text() for p in (tmp_path / "o").rglob("vllm.env")}
    assert len(envs) == 2
    for host, env in envs.items():
        assert "NCCL_IB_HCA=" in env and "NCCL_SOCKET_IFNAME=" in env
        assert "GLOO_SOCKET_IFNAME=" in env and "VLLM_HOST_IP=" in env, host
    assert "VLLM_HOST_IP=10.30.0.12" in envs["gpu-h100-b"]


def test_dcp_before_0_10_2_is_refused(tmp_path):
    cluster = tmp_path / "c.yaml"
    cluster.write_text(TWO_H100_ETH)
    plan = tmp_path / "plan.json"
    out = run_vfleet(
        "plan",
        "--cluster",
        str(cluster),
        "--model",
        "deepseek-ai/DeepSeek-V3",
        "--vllm-version",
        "0.32.0",
        "--layout",
        "TP8 PP2 DCP2",
        "--out",
        str(plan),
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(plan.read_text())
    doc["vllm_version"] = "0.10.1"
    plan.write_text(json.dumps(doc))
    out = run_vfleet(
        "render", "--plan", str(plan), "--cluster", str(cluster), "--out", str(tmp_path / "o")
    )
    assert out.returncode == 2
    assert "--decode-context-parallel-size" in out.stderr and "0.10.2" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d["hosts"][0].update(host="gpu-z"), "which the cluster does not have"),
        (lambda d: d["hosts"][0]["engines"]["0"][0].update(gpu=9), "has 4 GPUs"),
        (lambda d: d["hosts"][0]["engines"]["0"][1].update(gpu=0), "one GPU of host"),
        (
            lambda d: d["hosts"][0]["engines"]["0"].append(
                {"gpu": 3, "tp_rank": 0, "pp_rank": 0, "dp_rank": 0}
            ),
            "has rank tp0 pp0 dp0 twice",
        ),
        (lambda d: d["hosts"][0]["engines"]["0"].pop(), "not the 4 of TP x PP x DP"),
        (
            lambda d: d["hosts"][0]["engines"]["0"][0].update(tp_rank=-1),
            "tp_rank: Input should be greater than or equal to 0, got -1",
        ),
        (
            lambda d: d["hosts"][0]["engines"]["0"][0].pop("gpu"),
            "hosts[0].engines.0[0].gpu: is missing",
        ),
        (lambda d: d.update(vllm_version="0.2.0"), "outside the supported range"),
        (
            lambda d: d.update(vllm_version="latest"),
            "vllm_version: must be a vLLM release written X.Y.Z",
        ),
        (
            lambda d: d.update(max_num_seqs=0),
            "max_num_seqs: Input should be greater than or equal to 1, got 0",
        ),
        (
            lambda d: d.update(max_model_len="4k"),
            "max_model_len: Input should be a valid integer, got '4k'",
        ),
        (
            lambda d: d.update(tensor_parallel_size=2.5),
            "tensor_parallel_size: Input should be a valid integer, got 2.5",
        ),
        (lambda d: d.update(max_num_batched_tokens=8, max_num_seqs=64), "is below max_num_seqs"),
        (
            lambda d: d.update(
                enable_chunked_prefill=False, max_num_batched_tokens=512, max_num_seqs=64
            ),
            "without chunked prefill",
        ),
        (lambda d: d.update(kv_cache_dtype="int3"), "kv_cache_dtype: Input should be 'auto'"),
        (
            lambda d: d.update(block_size=17),
            "block_size: must be one of 1, 8, 16, 32, 64, 128, 256, got 17",
        ),
        (lambda d: d.pop("hosts"), "hosts: is missing"),
        (lambda d: d.update(hosts=[]), "hosts: List should have at least 1 item"),
        (
            lambda d: d.update(gpu_memory_utilization=1.5),
            "gpu_memory_utilization: Input should be less than or equal to 1, got 1.5",
        ),
        (
            lambda d: d.update(gpu_memory_utilization=0),
            "gpu_memory_utilization: Input should be greater than 0, got 0",
        ),
    ],
)
def test_bad_plans_exit_2_with_one_line(tmp_path, edit, needle):
    cluster = tmp_path / "c.yaml"
    cluster.write_text(ONE_H100_X4)
    plan = tmp_path / "plan.json"
    out = run_vfleet(
        "plan",
        "--cluster",
        str(cluster),
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--layout",
        "TP4",
        "--out",
        str(plan),
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(plan.read_text())
    edit(doc)
    plan.write_text(json.dumps(doc))
    out = run_vfleet(
        "render", "--plan", str(plan), "--cluster", str(cluster), "--out", str(tmp_path / "o")
    )
    assert out.returncode == 2, out.stdout
    assert needle in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_not_json_plan_exits_2(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text("{nope")
    cluster = tmp_path / "c.yaml"
    cluster.write_text(ONE_H100_X4)
    out = run_vfleet(
        "render", "--plan", str(plan), "--cluster", str(cluster), "--out", str(tmp_path / "o")
    )
    assert out.returncode == 2 and "not JSON" in out.stderr


def test_flag_registry_matches_the_release_history():
    from vfleet.catalog.flag_registry import flag_set

    assert flag_set("0.17.1").has("--swap-space") and not flag_set("0.18.1").has("--swap-space")
    assert not flag_set("0.11.0").has("--nnodes") and flag_set("0.11.1").has("--nnodes")
    assert not flag_set("0.10.1.1").has("--decode-context-parallel-size")
    assert flag_set("0.10.2").has("--decode-context-parallel-size")
    assert flag_set("0.12.0").has("--cuda-graph-sizes")
    assert not flag_set("0.13.0").has("--cuda-graph-sizes")
    assert flag_set("0.33.0").has("--disable-chunked-prefill")  # 0.33's negative form
    # A release between two recorded ones takes the older record.
    assert flag_set("0.16.0").version == "0.15.1"


HARDENING = (
    "NoNewPrivileges=yes",
    "ProtectSystem=strict",
    "ProtectHome=yes",
    "ReadWritePaths=/var/lib/vllm",
    "PrivateTmp=yes",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectControlGroups=yes",
    "RestrictSUIDSGID=yes",
    "LockPersonality=yes",
    "CapabilityBoundingSet=",
)


def _directives(unit: str) -> set[str]:
    return {line for line in unit.splitlines() if line and not line.startswith(("#", " "))}


def test_every_unit_is_hardened_but_keeps_the_gpus(tmp_path):
    for case in CASES:
        out = render_case(case, tmp_path / case.name)
        units = sorted(out.rglob("*.service"))
        assert units, case.name
        for unit in units:
            lines = _directives(unit.read_text())
            assert set(HARDENING) <= lines, (case.name, unit.name)
            assert "User=vllm" in lines
            # /dev/nvidia* and /dev/infiniband/* must stay reachable: no closed device list.
            closed = ("PrivateDevices=", "ProtectClock=", "DevicePolicy=", "DeviceAllow=")
            assert not any(line.startswith(closed) for line in lines), unit


def test_ray_mode_shares_the_ray_units_tmp(tmp_path):
    out = render_case(next(c for c in CASES if c.name == "ray-tp8-pp2"), tmp_path)
    unit = (out / "gpu-a/engine-0/vfleet-vllm-engine-0.service").read_text()
    assert "JoinsNamespaceOf=vfleet-ray-engine-0.service" in unit


def test_paths_under_home_keep_home_read_only_instead_of_hidden(tmp_path):
    cluster_file = tmp_path / "c.yaml"
    cluster_file.write_text(ONE_H100_X4)
    cluster = load_cluster(cluster_file)
    ranks = [{"gpu": g, "tp_rank": g, "pp_rank": 0, "dp_rank": 0} for g in range(4)]
    plan = Plan.model_validate(
        {
            "model": "m",
            "vllm_version": "0.32.0",
            "tensor_parallel_size": 4,
            "pipeline_parallel_size": 1,
            "data_parallel_size": 1,
            "max_model_len": 4096,
            "gpu_memory_utilization": 0.9,
            "max_num_seqs": 8,
            "max_num_batched_tokens": 2048,
            "kv_cache_dtype": "auto",
            "hosts": [{"host": "gpu-a", "engines": {"0": ranks}}],
        }
    )
    flags = flag_set("0.32.0")
    for home, model, protect in (
        ("/home/vllm", "/srv/models/m", "read-only"),
        ("/srv/vllm-home", "/srv/models/m", "yes"),
        ("/srv/vllm-home", "/home/alice/models/m", "read-only"),  # the model must stay readable
    ):
        opts = RenderOptions(model_path=model, served_model_name="m", service_home=home)
        files = render_files(render(plan, cluster, opts, flags), opts, flags, plan)
        lines = _directives(files["gpu-a/engine-0/vfleet-vllm-engine-0.service"])
        assert {f"ProtectHome={protect}", f"ReadWritePaths={home}"} <= lines


def test_bootstrap_binds_to_the_private_addresses(tmp_path):
    """Every multi-host mode points its bootstrap at the head's private address and each
    host at its own; the API binds to the private address, never to every interface."""
    own = {"gpu-a": "10.20.0.11", "gpu-b": "10.20.0.12"}
    for name, head_flag in (
        ("mp-tp8-pp2", "--master-addr"),
        ("dp16-ep", "--data-parallel-address"),
    ):
        out = render_case(next(c for c in CASES if c.name == name), tmp_path / name)
        for host, address in own.items():
            argv = json.loads((out / host / "engine-0/command.json").read_text())
            assert argv[argv.index(head_flag) + 1] == own["gpu-a"], (name, host)
            assert f"VLLM_HOST_IP={address}" in (out / host / "engine-0/vllm.env").read_text()
            assert "0.0.0.0" not in argv
            if "--host" in argv:
                assert argv[argv.index("--host") + 1] == address
    out = render_case(next(c for c in CASES if c.name == "ray-tp8-pp2"), tmp_path / "ray")
    for host, address in own.items():
        unit = (out / host / "engine-0/vfleet-ray-engine-0.service").read_text()
        assert f"--node-ip-address={address}" in unit
        assert "0.0.0.0" not in unit
    head = (out / "gpu-a/engine-0/vfleet-ray-engine-0.service").read_text()
    assert "--dashboard-host=127.0.0.1" in head
