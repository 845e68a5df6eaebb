"""Secrets on the local default deploy: the API key lives in a 0600 file on the controller
and in a root:vllm 0640 file on the hosts, the engines refuse requests without it, and its
value appears in no log and no artifact: not in the deploy's output, not under
artifacts/local, not in the hosts' journals, not on a process command line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.testbed

REPO = Path(__file__).resolve().parents[2]
KEY_FILE = REPO / ".secrets" / "local" / "api-key"
ARTIFACTS = REPO / "artifacts" / "local"
SSH_CONFIG = Path("/run/vfleet-testbed/local/ssh_config")
CONTROLLER_NETNS = "vtb.local.ctl"


def _on_host(host: str, command: str) -> str:
    out = subprocess.run(
        ["ssh", "-F", str(SSH_CONFIG), host, command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _post(url: str, key: str | None) -> int:
    """HTTP status of a completion request sent from the controller's namespace."""
    body = json.dumps({"model": "tiny-llama", "prompt": "hi", "max_tokens": 2})
    auth = ["-H", f"Authorization: Bearer {key}"] if key else []
    curl = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"]
    curl += ["-H", "Content-Type: application/json", *auth, "-d", body, f"{url}/completions"]
    out = subprocess.run(
        ["ip", "netns", "exec", CONTROLLER_NETNS, *curl],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return int(out.stdout or 0)


def test_the_key_is_private_on_the_controller_and_the_hosts(deployed):
    assert deployed.returncode == 0, deployed.stdout[-2000:]
    assert KEY_FILE.stat().st_mode & 0o777 == 0o600
    for host in ("h1", "h2"):
        mode = _on_host(host, "stat -c '%a %U %G' /etc/vfleet/secrets/api-key").split()
        assert mode == ["640", "root", "vllm"], (host, mode)


def test_the_engines_refuse_requests_without_the_key(deployed):
    assert deployed.returncode == 0
    key = KEY_FILE.read_text().strip()
    endpoints = json.loads((ARTIFACTS / "launch" / "endpoints.json").read_text())["endpoints"]
    assert endpoints
    for ep in endpoints:
        assert _post(ep["url"], None) == 401, ep["url"]
        assert _post(ep["url"], "not-the-key") == 401, ep["url"]
        assert _post(ep["url"], key) == 200, ep["url"]


def test_the_key_appears_in_no_log_and_no_artifact(deployed):
    assert deployed.returncode == 0
    key = KEY_FILE.read_text().strip()
    assert len(key) >= 32
    assert key not in deployed.stdout and key not in deployed.stderr
    leaked = [
        str(path.relative_to(REPO))
        for path in ARTIFACTS.rglob("*")
        if path.is_file() and key.encode() in path.read_bytes()
    ]
    assert not leaked, f"the API key is in {leaked}"
    checked = sum(1 for p in ARTIFACTS.rglob("*.log") if p.is_file())
    assert checked >= 5  # the phase logs were there to search
    for host in ("h1", "h2"):
        # Searched here, not on the host: the key must not travel on a command line.
        journal = _on_host(host, "journalctl --no-pager -o cat")
        assert "vllm" in journal and key not in journal, f"the API key is in {host}'s journal"
        processes = _on_host(host, "ps -eo args")
        assert "vllm" in processes and key not in processes, host
