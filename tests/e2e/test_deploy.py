"""`make deploy` then `make destroy` on the local default, for real: two test hosts, the
whole Ansible rollout, a real vLLM CPU engine per host, the load test and the report; then
a second deploy that must change and restart nothing; then destroy, which must leave
nothing behind. Slow (about 8 minutes on 2 cores); CI runs it, never skips it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.testbed

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts" / "local"


def _require_root_and_nspawn() -> None:
    ok = os.geteuid() == 0 and shutil.which("systemd-nspawn") is not None
    if ok:
        return
    reason = "make deploy needs root and systemd-nspawn (test hosts)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: never skipped)", pytrace=False)
    pytest.skip(reason)


def _make(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )


def _recaps(log: Path) -> dict[str, int]:
    """host -> changed count from an ansible-playbook log's PLAY RECAP."""
    return {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)", log.read_text(), re.M)
    }


@pytest.fixture(scope="module")
def deployed():
    _require_root_and_nspawn()
    _make("destroy")  # a clean start, whatever an earlier run left
    first = _make("deploy")
    yield first
    _make("destroy")


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
    assert re.search(r"Endpoint engine-0: http://10\.213\.0\.\d+:8000/v1", out)
    assert "Phases:" in out and "total" in out
    plan = json.loads((ARTIFACTS / "plan.json").read_text())
    assert plan["replicas"] == 2 and plan["tensor_parallel_size"] == 1  # one engine per host
    results = [
        json.loads(p.read_text())
        for p in (ARTIFACTS / "report" / "loadtest").rglob("*.json")
        if "completed" in p.read_text()
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
    ):
        assert (report / name).is_file(), name
    assert (report / "kv_budget.png").read_bytes()[:4] == b"\x89PNG"


def test_second_deploy_changes_and_restarts_nothing(deployed):
    assert deployed.returncode == 0
    second = _make("deploy")
    assert second.returncode == 0, second.stdout[-3000:]
    for book in ("standins-local", "site", "launch", "loadtest"):
        recaps = _recaps(ARTIFACTS / "logs" / f"{book}.log")
        assert recaps and set(recaps.values()) == {0}, (book, recaps)
    assert "reusing artifacts/local/facts" in second.stdout


def test_destroy_leaves_nothing(deployed):
    assert deployed.returncode == 0
    out = _make("destroy")
    assert out.returncode == 0, out.stdout[-2000:]
    status = subprocess.run(
        [str(REPO / ".venv" / "bin" / "testbed"), "status"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "no testbeds" in status.stdout
    assert not ARTIFACTS.exists()
    netns = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=False
    ).stdout
    assert "vtb.local" not in netns
