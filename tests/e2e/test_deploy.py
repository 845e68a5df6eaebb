"""`make deploy` on the local default, for real: two test hosts, the whole Ansible rollout, a
real vLLM CPU engine per host, the load test and the report; then a second deploy, after an
upgrade on one host, that must change nothing but restart that host's engine. The deployment
is conftest.py's, shared with the fault tests and removed by test_destroy.py. Slow (about 10
minutes on 2 cores); CI runs it, never skips it."""

from __future__ import annotations

import json
import re

import pytest

from .deployment import (
    ARTIFACTS,
    completes,
    endpoints,
    main_pid,
    make,
    polled,
    recaps,
    ssh,
    vfleet,
)

pytestmark = pytest.mark.testbed


def test_first_deploy_goes_all_the_way(deployed):
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-2000:]
    out = deployed.stdout
    for phase in (
        "terraform apply",
        "install: common, nvidia_driver, nccl, vllm",
        "probe the interconnect",
        "plan",
        "render",
        "launch and verify (health + completion)",
        "load test",
    ):
        assert f"==> {phase}" in out
    assert "first launch, every host at once" in out  # nothing served yet: no rolling
    assert re.search(r"Endpoint engine-0: http://10\.213\.0\.\d+:8000/v1", out)
    assert "Phases:" in out and "total" in out
    plan = json.loads((ARTIFACTS / "plan.json").read_text())
    assert plan["replicas"] == 2 and plan["tensor_parallel_size"] == 1  # one engine per host
    # group_vars' vfleet_render_env reaches each engine's environment file.
    for env_file in (ARTIFACTS / "launch").glob("h*/engine-*/vllm.env"):
        lines = set(env_file.read_text().splitlines())
        assert {"VLLM_CPU_OMP_THREADS_BIND=nobind", "VLLM_ENABLE_V1_MULTIPROCESSING=0"} <= lines
    assert len(list((ARTIFACTS / "launch").glob("h*/engine-*/vllm.env"))) == 2
    results = [
        json.loads(p.read_text())
        for p in (ARTIFACTS / "report" / "loadtest").rglob("*.json")
        if "completed" in p.read_text() and ".sweep-c" not in p.name
    ]
    # 40 prompts per endpoint (inventories/local/group_vars: loadtest_num_prompts)
    assert len(results) == 2 and all(r["completed"] == 40 for r in results)
    report = ARTIFACTS / "report"
    for name in (
        "report.md",
        "report.html",
        "kv_budget.png",
        "loadtest.png",
        "plan_alternatives.png",
        "sweep.png",
    ):
        assert (report / name).is_file(), name
    assert (report / "kv_budget.png").read_bytes()[:4] == b"\x89PNG"
    # The ledger: one line per engine, the real engine's KV blocks read from its /metrics,
    # and marked as no check of the model (CPU engines standing in for the planned H200).
    lines = [json.loads(x) for x in (ARTIFACTS / "ledger.jsonl").read_text().splitlines()]
    main = [e for e in lines if e["sweep_level"] is None]
    assert sorted(e["engine"] for e in main) == ["engine-0", "engine-1"]
    for entry in main:
        assert entry["comparable"] is False and not entry["notes"], entry
        assert entry["measured"]["completed"] == 40
        # 4 MiB of KV at 512 bytes a token (2 layers x 2 KV heads x 32 x K and V, bf16):
        # 8,192 tokens, 64 blocks of 128, as cache_config_info reports them.
        assert (entry["measured"]["kv_blocks"], entry["measured"]["block_size"]) == (64, 128)
        assert entry["predicted"]["output_tokens_per_s"] > 0
    # The sweep on engine-0 (levels 4, 16, 64): 128 + 64 tokens take two blocks a request,
    # so 32 requests fill the cache; below that nothing is preempted, at 64 preemption starts.
    sweep = {e["sweep_level"]: e["measured"] for e in lines if e["sweep_level"]}
    assert sorted(sweep) == [4, 16, 64]
    assert sweep[4]["preemptions"] == sweep[16]["preemptions"] == 0, sweep
    assert sweep[64]["preemptions"] > 0, sweep
    # One round: level x 1 requests, at least loadtest_sweep_min_prompts (8).
    assert {level: m["completed"] for level, m in sweep.items()} == {4: 8, 16: 16, 64: 64}
    text = (report / "report.md").read_text()
    assert "Predicted and measured" in text and "What is real here" in text
    assert "## The same cluster with a real model" in text  # the numbers to read as a forecast
    assert "## Concurrency sweep" in text


def test_upgrade_check_reads_the_deployed_environment(deployed):
    """`vfleet upgrade-check --env local`: the engines' rendered files and plan against another
    recorded release; --gate refuses a target the group_vars do not pin."""
    assert deployed.returncode == 0
    plan = json.loads((ARTIFACTS / "plan.json").read_text())
    out = vfleet("upgrade-check", "--env", "local", "--to", "0.33.0", "--json")
    assert out.returncode in (0, 1), out.stderr
    doc = json.loads(out.stdout)
    assert (doc["from"], doc["to"]) == (plan["vllm_version"], "0.33.0")
    assert (out.returncode == 1) == bool(doc["breaks"])
    gate = vfleet("upgrade-check", "--env", "local", "--gate", "--to", "0.33.0")
    assert gate.returncode == 2 and "set vfleet_vllm_version" in gate.stderr, gate.stderr


def test_redeploy_changes_nothing_but_restarts_the_upgraded_engines_one_at_a_time(deployed):
    """The second rollout, `make upgrade`, after a vLLM or model change on both hosts (the
    vllm role's install stamp, as an upgrade leaves it): its check finds nothing to stop for
    (the pin is the deployed release), then no playbook changes anything on either host but
    the restart of each engine, one host at a time (launch's rolling order, each checked
    before the next), while a completion sent to each endpoint every second always finds
    one replica serving. One deploy proves the upgrade gate, the idempotence of the
    rollout, the upgrade's restart and the rolling restart that `vfleet restart` runs too
    (the same launch playbook, one host at a time; its command is checked in
    tests/unit/deploy/test_restart.py). That a host whose vLLM did not change keeps its
    engine is proven by the blank-host reinstall in test_deploy_faults.py."""
    assert deployed.returncode == 0
    eps = endpoints()
    before = {host: main_pid(ep) for host, ep in eps.items()}
    for host in eps:
        assert ssh(host, "sleep 1; touch /var/lib/vfleet/vllm-installed").returncode == 0
    second, polls = polled(lambda: make("upgrade"))
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-2000:]
    assert "vfleet upgrade-check" in second.stdout and "nothing breaks" in second.stdout
    for book in ("standins-local", "site", "loadtest"):
        changed = recaps(ARTIFACTS / "logs" / f"{book}.log")
        assert changed and set(changed.values()) == {0}, (book, changed)
    launched = recaps(ARTIFACTS / "logs" / "launch.log")
    assert launched["h1"] > 0 and launched["h2"] > 0, launched
    assert "reusing artifacts/local/facts" in second.stdout
    assert "first launch" not in second.stdout  # engines serve now: one host at a time
    launch = (ARTIFACTS / "logs" / "launch.log").read_text()
    said = r"Restarting (engine-\d+):\s+vLLM\s+or\s+the\s+model\s+changed"  # YAML may wrap
    assert set(re.findall(said, launch)) == {ep["engine"] for ep in eps.values()}, launch[-2000:]
    after = {host: main_pid(ep) for host, ep in eps.items()}
    assert all(after[h] not in (0, before[h]) for h in eps), (before, after)
    assert all(completes(ep) for ep in eps.values())
    dark = [p for p in polls if not any(p.values())]
    assert polls and not dark, f"{len(dark)} of {len(polls)} polls got no completion"
    # The polls did overlap the restarts: each replica was seen down while the other served.
    for host in eps:
        assert any(not p[host] and any(p.values()) for p in polls), (host, polls)
    print(f"{len(polls)} polls during the rolling upgrade; every one got a completion")
