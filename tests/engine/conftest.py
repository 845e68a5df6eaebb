"""Fixtures for the tests that run a real vLLM CPU engine (marker `engine`)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import ci_gate, harness
from support.paths import REPO as REPO_ROOT

TOOLS = REPO_ROOT / "tools"  # make_tiny_models.py, shared with the deploy and molecule

# Filled by the engine fixtures, printed at the end of the run (start times, memory).
ENGINE_REPORT: list[str] = []


def require(ok: bool, reason: str) -> None:
    ci_gate.require(ok, reason, "engine tests")


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    venv = harness.vllm_venv()
    ready = (venv / ".vfleet-ready").is_file() and (venv / "bin" / "vllm").is_file()
    require(ready, f"vLLM CPU venv {venv} missing or incomplete; run `make engine`")
    return venv


@pytest.fixture(scope="session")
def tiny_models(vllm_venv: Path) -> Path:
    out = Path(os.environ.get("VFLEET_CACHE", "/var/cache/vfleet")) / "tiny-models"
    proc = subprocess.run(
        [str(vllm_venv / "bin" / "python"), str(TOOLS / "make_tiny_models.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"make_tiny_models.py failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return out


@pytest.fixture(scope="session")
def vfleet_cli() -> Path:
    cli = REPO_ROOT / ".venv" / "bin" / "vfleet"
    require(cli.is_file(), f"{cli} missing; run `make setup`")
    return cli


@pytest.fixture(scope="session")
def engine_report() -> Iterator[list[str]]:
    yield ENGINE_REPORT


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if ENGINE_REPORT:
        terminalreporter.section("vLLM CPU engine runs")
        for line in ENGINE_REPORT:
            terminalreporter.write_line(line)
