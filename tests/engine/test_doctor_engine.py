"""`vfleet doctor` against a real vLLM CPU engine driven into each condition on purpose:
queueing (max-num-seqs 1), KV pressure (a pinned KV of 16 blocks), prefill interference
(bursts of long prompts with chunked prefill off), and under-use (an idle server)."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import subprocess
import threading
import time
import urllib.parse

import pytest

from support.harness import VllmServer
from support.paths import REPO

# The conditions are driven by timing on a shared 2-core machine (a busy API server can
# answer /metrics seconds late): a run that misses its window is repeated, up to twice; a
# diagnosis that never appears still fails.
pytestmark = [pytest.mark.engine, pytest.mark.flaky(reruns=2)]

VFLEET = REPO / ".venv" / "bin" / "vfleet"


def _complete(
    base: str,
    prompt_ids: list[int],
    max_tokens: int,
    timeout: float = 180,
    opened: list[http.client.HTTPConnection] | None = None,
) -> None:
    """One completion. With `opened`, its connection is listed there so that a feeder can
    cut it (vLLM aborts a request whose client went away), and a cut is not an error."""
    body = json.dumps(
        {
            "model": "tiny",
            "prompt": prompt_ids,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0,
        }
    )
    url = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=timeout)
    if opened is not None:
        opened.append(conn)
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        reply.read()
        if reply.status != 200:
            raise AssertionError(f"completion failed: HTTP {reply.status}")
    except (OSError, http.client.HTTPException):
        if opened is None:
            raise
    finally:
        conn.close()


def _load(
    base: str,
    jobs: list[tuple[list[int], int]],
    stagger_s: float = 0.0,
    opened: list[http.client.HTTPConnection] | None = None,
) -> list[threading.Thread]:
    threads = []
    for prompt, tokens in jobs:
        t = threading.Thread(
            target=_complete, args=(base, prompt, tokens, 180, opened), daemon=True
        )
        t.start()
        threads.append(t)
        if stagger_s:
            time.sleep(stagger_s)
    return threads


def _wait_for(server: VllmServer, metric: str, timeout_s: float = 60) -> None:
    """Until the engine reports the metric above zero (requests really queued)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in server.metrics_text().splitlines():
            if line.startswith(metric) and float(line.rsplit(" ", 1)[1]) > 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"{metric} never rose above zero")


def _doctor(server: VllmServer, *extra: str) -> dict:
    out = subprocess.run(
        [
            str(VFLEET),
            "doctor",
            "--endpoint",
            server.base_url,
            "--log",
            str(server.log_path),
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _ids(report: dict) -> list[str]:
    return [d["id"] for d in report["diagnoses"]]


class _Feeder:
    """Keeps requests coming until stopped: /metrics can lag seconds behind a busy API
    server on 2 cores, so the condition must outlast the scrape, not a fixed batch. When it
    stops it cuts the connections of the requests still in flight (vLLM aborts them), so
    the test does not wait for a queue it built on purpose to drain."""

    def __init__(
        self, base: str, job: tuple[list[int], int], in_flight: int, every_s: float = 0.0
    ) -> None:
        self.base, self.job, self.in_flight, self.every_s = base, job, in_flight, every_s
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.opened: list[http.client.HTTPConnection] = []
        self.loop = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            alive = sum(t.is_alive() for t in self.threads)
            if alive < self.in_flight:
                self.threads += _load(
                    self.base, [self.job] * (self.in_flight - alive), opened=self.opened
                )
            time.sleep(self.every_s or 0.1)

    def __enter__(self) -> _Feeder:
        self.loop.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.loop.join()
        # Cut again while any is alive: a request may connect just after a pass.
        deadline = time.monotonic() + 120
        while any(t.is_alive() for t in self.threads) and time.monotonic() < deadline:
            for conn in list(self.opened):
                if conn.sock is not None:
                    with contextlib.suppress(OSError):  # already closed
                        conn.sock.shutdown(socket.SHUT_RDWR)
            time.sleep(0.2)


class _Bursts:
    """Sends `size` copies of a job at once, waits for them, then pauses twice as long as
    they took, until stopped: the share of engine time spent on the bursts stays near a
    third whatever the machine's speed."""

    def __init__(self, base: str, job: tuple[list[int], int], size: int) -> None:
        self.base, self.job, self.size = base, job, size
        self.done = 0
        self.stop = threading.Event()
        self.loop = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            for t in _load(self.base, [self.job] * self.size):
                t.join(timeout=180)
            self.done += 1
            self.stop.wait(2 * (time.monotonic() - started))

    def __enter__(self) -> _Bursts:
        self.loop.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.loop.join(timeout=240)


def test_queueing_then_under_use(vllm_venv, tiny_models, tmp_path):
    with VllmServer(
        tiny_models / "tiny-llama",
        venv=vllm_venv,
        kv_cache_memory_bytes=64 << 20,
        max_num_seqs=1,
        run_dir=tmp_path / "q",
    ) as server:
        # Four in flight: three wait behind max-num-seqs 1. More only slow the API server's
        # /metrics on two cores (with 16 the doctor's 2 s watch took 40 s to 2 min).
        with _Feeder(server.base_url, ([7] * 32, 470), in_flight=4):
            _wait_for(server, "vllm:num_requests_waiting")
            report = _doctor(server, "--watch", "2")
        assert "queueing" in _ids(report), report
        queueing = next(d for d in report["diagnoses"] if d["id"] == "queueing")
        assert "max-num-seqs" in queueing["first_knob"]
        assert report["config"]["max_num_seqs"] == 1  # read from the start-up log
        idle = _doctor(server, "--max-num-seqs", "16")
        assert _ids(idle) == ["under_use"], idle


def test_kv_pressure_preempts_and_names_the_cap(vllm_venv, tiny_models, tmp_path):
    # 16 blocks of 128 tokens: 2,048 tokens for 12 sequences of ~330 tokens each.
    with VllmServer(
        tiny_models / "tiny-llama",
        venv=vllm_venv,
        kv_cache_memory_bytes=16 * 128 * 512,
        max_num_seqs=12,
        run_dir=tmp_path / "kv",
    ) as server:
        threads = _load(server.base_url, [([9] * 64, 260)] * 12)
        for t in threads:
            t.join(timeout=300)
        report = _doctor(server, "--max-num-seqs", "12")
        assert "kv_pressure" in _ids(report), report
        obs = report["observation"]
        assert obs["preemptions"] > 0 and obs["num_gpu_blocks"] == 16
        knob = next(d for d in report["diagnoses"] if d["id"] == "kv_pressure")["first_knob"]
        assert f"to {report['kv_cap']}" in knob and report["kv_cap"] < 12


def test_long_prompts_without_chunked_prefill_stall_decoding(vllm_venv, tiny_models, tmp_path):
    with VllmServer(
        tiny_models / "tiny-llama",
        venv=vllm_venv,
        kv_cache_memory_bytes=64 << 20,
        max_model_len=2048,
        max_num_seqs=64,
        run_dir=tmp_path / "pf",
        extra_args=["--no-enable-chunked-prefill", "--max-num-batched-tokens", "65536"],
    ) as server:
        # Decode streams run while bursts of long one-token prompts land whole in single
        # steps (no chunking). Each burst is followed by a pause twice its own length, so a
        # few percent of the streams' inter-token gaps carry a prefill on an idle machine
        # and on a busy one alike: the tail stretches while the median stays a decode step.
        # (A feeder that keeps prompts always in flight puts a prefill in every step, and
        # then the median stalls too.)
        with _Bursts(server.base_url, ([11] * 1900, 1), size=8) as bursts:
            while bursts.done < 4:
                for t in _load(server.base_url, [([3] * 16, 200)] * 4):
                    t.join(timeout=240)
        report = _doctor(server)
        assert "prefill_interference" in _ids(report), json.dumps(report["observation"])
        knob = next(d for d in report["diagnoses"] if d["id"] == "prefill_interference")[
            "first_knob"
        ]
        assert "--enable-chunked-prefill" in knob


def test_unreachable_and_non_vllm_endpoints_exit_2(tmp_path):
    import http.server
    import socketserver

    out = subprocess.run(
        [str(VFLEET), "doctor", "--endpoint", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2 and "cannot reach" in out.stderr

    class Plain(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"# HELP up\nup 1\n" if self.path == "/metrics" else b""
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with socketserver.TCPServer(("127.0.0.1", 0), Plain) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        port = httpd.server_address[1]
        out = subprocess.run(
            [str(VFLEET), "doctor", "--endpoint", f"http://127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        httpd.shutdown()
    assert out.returncode == 2 and "no vllm: series" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
