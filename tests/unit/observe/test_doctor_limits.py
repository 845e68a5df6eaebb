"""`vfleet doctor` against endpoints and logs that never end: a /metrics server that trickles,
one that streams without end, a page of too many series, and --log on a FIFO or a device.
Each must end in one line and exit 2, quickly; the servers are real, on 127.0.0.1."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from support.cli_run import Result, vfleet
from support.hostile import assert_one_line
from support.metrics_server import prometheus_headers, serve
from vfleet.cli import doctor_command as cli_doctor
from vfleet.errors import UserError
from vfleet.observe import metrics, scrape

GOOD = 'vllm:num_requests_running{engine="0"} 3\nvllm:num_requests_waiting{engine="0"} 0\n'

# A trickle lasts TRICKLE_BYTES * 0.5 s, past the tests' 1.5 s deadline: without the
# deadline a test fails on its timing instead of hanging the suite.
TRICKLE_BYTES = 8


def _trickle(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    prometheus_headers(handler)
    for byte in GOOD.encode()[:TRICKLE_BYTES]:
        if stop.wait(0.5):
            return
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()


def _endless(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    prometheus_headers(handler)
    line = b"vllm:num_requests_running 1\n" * 4096
    while not stop.is_set():
        handler.wfile.write(line)


def _trickled_headers(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    """The status line itself a byte at a time: no body read has started yet."""
    for byte in b"HTTP/1.0 200 OK\r\n"[:TRICKLE_BYTES]:
        if stop.wait(0.5):
            return
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()


def _many_series(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    page = "".join(f'vllm:num_requests_running{{engine="{i}"}} 1\n' for i in range(100))
    prometheus_headers(handler)
    handler.wfile.write(page.encode())


def _good(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    prometheus_headers(handler)
    handler.wfile.write(GOOD.encode())


@pytest.fixture
def trickle() -> Iterator[str]:
    yield from serve(_trickle)


@pytest.fixture
def endless() -> Iterator[str]:
    yield from serve(_endless)


@pytest.fixture
def trickled_headers() -> Iterator[str]:
    yield from serve(_trickled_headers)


@pytest.fixture
def many_series() -> Iterator[str]:
    yield from serve(_many_series)


@pytest.fixture
def good() -> Iterator[str]:
    yield from serve(_good)


def _timed(*args: str) -> tuple[Result, float]:
    start = time.monotonic()
    result = vfleet(*args)
    return result, time.monotonic() - start


def _refused(result: Result, *says: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout[-300:], result.stderr[-300:])
    line = result.stderr.strip()
    assert_one_line(line)
    assert line.startswith("vfleet: error: "), line
    for part in says:
        assert part in line, line
    return line


@pytest.fixture
def short_deadline(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(scrape, "FETCH_DEADLINE_S", 1.5)
    return 1.5


def test_a_server_that_trickles_its_body_is_cut_at_the_deadline(
    trickle: str, short_deadline: float
) -> None:
    result, took = _timed("doctor", "--endpoint", trickle)
    _refused(result, f"{trickle}/metrics did not finish sending in 1.5 s")
    assert short_deadline <= took < short_deadline + 1.5, took


def test_a_server_that_trickles_its_headers_is_cut_at_the_deadline(
    trickled_headers: str, short_deadline: float
) -> None:
    """The deadline holds before urlopen returns, where no body chunk is read."""
    result, took = _timed("doctor", "--endpoint", trickled_headers)
    _refused(result, f"{trickled_headers}/metrics did not finish sending")
    assert short_deadline <= took < short_deadline + 1.5, took


def test_an_endless_stream_is_cut_at_the_byte_cap(endless: str) -> None:
    result, took = _timed("doctor", "--endpoint", endless, "--json")
    _refused(result, f"{endless}/metrics sent more than 16 MiB", "point --endpoint at")
    assert result.stdout == ""
    assert took < 10, took


def test_a_page_of_too_many_series_is_refused(
    many_series: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "MAX_SAMPLES", 50)
    result, took = _timed("doctor", "--endpoint", many_series)
    _refused(result, f"{many_series}/metrics has more than 50 samples")
    assert took < 5, took


def test_the_series_cap_lets_a_page_at_the_cap_through(
    many_series: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "MAX_SAMPLES", 100)
    result = vfleet("doctor", "--endpoint", many_series, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["observation"]["running"] == 100


def test_a_page_of_family_headers_alone_is_capped_by_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HELP/TYPE lines hold no sample but cost the parser as much: they count too."""
    monkeypatch.setattr(metrics, "MAX_SAMPLES", 1000)
    headers = "".join(f"# TYPE x{i} gauge\n" for i in range(3998))
    assert metrics.parse([GOOD + headers]).values["running"] == 3  # 4,000 lines: at the cap
    refused = r"^http://h:1/metrics has more than 1,000 samples \(or 4,000 lines\)"
    with pytest.raises(UserError, match=refused):
        metrics.parse([GOOD + headers + "# TYPE y gauge\n"], ["http://h:1"])


def test_a_server_within_the_limits_is_read(good: str) -> None:
    result = vfleet("doctor", "--endpoint", good, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["observation"]["running"] == 3


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "vllm.log"
    os.mkfifo(path)
    return path


def test_a_log_that_is_a_fifo_is_refused_at_once(fifo: Path) -> None:
    result, took = _timed("doctor", "--log", str(fifo))
    _refused(result, f"log {fifo} is a named pipe (FIFO), not a regular file")
    assert took < 2, took


def test_a_log_that_is_dev_zero_is_refused_at_once() -> None:
    result, took = _timed("doctor", "--log", "/dev/zero")
    _refused(result, "log /dev/zero is a device, not a regular file")
    assert took < 2, took


def test_a_big_log_keeps_its_last_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past LOG_TAIL_BYTES the start of the log is dropped: the last restart is what counts."""
    monkeypatch.setattr(cli_doctor, "LOG_TAIL_BYTES", 4096)
    log = tmp_path / "vllm.log"
    late = "non-default args: {'max_num_seqs': 7}\n"
    early = "non-default args: {'max_num_batched_tokens': 4096}\n"
    log.write_text(early + "x" * 10_000 + "\n" + late)
    result = vfleet("doctor", "--log", str(log), "--json")
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)["config"]
    assert config["max_num_seqs"] == 7 and config["max_num_batched_tokens"] is None


def test_a_missing_log_is_one_line(tmp_path: Path) -> None:
    result = vfleet("doctor", "--log", str(tmp_path / "gone.log"))
    _refused(result, "gone.log does not exist")
