"""A disaggregated plan rendered: both pools' engines with their release's KV connector and
side channel, the router in front, and the ports the firewall opens for them."""

from __future__ import annotations

import itertools
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from support.cli_run import vfleet

WORKLOAD = """\
input_len: {mean: 8192, p99: 8192}
output_len: {mean: 256, p99: 512}
concurrency: 64
slo: {ttft_p99_ms: 3000, tpot_p99_ms: 5}
"""
CLUSTER = """\
gpus_per_node: 8
gpu: H200-SXM-141GB
intra_node: {link: nvswitch, busbw_GBps: 440}
inter_node: {fabric: infiniband, busbw_GBps: 350}
nodes:
  - {name: gpu-a, address: 10.0.0.11, ib_hcas: [mlx5_0, mlx5_1]}
  - {name: gpu-b, address: 10.0.0.12, ib_hcas: [mlx5_0, mlx5_1]}
"""
MODEL = "Qwen/Qwen3-30B-A3B"


def _render(tmp_path: Path, version: str, cluster: str = CLUSTER, *extra: str) -> Path:
    (tmp_path / "cluster.yaml").write_text(cluster)
    (tmp_path / "workload.yaml").write_text(WORKLOAD)
    plan = tmp_path / "plan.json"
    made = vfleet(
        "plan", "--cluster", str(tmp_path / "cluster.yaml"), "--model", MODEL,
        "--workload", str(tmp_path / "workload.yaml"), "--mode", "disaggregated",
        "--vllm-version", version, "--out", str(plan),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    out = tmp_path / "out"
    done = vfleet(
        "render", "--plan", str(plan), "--cluster", str(tmp_path / "cluster.yaml"),
        "--out", str(out), *extra,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def _env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k: v for k, v in pairs if not k.startswith("#")}


def _config(folder: Path) -> dict[str, object]:
    argv = json.loads((folder / "command.json").read_text())
    return json.loads(argv[argv.index("--kv-transfer-config") + 1])


@pytest.mark.parametrize(
    ("version", "fields", "timeout"),
    [
        ("0.11.0", {"kv_connector", "kv_role"}, True),
        ("0.33.0", {"kv_connector", "kv_role", "kv_load_failure_policy", "kv_connector_extra_config"}, False),  # noqa: E501
    ],
)  # fmt: skip
def test_each_pool_engine_gets_its_role_side_channel_and_transports(
    tmp_path, version, fields, timeout
):
    out = _render(tmp_path, version)
    engines = sorted(p for p in out.glob("*/engine-*") if p.is_dir())
    prefill = [p for p in engines if p.name.startswith("engine-prefill-")]
    decode = [p for p in engines if not p.name.startswith("engine-prefill-")]
    assert prefill and decode
    blocks: dict[str, list[tuple[int, int]]] = {}
    for folder in engines:
        config = _config(folder)
        assert set(config) == fields
        role = "kv_producer" if folder in prefill else "kv_consumer"
        assert config["kv_role"] == role
        env = _env(folder / "vllm.env")
        host_address = {"gpu-a": "10.0.0.11", "gpu-b": "10.0.0.12"}[folder.parent.name]
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == host_address
        assert env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"
        assert ("VLLM_NIXL_ABORT_REQUEST_TIMEOUT" in env) is timeout
        argv = json.loads((folder / "command.json").read_text())
        tp = int(argv[argv.index("--tensor-parallel-size") + 1])
        dp = (
            int(argv[argv.index("--data-parallel-size") + 1])
            if "--data-parallel-size" in argv
            else 1
        )
        width = tp * dp if version == "0.11.0" else dp
        base = int(env["VLLM_NIXL_SIDE_CHANNEL_PORT"])
        blocks.setdefault(folder.parent.name, []).append((base, base + width))
    for host, taken in blocks.items():  # no two engines' blocks overlap on a host
        taken.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(taken)), (host, taken)


def test_the_router_fronts_every_engine_and_its_script_passes_exactly_its_argv(tmp_path):
    out = _render(tmp_path, "0.33.0")
    front = json.loads((out / "endpoints.json").read_text())
    urls = {e["url"].removesuffix("/v1"): e["pool"] for e in front["endpoints"]}
    folder = out / front["router"]["host"] / "router"
    argv = json.loads((folder / "command.json").read_text())
    assert argv[:2] == ["vllm-router", "--vllm-pd-disaggregation"]
    given = {argv[i + 1]: argv[i][2:] for i, a in enumerate(argv) if a in ("--prefill", "--decode")}
    assert given == urls
    assert front["router"]["url"].endswith(f":{argv[argv.index('--port') + 1]}/v1")
    assert _router_argv(folder, tmp_path) == argv[1:]
    unit = (folder / "vfleet-router.service").read_text()
    assert "\nExecStart=/bin/bash " in unit and unit.count("/router/router.sh") == 1


def _router_argv(folder: Path, tmp_path: Path) -> list[str]:
    """What router.sh hands to vllm-router, run with a printer in its place."""
    printer = tmp_path / "printer"
    printer.write_text('#!/bin/bash\nprintf "%s\\0" "$@" > "$ARGV_OUT"\n')
    printer.chmod(printer.stat().st_mode | stat.S_IEXEC)
    got = tmp_path / "argv.bin"
    run = subprocess.run(
        ["bash", str(folder / "router.sh")],
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "VLLM_ROUTER_BIN": str(printer),
            "ARGV_OUT": str(got),
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    return got.read_bytes().decode().split("\0")[:-1]


def test_the_router_runs_on_the_host_it_is_given_a_router_only_host_included(tmp_path):
    """--router-host (vfleet_router_host in a deploy) places the router: here on a third host
    that runs no engine, which then gets the router's files and its firewall entry."""
    _render(tmp_path, "0.33.0")
    third = CLUSTER.replace("nodes:\n", "nodes:\n  - {name: gpu-c, address: 10.0.0.13}\n")
    (tmp_path / "three.yaml").write_text(third)
    out = tmp_path / "placed"
    made = vfleet(
        "render", "--plan", str(tmp_path / "plan.json"), "--cluster", str(tmp_path / "three.yaml"),
        "--router-host", "gpu-c", "--out", str(out),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    front = json.loads((out / "endpoints.json").read_text())
    assert front["router"]["host"] == "gpu-c" and "//10.0.0.13:" in front["router"]["url"]
    assert {p.name for p in (out / "gpu-c").iterdir()} == {"router"}
    wall = json.loads((out / "firewall.json").read_text())["hosts"]
    assert wall["gpu-c"]["api"] == [{"engine": "router", "port": 9000}]
    assert all(e["engine"] != "router" for h in ("gpu-a", "gpu-b") for e in wall[h]["api"])
    assert "10.0.0.13" in wall["gpu-a"]["peers"] and "10.0.0.13" in wall["gpu-b"]["peers"]
    elsewhere = vfleet(
        "render", "--plan", str(tmp_path / "plan.json"), "--cluster", str(tmp_path / "three.yaml"),
        "--router-host", "gpu-z", "--out", str(tmp_path / "nowhere"),
    )  # fmt: skip
    assert (
        elsewhere.returncode == 2 and "router host gpu-z is not in the cluster" in elsewhere.stderr
    )
    assert not (tmp_path / "nowhere").exists()


def test_pools_behind_an_api_key_are_refused_in_one_line(tmp_path):
    """vllm-router 0.1 sends the engines an empty bearer token whatever it is given (measured
    with 0.1.17 against two header-checking servers), so keyed engines would answer 401 to
    every routed request: render refuses before it writes anything."""
    key_file = tmp_path / "api-key"
    key_file.write_text("s3cret")
    out = _render(tmp_path, "0.33.0", CLUSTER)
    made = vfleet(
        "render", "--plan", str(tmp_path / "plan.json"),
        "--cluster", str(tmp_path / "cluster.yaml"),
        "--api-key-file", str(key_file), "--out", str(tmp_path / "keyed"),
    )  # fmt: skip
    assert out.exists() and made.returncode == 2, made.stderr
    assert "--api-key-file with prefill/decode pools" in made.stderr
    assert len(made.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "keyed").exists()


def test_the_firewall_opens_side_channels_to_the_other_pool_and_the_router_to_clients(tmp_path):
    out = _render(tmp_path, "0.33.0")
    wall = json.loads((out / "firewall.json").read_text())["hosts"]
    front = json.loads((out / "endpoints.json").read_text())
    router_host = front["router"]["host"]
    assert any(a["engine"] == "router" for a in wall[router_host]["api"])
    for host, other in (("gpu-a", "10.0.0.12"), ("gpu-b", "10.0.0.11")):
        why = {c["why"] for c in wall[host]["cluster"]}
        assert "NIXL side channel (P/D handshake)" in why
        assert other in wall[host]["peers"]


def test_a_pool_host_without_an_address_is_refused_in_one_line(tmp_path):
    out = _render(tmp_path, "0.33.0")
    assert out.exists()
    bare = CLUSTER.replace(", address: 10.0.0.11", "").replace(", address: 10.0.0.12", "")
    (tmp_path / "bare.yaml").write_text(bare)
    made = vfleet(
        "render", "--plan", str(tmp_path / "plan.json"), "--cluster", str(tmp_path / "bare.yaml"),
        "--out", str(tmp_path / "again"),
    )  # fmt: skip
    assert made.returncode == 2
    assert "routable address" in made.stderr and len(made.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "again").exists()


def test_the_operators_env_wins_over_the_transports_render_picks(tmp_path):
    """A site that knows better (a test host whose sandbox forbids cross-memory attach, a
    fabric the probe missed) sets UCX itself, once, and render keeps its own for the rest."""
    out = _render(tmp_path, "0.33.0", CLUSTER, "--env", "UCX_TLS=tcp,self")
    for folder in sorted(out.glob("*/engine-*")):
        text = (folder / "vllm.env").read_text()
        assert text.count("UCX_TLS=") == 1, folder
        env = _env(folder / "vllm.env")
        assert env["UCX_TLS"] == "tcp,self"
        assert env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"
