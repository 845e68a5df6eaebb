"""Secrets on the local default deploy: the API key lives in a 0600 file on the controller
and in a root:vllm 0640 file on the hosts, the engines refuse requests without it, and its
value appears in no log and no artifact: not in the deploy's output, not under
artifacts/local, not in the hosts' journals, not on a process command line."""

from __future__ import annotations

import pytest

from .deployment import ARTIFACTS, REPO, completion_status, endpoints, ssh

pytestmark = pytest.mark.testbed

KEY_FILE = REPO / ".secrets" / "local" / "api-key"


def _on_host(host: str, command: str) -> str:
    out = ssh(host, command, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_key_is_private_on_the_controller_and_the_hosts(deployed):
    assert deployed.returncode == 0, deployed.stdout[-2000:]
    assert KEY_FILE.stat().st_mode & 0o777 == 0o600
    for host in ("h1", "h2"):
        mode = _on_host(host, "stat -c '%a %U %G' /etc/vfleet/secrets/api-key").split()
        assert mode == ["640", "root", "vllm"], (host, mode)


def test_the_engines_refuse_requests_without_the_key(deployed):
    assert deployed.returncode == 0
    key = KEY_FILE.read_text().strip()
    eps = list(endpoints().values())
    assert eps
    for ep in eps:
        assert completion_status(ep["url"], ep["model"], None) == 401, ep["url"]
        assert completion_status(ep["url"], ep["model"], "not-the-key") == 401, ep["url"]
        assert completion_status(ep["url"], ep["model"], key) == 200, ep["url"]


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
