"""firewall.json: the ports each host's engines need, and from whom (vfleet.render.firewall)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from support.render_cases import CASES, TWO_H100_ETH, render_case, run_vfleet
from vfleet.catalog.flag_registry import flag_set
from vfleet.documents.plan import Plan
from vfleet.errors import UserError
from vfleet.probe.load import load_cluster
from vfleet.render.engines import render
from vfleet.render.file_set import render_files
from vfleet.render.firewall import EPHEMERAL, exposure
from vfleet.render.types import EngineOnHost, HostRender, RayPorts, Rendered, RenderOptions

OPTS = RenderOptions(model_path="/srv/models/m", served_model_name="m")


def _case(name: str) -> Any:
    return next(c for c in CASES if c.name == name)


def _firewall(out: Path) -> dict[str, Any]:
    return json.loads((out / "firewall.json").read_text())


def _ports(host: dict[str, Any]) -> list[str]:
    return [p["ports"] for p in host["cluster"]]


def _engine(
    id_: str, role: str, mode: str, port: int | None, master_port: int | None = None
) -> EngineOnHost:
    return EngineOnHost(
        id=id_, replica=id_[-1], role=role, mode=mode, port=port, master_port=master_port
    )


def _endpoint(engine: str, *hosts: str) -> dict[str, Any]:
    return {"engine": engine, "hosts": list(hosts)}


def test_single_host_engines_open_only_their_api_ports() -> None:
    rendered = Rendered(
        hosts=[
            HostRender(
                "a",
                "10.0.0.1",
                [
                    _engine("engine-0", "single", "single", 8000),
                    _engine("engine-1", "single", "single", 8001),
                ],
            ),
            HostRender("b", "10.0.0.2", [_engine("engine-2", "single", "single", 8000)]),
        ],
        endpoints=[
            _endpoint("engine-0", "a"),
            _endpoint("engine-1", "a"),
            _endpoint("engine-2", "b"),
        ],
        mode_by_replica={},
    )
    doc = exposure(rendered, OPTS)
    assert doc["format"] == 1
    a, b = doc["hosts"]["a"], doc["hosts"]["b"]
    assert [p["port"] for p in a["api"]] == [8000, 8001]
    assert (a["cluster"], a["peers"]) == ([], [])
    assert b == {
        "address": "10.0.0.2",
        "api": [{"engine": "engine-2", "port": 8000}],
        "cluster": [],
        "peers": [],
    }


def test_an_mp_engine_opens_its_store_on_the_head_and_the_ephemeral_range_both_ways() -> None:
    rendered = Rendered(
        hosts=[
            HostRender(
                "a",
                "10.0.0.1",
                [_engine("engine-0", "head", "mp", 8000, master_port=29501)],
            ),
            HostRender("b", "10.0.0.2", [_engine("engine-0", "follower", "mp", None)]),
            HostRender("c", "10.0.0.3", [_engine("engine-1", "single", "single", 8000)]),
        ],
        endpoints=[_endpoint("engine-0", "a", "b"), _endpoint("engine-1", "c")],
        mode_by_replica={},
    )
    hosts = exposure(rendered, OPTS)["hosts"]
    assert _ports(hosts["a"]) == ["29501", EPHEMERAL]
    assert _ports(hosts["b"]) == [EPHEMERAL]
    assert hosts["b"]["api"] == []  # a headless follower serves no API
    # Only the engine's other host may reach its ports; c shares no engine with them.
    assert hosts["a"]["peers"] == ["10.0.0.2"] and hosts["b"]["peers"] == ["10.0.0.1"]
    assert hosts["c"]["peers"] == [] and hosts["c"]["cluster"] == []


def test_dp_opens_the_rpc_port_on_the_head(tmp_path: Path) -> None:
    out = render_case(_case("dp16-ep"), tmp_path)
    hosts = _firewall(out)["hosts"]
    assert _ports(hosts["gpu-a"]) == ["13345", EPHEMERAL]
    assert _ports(hosts["gpu-b"]) == [EPHEMERAL]
    assert hosts["gpu-a"]["api"] == [{"engine": "engine-0", "port": 8000}]
    assert hosts["gpu-a"]["peers"] == ["10.20.0.12"] and hosts["gpu-b"]["peers"] == ["10.20.0.11"]


def _unit_ports(unit: str) -> set[str]:
    """The ports a rendered Ray unit's ExecStart gives Ray."""
    start = re.search(r"^ExecStart=(.*?)(?<!\\)$", unit, re.S | re.M)
    assert start, unit
    flags = dict(re.findall(r"--([a-z-]+)=(\S+)", start.group(1)))
    workers = f"{flags.pop('min-worker-port')}-{flags.pop('max-worker-port')}"
    return {v for k, v in flags.items() if k == "port" or k.endswith("-port")} | {workers}


def test_ray_opens_exactly_the_ports_its_units_pin(tmp_path: Path) -> None:
    out = render_case(_case("ray-tp8-pp2"), tmp_path)
    hosts = _firewall(out)["hosts"]
    ray = RayPorts()
    for name in ("gpu-a", "gpu-b"):
        unit = (out / name / "engine-0" / "vfleet-ray-engine-0.service").read_text()
        opened = set(_ports(hosts[name])) - {EPHEMERAL}
        pinned = _unit_ports(unit)
        # The head's dashboard (on 127.0.0.1) and Ray client server are pinned, never opened.
        closed = {str(ray.dashboard), str(ray.client_server)} if name == "gpu-a" else set()
        assert opened == pinned - closed, name
        assert EPHEMERAL in _ports(hosts[name])
    assert "6379" in _ports(hosts["gpu-a"]) and "6379" not in _ports(hosts["gpu-b"])
    assert (
        "--dashboard-host=127.0.0.1"
        in (out / "gpu-a" / "engine-0" / "vfleet-ray-engine-0.service").read_text()
    )


def _split_plan(tmp_path: Path, layout: str, version: str) -> tuple[Plan, Any]:
    """A two-host plan whose one engine is cut into two, both headed on gpu-a (the planner
    does not produce this today; the renderer must still keep their ports apart)."""
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
        version,
        "--layout",
        layout,
        "--out",
        str(plan),
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(plan.read_text())
    for host in doc["hosts"]:
        ranks = host["engines"].pop("0")
        for rank in ranks[4:]:  # the second engine's TP ranks count from 0 again
            rank["tp_rank"] -= 4
        host["engines"] = {"0": ranks[:4], "1": ranks[4:]}
    doc.update(tensor_parallel_size=4, layout="TP4 PP2 EP", replicas=2)
    return Plan.model_validate(doc), load_cluster(cluster)


def test_two_engines_headed_on_one_host_get_their_own_bootstrap_ports(tmp_path: Path) -> None:
    plan, cluster = _split_plan(tmp_path, "TP8 PP2 EP", "0.32.0")
    rendered = render(plan, cluster, OPTS, flag_set("0.32.0"))
    files = render_files(rendered, OPTS, flag_set("0.32.0"), plan)
    ports = {
        path: json.loads(text)[json.loads(text).index("--master-port") + 1]
        for path, text in files.items()
        if path.endswith("command.json")
    }
    assert ports == {
        "gpu-a/engine-0/command.json": "29501",
        "gpu-a/engine-1/command.json": "29502",
        "gpu-b/engine-0/command.json": "29501",
        "gpu-b/engine-1/command.json": "29502",
    }
    head = json.loads(files["firewall.json"])["hosts"]["gpu-a"]
    assert _ports(head) == ["29501", EPHEMERAL, "29502", EPHEMERAL]
    assert [p["port"] for p in head["api"]] == [8000, 8001]


def test_two_ray_clusters_on_one_host_are_refused(tmp_path: Path) -> None:
    plan, cluster = _split_plan(tmp_path, "TP8 PP2 EP", "0.10.2")
    with pytest.raises(UserError, match="two Ray clusters"):
        render(plan, cluster, OPTS, flag_set("0.10.2"))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_host_and_api_port_of_the_render_is_listed(case: Any, tmp_path: Path) -> None:
    out = render_case(case, tmp_path)
    hosts = _firewall(out)["hosts"]
    endpoints = json.loads((out / "endpoints.json").read_text())["endpoints"]
    assert set(hosts) == {p.name for p in out.iterdir() if p.is_dir()}
    api = {(name, p["port"]) for name, h in hosts.items() for p in h["api"]}
    assert api == {(e["host"], e["port"]) for e in endpoints}
    for name, host in hosts.items():
        assert host["address"] not in host["peers"], name
        spans = [e for e in endpoints if name in e["hosts"] and len(e["hosts"]) > 1]
        assert bool(host["cluster"]) == bool(spans), name
