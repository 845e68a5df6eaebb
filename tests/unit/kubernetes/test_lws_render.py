"""`vfleet render --target lws`: golden manifests per layout, and what each must hold.

No Kubernetes cluster runs here. What is checked instead: every file against its schema
(the render does that itself, and check-jsonschema agrees below), the group shape against
the plan, the LWS variables each pod reads, the probes on the leader only, the P/D wiring,
and a pod's shell script run for real with the values Kubernetes would give it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from support.lws_cases import CASES, GOLDEN, LwsCase, plan_case, render_lws


def _tree(root: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(root.iterdir())}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for case in CASES:
        work = tmp_path_factory.mktemp(case.name)
        plan, cluster = plan_case(case, work)
        code, _, err = render_lws(plan, cluster, work / "lws")
        assert code == 0, err
        out[case.name] = work / "lws"
    return out


def _objects(folder: Path) -> list[dict]:
    return [yaml.safe_load(p.read_text()) for p in sorted(folder.glob("*.yaml"))]


def _lws(folder: Path) -> list[dict]:
    """The LeaderWorkerSets, a P/D plan's prefill pool first."""
    sets = [o for o in _objects(folder) if o["kind"] == "LeaderWorkerSet"]
    return sorted(sets, key=lambda o: not o["metadata"]["name"].endswith("-prefill"))


def _pods(lws: dict) -> dict[str, dict]:
    template = lws["spec"]["leaderWorkerTemplate"]
    leader = template.get("leaderTemplate", template["workerTemplate"])
    pods = {"leader": leader["spec"]["containers"][0]}
    if "leaderTemplate" in template:
        pods["worker"] = template["workerTemplate"]["spec"]["containers"][0]
    return pods


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_manifests_match_the_goldens(case: LwsCase, rendered: dict[str, Path]) -> None:
    out, golden = rendered[case.name], GOLDEN / case.name
    if os.environ.get("VFLEET_UPDATE_GOLDENS") == "1":
        shutil.rmtree(golden, ignore_errors=True)
        shutil.copytree(out, golden)
    assert _tree(out) == _tree(golden)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_group_spans_the_engines_gpus(case: LwsCase, rendered: dict[str, Path]) -> None:
    plan = json.loads(
        yaml.safe_load((rendered[case.name] / _plan_file(case)).read_text())["data"]["plan.json"]
    )
    sets = _lws(rendered[case.name])
    shapes = []
    for lws in sets:
        template = lws["spec"]["leaderWorkerTemplate"]
        gpus = _pods(lws)["leader"]["resources"]["limits"]["nvidia.com/gpu"]
        shapes.append((lws["spec"]["replicas"], template["size"], gpus))
    assert [s[:3] for s in shapes] == [g[:3] for g in case.groups]
    decode = sets[-1]
    size = decode["spec"]["leaderWorkerTemplate"]["size"]
    gpus = _pods(decode)["leader"]["resources"]["limits"]["nvidia.com/gpu"]
    tp, pp, dp = (
        plan[k] for k in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
    )
    assert size * gpus == tp * pp * dp


def _plan_file(case: LwsCase) -> str:
    return next(p.name for p in GOLDEN.joinpath(case.name).glob("configmap-*-plan.yaml"))


def test_mp_pods_take_rank_and_leader_from_lws(rendered: dict[str, Path]) -> None:
    (lws,) = _lws(rendered["tp8-pp2-two-nodes"])
    pods = _pods(lws)
    leader, worker = pods["leader"]["args"], pods["worker"]["args"]
    assert leader[leader.index("--node-rank") + 1] == "0"
    assert worker[worker.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
    for args in (leader, worker):
        assert args[args.index("--nnodes") + 1] == "$(LWS_GROUP_SIZE)"
        assert args[args.index("--master-addr") + 1] == "$(LWS_LEADER_ADDRESS)"
    assert "--headless" in worker and "--headless" not in leader
    assert "--port" in leader and "--port" not in worker


def test_only_the_leader_is_probed_and_serves(rendered: dict[str, Path]) -> None:
    for name in ("tp8-pp2-two-nodes", "dp16-ep-two-nodes", "tp8-pp2-ray"):
        pods = _pods(_lws(rendered[name])[0])
        assert {"startupProbe", "readinessProbe", "livenessProbe", "ports"} <= set(pods["leader"])
        assert not {"startupProbe", "readinessProbe", "livenessProbe", "ports"} & set(
            pods["worker"]
        )


def test_the_start_up_probe_covers_the_weights_read(rendered: dict[str, Path]) -> None:
    (lws,) = _lws(rendered["tp8-pp2-two-nodes"])
    probe = _pods(lws)["leader"]["startupProbe"]
    waited = probe["periodSeconds"] * probe["failureThreshold"]
    # DeepSeek-V3 at TP8 PP2: ~40 GiB per GPU, 8 per pod, read at the default 1 GB/s.
    assert waited >= 2 * (8 * 40 * 2**30 / 1e9 + 300)


def test_pods_get_rdma_shared_memory_and_the_clusters_hcas(rendered: dict[str, Path]) -> None:
    (lws,) = _lws(rendered["dp16-ep-two-nodes"])
    template = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    container = template["containers"][0]
    assert container["resources"]["limits"]["rdma/ib"] == 1
    assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NCCL_IB_HCA"] == "mlx5_0,mlx5_1" and env["NCCL_SOCKET_IFNAME"] == "eth0"
    shm = next(v for v in template["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    (single,) = _lws(rendered["dense-single-node"])
    limits = _pods(single)["leader"]["resources"]["limits"]
    assert "rdma/ib" not in limits  # one pod, one host: nothing crosses the fabric


def test_pd_pods_take_the_side_channel_host_from_the_pod_ip(rendered: dict[str, Path]) -> None:
    out = rendered["pd-disaggregated"]
    prefill, decode = (_pods(lws)["leader"] for lws in _lws(out))
    for container, role in ((prefill, "kv_producer"), (decode, "kv_consumer")):
        args = container["args"]
        config = json.loads(args[args.index("--kv-transfer-config") + 1])
        assert config["kv_connector"] == "NixlConnector" and config["kv_role"] == role
        host = next(e for e in container["env"] if e["name"] == "VLLM_NIXL_SIDE_CHANNEL_HOST")
        assert host["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    (router,) = [o for o in _objects(out) if o["kind"] == "Deployment"]
    script = router["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert script.count("--prefill http://qwen3-30b-a3b-prefill-") == 2
    assert "--decode http://qwen3-30b-a3b-decode-0.qwen3-30b-a3b-decode.default:8000" in script


def test_a_dp_workers_script_runs_with_the_values_kubernetes_gives_it(
    rendered: dict[str, Path], tmp_path: Path
) -> None:
    """The worker's script, $$ turned into $ as the kubelet does, run by a real sh with a
    stand-in vllm that prints its arguments."""
    (lws,) = _lws(rendered["dp16-ep-two-nodes"])
    worker = _pods(lws)["worker"]
    assert worker["command"] == ["/bin/sh", "-c"]
    script = worker["args"][0].replace("$$", "$")
    fake = tmp_path / "vllm"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "LWS_WORKER_INDEX": "1",
           "LWS_LEADER_ADDRESS": "dsv3-0.dsv3.default", "LWS_GROUP_SIZE": "2"}  # fmt: skip
    done = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    argv = done.stdout.splitlines()
    assert argv[argv.index("--data-parallel-start-rank") + 1] == "8"
    assert argv[argv.index("--data-parallel-address") + 1] == "dsv3-0.dsv3.default"
    assert argv[argv.index("--data-parallel-size-local") + 1] == "8"
