"""The router host after converge: vllm-router from the wheelhouse in its own venv, the
rendered files in place, the unit running as rendered, and prefill/decode reached through it
(the role's own check sent a completion; this one reads the decode engine's counters)."""

from __future__ import annotations

import json


def test_the_router_runs_from_its_own_venv(host):
    assert host.file("/opt/vfleet/router/bin/vllm-router").is_file
    service = host.service("vfleet-router.service")
    assert service.is_running and service.is_enabled


def test_the_unit_runs_the_rendered_command(host):
    """The router retitles its process (`vllm::router`), so its command line cannot be read
    back: the unit runs the installed router.sh, and the unit's own process listens where
    the rendered command says."""
    rendered = json.loads(host.file("/etc/vfleet/router/command.json").content_string)
    assert rendered[:2] == ["vllm-router", "--vllm-pd-disaggregation"]
    assert rendered.count("--prefill") == 1 and rendered.count("--decode") == 1
    exec_start = host.check_output("systemctl show -p ExecStart --value vfleet-router.service")
    assert "/etc/vfleet/router/router.sh" in exec_start
    pid = host.check_output("systemctl show -p MainPID --value vfleet-router.service")
    where = f"{rendered[rendered.index('--host') + 1]}:{rendered[rendered.index('--port') + 1]}"
    listening = host.check_output(f"ss -Hltnp 'sport = :{where.rsplit(':', 1)[1]}'")
    assert where in listening and f"pid={pid}," in listening, listening


def test_a_completion_through_the_router_is_decoded_from_transferred_kv(host):
    router = json.loads(host.file("/etc/vfleet/router/command.json").content_string)
    url = f"http://{router[router.index('--host') + 1]}:{router[router.index('--port') + 1]}"
    body = json.dumps({"model": "tiny", "prompt": "Once upon a time", "max_tokens": 4})
    out = host.check_output(
        f"curl -sf -m 120 -H 'Content-Type: application/json' -d '{body}' {url}/v1/completions"
    )
    answer = json.loads(out)
    assert answer["usage"]["completion_tokens"] == 4
    decode = router[router.index("--decode") + 1]
    metrics = host.check_output(f"curl -sf -m 10 {decode}/metrics")
    sources = {
        line.split('source="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("vllm:prompt_tokens_by_source_total{")
    }
    assert sources.get("external_kv_transfer", 0) > 0, sources
