"""What the loadtest role leaves behind, checked over SSH and on the controller."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

RUNS = "/var/lib/vfleet/loadtest"
PROMPTS, OUTPUT_LEN = 16, 32  # converge.yml
SWEEP = {1: 4, 4: 8}  # converge.yml: level -> requests (2 rounds, at least 4)
ROUTED = 4  # converge.yml's second play, through the router


@pytest.fixture(scope="module")
def scenario(host: Any) -> dict[str, Any]:
    return host.ansible.get_variables()


@pytest.fixture(scope="module")
def result(scenario: dict[str, Any]) -> dict[str, Any]:
    path = Path(scenario["loadtest_test_work"]) / "report" / "molecule" / "engine-0.json"
    return dict(json.loads(path.read_text()))


def test_every_request_completed(result: dict[str, Any]) -> None:
    assert result["num_prompts"] == PROMPTS
    assert result["completed"] == PROMPTS
    assert result["failed"] == 0
    assert result["max_concurrency"] == 4
    assert result["total_output_tokens"] == PROMPTS * OUTPUT_LEN
    assert result["vfleet_engine"] == "engine-0"
    assert result["vfleet_run_id"] == "molecule"
    assert result["vfleet_load_host"] == "h1"


def test_summary_reached_the_controller(scenario: dict[str, Any]) -> None:
    summary = Path(scenario["loadtest_test_work"]) / "report" / "molecule" / "engine-0.txt"
    assert re.search(rf"Successful requests:\s+{PROMPTS}\b", summary.read_text())


def test_the_engine_served_the_load_host(host: Any, scenario: dict[str, Any]) -> None:
    """The real engine's access log shows every request, from the host, with the key."""
    address = re.escape(host.ansible.get_variables()["ansible_host"])
    log = (Path(scenario["loadtest_test_work"]) / "engine" / "vllm.log").read_text()
    served = re.findall(rf'{address}:\d+ - "POST /v1/completions HTTP/1\.1" 200', log)
    # The measured prompts, the sweep's and the routed play's, plus the one request each
    # `vllm bench serve` run sends before them.
    runs = [PROMPTS, *SWEEP.values(), ROUTED]
    assert len(served) == sum(n + 1 for n in runs), log[-2000:]
    assert not re.search(rf'{address}:\d+ - "[A-Z]+ [^"]*" 401', log), "a request without the key"


def test_the_client_ran_from_the_bound_read_only_venv(host: Any, scenario: dict[str, Any]) -> None:
    """Nothing was installed on the host: vLLM is the controller's venv, mounted read-only."""
    venv = scenario["loadtest_test_venv"]
    assert not host.file("/opt/vfleet/vllm").exists
    options = host.run(f"findmnt -n -o OPTIONS --target {venv}").stdout.split(",")
    assert "ro" in options
    assert host.file(f"{venv}/bin/vllm").exists


def test_older_runs_were_pruned(host: Any) -> None:
    """loadtest_keep_runs 2: this run and the newest of the three older ones stay (the
    router play after it keeps 3, its own run besides those two)."""
    runs = sorted(host.run(f"ls -1 {RUNS}").stdout.split())
    assert runs == ["20250103T000000Z", "molecule", "molecule-pd"]
    for name in ("json", "txt"):
        assert host.file(f"{RUNS}/molecule/engine-0.{name}").exists


@pytest.mark.parametrize("level", sorted(SWEEP))
def test_each_sweep_level_ran_and_saved_its_metrics(scenario: dict[str, Any], level: int) -> None:
    """Each level's result and the engine's /metrics after it reached the controller."""
    run = Path(scenario["loadtest_test_work"]) / "report" / "molecule"
    result = json.loads((run / f"engine-0.sweep-c{level}.json").read_text())
    assert result["max_concurrency"] == level
    assert result["completed"] == result["num_prompts"] == SWEEP[level]
    assert result["vfleet_sweep_level"] == str(level)
    page = (run / f"engine-0.sweep-c{level}.prom").read_text()
    assert re.search(r"^vllm:num_preemptions_total\{", page, re.MULTILINE)


def test_through_a_router_only_the_router_is_loaded_and_each_pool_engine_is_read(
    scenario: dict[str, Any],
) -> None:
    """converge.yml's second play: a prefill/decode endpoints.json sends the load to its
    router alone, and keeps each pool engine's /metrics for the deploy report."""
    run = Path(scenario["loadtest_test_work"]) / "report" / "molecule-pd"
    assert sorted(p.name for p in run.glob("*.json")) == ["router.json"]
    result = json.loads((run / "router.json").read_text())
    assert result["completed"] == ROUTED and result["failed"] == 0
    assert result["vfleet_engine"] == "router" and result["vfleet_mode"] == "router"
    for engine in ("engine-prefill-0", "engine-0"):
        assert "vllm:prompt_tokens_total" in (run / f"{engine}.prom").read_text(), engine
