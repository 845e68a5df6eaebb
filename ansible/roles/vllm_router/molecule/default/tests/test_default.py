"""What a disaggregated launch leaves on a testbed host, checked over SSH: both pools and the
router serving, and the decode engine answering from KV it pulled over NIXL."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

ROUTER_UNIT = "vfleet-router.service"
VENV = "/opt/vfleet/vllm"
ROUTER_VENV = "/opt/vfleet/router"


@pytest.fixture(scope="module")
def endpoints(host: Any) -> dict[str, Any]:
    launch = Path(host.ansible.get_variables()["vllm_launch_dir"])
    doc: dict[str, Any] = json.loads((launch / "endpoints.json").read_text())
    return doc


def _pool(endpoints: dict[str, Any], pool: str) -> dict[str, Any]:
    (engine,) = [e for e in endpoints["endpoints"] if e.get("pool") == pool]
    return engine


def _curl(host: Any, *args: str) -> tuple[int, str]:
    """HTTP status and body of a curl run on the host."""
    cmd = host.run("curl -sS -w '\\n%{http_code}' " + " ".join(map(shlex.quote, args)))
    assert cmd.rc == 0, cmd.stderr
    body, _, status = cmd.stdout.rpartition("\n")
    return int(status), body


def _by_source(metrics: str) -> dict[str, float]:
    """The engine's prompt tokens by where their KV came from."""
    found = re.findall(
        r'^vllm:prompt_tokens_by_source_total\{[^}]*source="(\w+)"[^}]*\} (\S+)$',
        metrics,
        re.MULTILINE,
    )
    return {source: float(value) for source, value in found}


def test_one_prefill_and_one_decode_engine_and_the_router_run(host: Any, endpoints: Any) -> None:
    for engine in ("prefill", "decode"):
        unit = f"vfleet-vllm-{_pool(endpoints, engine)['engine']}.service"
        assert host.service(unit).is_running, unit
        assert host.service(unit).is_enabled, unit
    assert host.service(ROUTER_UNIT).is_running
    assert host.service(ROUTER_UNIT).is_enabled
    assert endpoints["router"]["host"] == "h1"


def test_nixl_is_installed_beside_vllm(host: Any) -> None:
    out = host.run(f"{VENV}/bin/python -c 'import nixl; print(nixl.__name__)'")
    assert out.rc == 0, out.stderr[-2000:]


def test_the_router_runs_from_its_own_venv(host: Any) -> None:
    command = host.file("/etc/vfleet/router/router.sh").content_string
    assert f"{ROUTER_VENV}/bin/vllm-router" in command
    assert host.file(f"{ROUTER_VENV}/bin/vllm-router").is_file
    assert not host.file(f"{VENV}/bin/vllm-router").exists


def test_the_decode_engine_answers_from_kv_it_pulled(host: Any, endpoints: Any) -> None:
    decode = _pool(endpoints, "decode")
    prefill = _pool(endpoints, "prefill")
    before = _by_source(_curl(host, decode["url"].removesuffix("/v1") + "/metrics")[1])
    request = {"model": "tiny", "prompt": "Once upon a time in a village by the sea",
               "max_tokens": 6, "temperature": 0}  # fmt: skip
    status, body = _curl(
        host, "-H", "Content-Type: application/json", "-d", json.dumps(request),
        endpoints["router"]["url"] + "/completions",
    )  # fmt: skip
    assert status == 200, body
    reply = json.loads(body)
    assert reply["usage"]["completion_tokens"] == 6
    after = _by_source(_curl(host, decode["url"].removesuffix("/v1") + "/metrics")[1])
    pulled = after.get("external_kv_transfer", 0) - before.get("external_kv_transfer", 0)
    computed = after.get("local_compute", 0) - before.get("local_compute", 0)
    assert pulled == reply["usage"]["prompt_tokens"], (before, after)
    assert computed == 0, (before, after)
    prefilled = _by_source(_curl(host, prefill["url"].removesuffix("/v1") + "/metrics")[1])
    assert prefilled.get("local_compute", 0) >= reply["usage"]["prompt_tokens"]
