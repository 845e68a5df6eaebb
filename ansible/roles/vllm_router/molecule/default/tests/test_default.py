"""The three hosts after the launch playbook: each runs what the render gave it (the prefill
engine on h1, the decode engine on h2, the router alone on h3, each as its systemd unit), and
a completion sent through the router from any host is decoded from KV the decode engine
received from the prefill engine, none of the prompt computed again (its own counters)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from vfleet.observe.metrics import parse


@pytest.fixture(scope="module")
def scenario(host: Any) -> dict[str, Any]:
    return host.ansible.get_variables()


@pytest.fixture(scope="module")
def render(scenario: dict[str, Any]) -> dict[str, Any]:
    """The endpoints.json `vfleet render` wrote on the controller (vllm_launch_dir, read
    through the plain path it is made of: get_variables does not template)."""
    launch = Path(scenario["vllm_router_test_work"]) / "launch"
    return json.loads((launch / "endpoints.json").read_text())


def _units(host: Any) -> set[str]:
    listed = host.check_output("systemctl list-units --all --plain --no-legend 'vfleet-*'")
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def test_each_host_runs_what_the_render_gave_it(host, scenario, render):
    name = scenario["inventory_hostname"]
    engines = {ep["engine"] for ep in render["endpoints"] if name in ep["hosts"]}
    wanted = {f"vfleet-vllm-{engine}.service" for engine in engines}
    if render["router"]["host"] == name:
        wanted.add("vfleet-router.service")
    assert wanted, f"the render gives {name} nothing to run"
    assert _units(host) == wanted
    for unit in wanted:
        service = host.service(unit)
        assert service.is_running and service.is_enabled, unit
    pools = {ep["pool"] for ep in render["endpoints"] if name in ep["hosts"]}
    assert pools == {"h1": {"prefill"}, "h2": {"decode"}, "h3": set()}[name]


def test_the_router_unit_runs_the_rendered_command(host, scenario, render):
    """The router retitles its process (`vllm::router`), so its command line cannot be read
    back: the unit runs the installed router.sh, and the unit's own process listens where
    the rendered command says. On the other hosts there is no router."""
    if render["router"]["host"] != scenario["inventory_hostname"]:
        assert not host.file("/etc/vfleet/router").exists
        return
    assert host.file("/opt/vfleet/router/bin/vllm-router").is_file
    rendered = json.loads(host.file("/etc/vfleet/router/command.json").content_string)
    assert rendered[:2] == ["vllm-router", "--vllm-pd-disaggregation"]
    assert rendered.count("--prefill") == 1 and rendered.count("--decode") == 1
    exec_start = host.check_output("systemctl show -p ExecStart --value vfleet-router.service")
    assert "/etc/vfleet/router/router.sh" in exec_start
    pid = host.check_output("systemctl show -p MainPID --value vfleet-router.service")
    where = f"{rendered[rendered.index('--host') + 1]}:{rendered[rendered.index('--port') + 1]}"
    listening = host.check_output(f"ss -Hltnp 'sport = :{where.rsplit(':', 1)[1]}'")
    assert where in listening and f"pid={pid}," in listening, listening


def _counters(host: Any, metrics_url: str) -> dict[str, float]:
    """The decode engine's prompt tokens by source, read as the deploy report and doctor read
    them (vfleet.observe.metrics), and the bytes NIXL moved into it, which they do not read."""
    page = host.check_output(f"curl -sf -m 10 {metrics_url}")
    snap = parse([page], [metrics_url], model_name="tiny")
    moved = sum(
        sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name == "vllm:nixl_bytes_transferred_sum"
    )
    return {
        "external_kv_transfer": snap.get("prompt_transferred"),
        "local_compute": snap.get("prompt_local"),
        "nixl_bytes": moved,
    }


def test_a_completion_through_the_router_is_decoded_from_transferred_kv(host, render):
    """Sent from each host in turn: the decode engine's `vllm:prompt_tokens_by_source` counts
    the request's whole prompt as received over the KV connector and none as computed, and
    its `vllm:nixl_bytes_transferred` grows (the KV crossed from h1 to h2 over NIXL)."""
    router = render["router"]["url"]
    decode = next(ep for ep in render["endpoints"] if ep["pool"] == "decode")
    metrics = decode["health"].removesuffix("/health") + "/metrics"
    before = _counters(host, metrics)
    body = json.dumps({"model": "tiny", "prompt": "Once upon a time", "max_tokens": 4})
    answer = json.loads(
        host.check_output(
            f"curl -sf -m 120 -H 'Content-Type: application/json' -d '{body}' {router}/completions"
        )
    )
    assert answer["usage"]["completion_tokens"] == 4
    after = _counters(host, metrics)
    grew = {k: v - before.get(k, 0.0) for k, v in after.items()}
    assert grew.get("external_kv_transfer") == answer["usage"]["prompt_tokens"], (before, after)
    assert grew.get("local_compute", 0.0) == 0.0, (before, after)
    assert grew["nixl_bytes"] > 0, (before, after)
