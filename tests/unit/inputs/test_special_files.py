"""Special files where a file belongs: every file argument, given a named pipe with no writer
or /dev/zero, is refused at once in one line naming what it is, not waited on or read
without end. A model folder whose config.json links to a pipe, a facts folder holding one
and the environment's ledger are refused the same way."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from support.cli_run import Result, vfleet
from support.hostile import assert_one_line
from support.paths import REPO
from vfleet.calibrate.points import read_ledger
from vfleet.errors import UserError

CLUSTER = str(REPO / "examples/clusters/1x8-h200.yaml")
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ALARM_S = 10
FAST_S = 3.0


class Hang(BaseException):
    """Raised by the alarm; a BaseException so main()'s last resort cannot swallow it."""


def _alarm(_signum: int, _frame: FrameType | None) -> None:
    raise Hang(f"no answer within {ALARM_S} s")


@pytest.fixture(scope="module")
def pipe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("special")
    path = folder / "pipe"
    os.mkfifo(path)
    yield path


def _timed(argv: list[str]) -> tuple[Result, float]:
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(ALARM_S)
    start = time.monotonic()
    try:
        result = vfleet(*argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return result, time.monotonic() - start


ESTIMATE = ["--layout", "TP1", "--input-len", "128", "--output-len", "16"]
COMMANDS: dict[str, list[str]] = {
    "budget --model": ["budget", "--model", "{F}", "--gpu", "H200"],
    "estimate --cluster": ["estimate", "--cluster", "{F}", "--model", MODEL, *ESTIMATE],
    "estimate --model": ["estimate", "--cluster", CLUSTER, "--model", "{F}", *ESTIMATE],
    "estimate --calibration": [
        "estimate",
        "--cluster",
        CLUSTER,
        "--model",
        MODEL,
        *ESTIMATE,
        "--calibration",
        "{F}",
    ],
    "plan --cluster": ["plan", "--cluster", "{F}", "--model", MODEL],
    "plan --model": ["plan", "--cluster", CLUSTER, "--model", "{F}"],
    "plan --workload": ["plan", "--cluster", CLUSTER, "--model", MODEL, "--workload", "{F}"],
    "plan --calibration": [
        "plan",
        "--cluster",
        CLUSTER,
        "--model",
        MODEL,
        "--calibration",
        "{F}",
    ],
    "render --plan": ["render", "--plan", "{F}", "--cluster", CLUSTER, "--out", "{OUT}"],
    "render --cluster": ["render", "--plan", "{PLAN}", "--cluster", "{F}", "--out", "{OUT}"],
    "doctor --log": ["doctor", "--log", "{F}"],
    "doctor --endpoints": ["doctor", "--endpoints", "{F}"],
    "doctor --plan": ["doctor", "--endpoint", "http://127.0.0.1:9", "--plan", "{F}"],
    "validate --inventory": ["validate", "--inventory", "{F}"],
}


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    made = vfleet("plan", "--cluster", CLUSTER, "--model", MODEL, "--out", str(path))
    assert made.returncode == 0, made.stderr
    return path


def _argv(command: str, special: Path | str, plan: Path, out: Path) -> list[str]:
    fill = {"{F}": str(special), "{PLAN}": str(plan), "{OUT}": str(out)}
    return [fill.get(arg, arg) for arg in COMMANDS[command]]


def _assert_refused(result: Result, took: float, kind: str) -> None:
    assert result.returncode == 2, (result.args, result.stdout[-500:], result.stderr[-500:])
    assert_one_line(result.stderr.strip())
    assert kind in result.stderr, result.stderr
    assert took < FAST_S, (result.args, took)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_named_pipe_is_refused_at_once(
    command: str, pipe: Path, plan_file: Path, tmp_path: Path
) -> None:
    result, took = _timed(_argv(command, pipe, plan_file, tmp_path / "out"))
    _assert_refused(result, took, "named pipe")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_dev_zero_is_refused_at_once(command: str, plan_file: Path, tmp_path: Path) -> None:
    result, took = _timed(_argv(command, "/dev/zero", plan_file, tmp_path / "out"))
    _assert_refused(result, took, "a device")
    assert not (tmp_path / "out").exists()


def test_a_model_folder_whose_config_links_to_a_pipe(pipe: Path, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").symlink_to(pipe)
    result, took = _timed(["budget", "--model", str(folder), "--gpu", "H200"])
    _assert_refused(result, took, "named pipe")


def test_a_facts_folder_holding_a_pipe(pipe: Path, plan_file: Path, tmp_path: Path) -> None:
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "gpu-0.json").symlink_to(pipe)
    argv = ["render", "--plan", str(plan_file), "--facts", str(facts), "--out", str(tmp_path / "o")]
    result, took = _timed(argv)
    _assert_refused(result, took, "named pipe")


@pytest.mark.parametrize("special", ["pipe", "/dev/zero"])
def test_the_ledger_as_a_special_file(special: str, pipe: Path) -> None:
    path = pipe if special == "pipe" else Path(special)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(ALARM_S)
    try:
        with pytest.raises(UserError) as refused:
            read_ledger(path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert_one_line(str(refused.value))
    assert "not a regular file" in str(refused.value)
