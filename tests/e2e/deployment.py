"""What the deploy tests share: the repository, `make`, and ways to look at and disturb the
local deployment (its test hosts, engines and endpoints) from the controller."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from support import ci_gate
from support.paths import REPO

ARTIFACTS = REPO / "artifacts" / "local"
TESTBED = "local"  # terraform/envs/local's testbed_name
RUN_DIR = Path(os.environ.get("VFLEET_TESTBED_RUN", "/run/vfleet-testbed")) / TESTBED
# The only namespace with a way onto the hosts' bridge (the engines listen there).
CONTROLLER_NETNS = f"vtb.{TESTBED}.ctl"


def require_root_and_nspawn() -> None:
    ok = os.geteuid() == 0 and shutil.which("systemd-nspawn") is not None
    if ok:
        return
    ci_gate.require(False, "make deploy needs root and systemd-nspawn (test hosts)")


def make(
    *args: str, timeout: int = 1800, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def recaps(log: Path) -> dict[str, int]:
    """host -> changed count from an ansible-playbook log's PLAY RECAP."""
    return {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)", log.read_text(), re.M)
    }


def vfleet(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "vfleet"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_testbed(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "testbed"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def ssh(
    host: str, command: str, stdin: str = "", timeout: int = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh", "-F", str(RUN_DIR / "ssh_config"), host, command],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def endpoints() -> dict[str, dict[str, Any]]:
    """The rendered endpoints by the host that serves them (one engine per host here)."""
    data = json.loads((ARTIFACTS / "launch" / "endpoints.json").read_text())
    return {ep["host"]: ep for ep in data["endpoints"]}


def main_pid(endpoint: dict[str, Any]) -> int:
    """The engine unit's main PID on its host; 0 when it is not running."""
    unit = f"vfleet-vllm-{endpoint['engine']}.service"
    out = ssh(endpoint["host"], f"systemctl show --property=MainPID --value {unit}")
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip() or 0)


def _api_key() -> str | None:
    """The key the deploy made for the local endpoints, if the environment uses one."""
    group_vars = yaml.safe_load((REPO / "inventories/local/group_vars/all.yml").read_text())
    name = group_vars.get("vfleet_api_key_file")
    path = REPO / name if name else None
    return path.read_text().strip() if path and path.is_file() else None


def _curl(
    url: str, timeout: float, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    curl = ["curl", "-sS", "--max-time", str(timeout), *args, url]
    return subprocess.run(
        ["ip", "netns", "exec", CONTROLLER_NETNS, *curl],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout + 10,
        check=False,
    )


def healthy(endpoint: dict[str, Any], timeout: float = 5) -> bool:
    out = _curl(endpoint["health"], timeout, "-o", "/dev/null", "-w", "%{http_code}")
    return out.stdout.strip() == "200"


def completes(endpoint: dict[str, Any], timeout: float = 30) -> bool:
    """The endpoint answered a real completion with generated text."""
    body = {"model": endpoint["model"], "prompt": "The capital of France is", "max_tokens": 8}
    key = _api_key()
    # The key goes in on stdin (-H @-), never on a command line.
    out = _curl(
        f"{endpoint['url']}/completions",
        timeout,
        "-H",
        "@-",
        "-d",
        json.dumps({**body, "temperature": 0}),
        stdin="Content-Type: application/json\n"
        + (f"Authorization: Bearer {key}\n" if key else ""),
    )
    try:
        reply = json.loads(out.stdout)
        text, tokens = reply["choices"][0]["text"], reply["usage"]["completion_tokens"]
    except (ValueError, KeyError, IndexError, TypeError):
        return False
    return isinstance(text, str) and tokens > 0


def completion_status(url: str, model: str, key: str | None, timeout: float = 30) -> int:
    """HTTP status of a completion request sent with `key` (none: no Authorization)."""
    body = json.dumps({"model": model, "prompt": "hi", "max_tokens": 2})
    out = _curl(
        f"{url}/completions",
        timeout,
        *("-o", "/dev/null", "-w", "%{http_code}", "-H", "@-", "-d", body),
        stdin="Content-Type: application/json\n"
        + (f"Authorization: Bearer {key}\n" if key else ""),
    )
    return int(out.stdout.strip() or 0)


def wait_serving(endpoint: dict[str, Any], bound_s: float) -> float:
    """Seconds until the endpoint answers /health and a completion; fails past bound_s."""
    start = time.monotonic()
    while time.monotonic() - start < bound_s:
        if healthy(endpoint) and completes(endpoint):
            return time.monotonic() - start
        time.sleep(2)
    pytest.fail(f"{endpoint['engine']} on {endpoint['host']} did not serve within {bound_s:.0f} s")


def _poll_until(stop: threading.Event, polls: list[dict[str, bool]]) -> None:
    eps = endpoints()
    with ThreadPoolExecutor(len(eps)) as pool:
        while not stop.is_set():
            polls.append(dict(zip(eps, pool.map(completes, eps.values()), strict=True)))
            stop.wait(1.0)


def polled(run: Any) -> tuple[Any, list[dict[str, bool]]]:
    """`run()`'s result, and what a completion sent to each endpoint every second while it
    ran got: host -> whether it completed, one dict per round."""
    polls: list[dict[str, bool]] = []
    stop = threading.Event()
    poller = threading.Thread(target=_poll_until, args=(stop, polls), daemon=True)
    poller.start()
    try:
        result = run()
    finally:
        stop.set()
        poller.join(timeout=120)
    return result, polls
