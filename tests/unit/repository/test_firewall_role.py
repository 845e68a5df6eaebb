"""The firewall role's pieces that run without a test host: the helper it runs on each host
(ansible/roles/firewall/files/vfleet_firewall.py) and its nftables template, checked by the
real `nft -c` in a throwaway network namespace."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jinja2
import pytest
import yaml

from support import ci_gate
from support.paths import REPO

ROLE = REPO / "ansible" / "roles" / "firewall"


def _helper() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "vfleet_firewall", ROLE / "files" / "vfleet_firewall.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["vfleet_firewall"] = module
    spec.loader.exec_module(module)
    return module


fw = _helper()


@pytest.fixture
def range_file(tmp_path: Path) -> Path:
    path = tmp_path / "ip_local_port_range"
    path.write_text("32768\t60999\n")
    return path


def test_ports_merge_and_ephemeral_is_the_hosts_range() -> None:
    ports = ["29501", 8000, "ephemeral", "40000-40010", "8001", "ephemeral", "10002-10999", 10001]
    assert fw.merge_ports(ports, (32768, 60999)) == [
        "8000-8001",
        "10001-10999",
        "29501",
        "32768-60999",
    ]


@pytest.mark.parametrize("bad", ["0", "70000", "9-3", "http", "1,2"])
def test_bad_ports_are_refused(bad: str) -> None:
    with pytest.raises(fw.Refused):
        fw.merge_ports([bad], (32768, 60999))


def test_sources_split_by_family_and_collapse() -> None:
    out = fw.split(["10.0.0.0/24", "10.0.0.7", "10.0.1.0/24", "::/0", "fd00::1", "localhost"])
    assert out["v4"] == ["10.0.0.0/23", "127.0.0.1/32"]
    assert out["v6"] == ["::/0"]
    with pytest.raises(fw.Refused):
        fw.split(["not a host.invalid"])


def test_the_controllers_ssh_must_survive() -> None:
    sources = fw.split(["10.213.0.0/24"])
    assert fw.check_controller(("10.213.0.2", 22), 22, sources) == "10.213.0.2"
    assert fw.check_controller(("::ffff:10.213.0.2", 22), 22, sources) == "10.213.0.2"
    assert fw.check_controller(None, 22, sources) is None  # not over SSH
    with pytest.raises(fw.Refused, match="not in firewall_ssh_sources"):
        fw.check_controller(("192.168.1.5", 22), 22, sources)
    with pytest.raises(fw.Refused, match="port 22 but firewall_ssh_port is 2222"):
        fw.check_controller(("10.213.0.2", 22), 2222, sources)


def test_ssh_connection_is_found_in_an_ancestor(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        f"import sys; sys.path.insert(0, {str(ROLE / 'files')!r})\n"
        "import vfleet_firewall\n"
        "print(vfleet_firewall.ssh_connection())\n"
    )
    # The shell has SSH_CONNECTION, the python it starts does not (as under sudo).
    inner = f"unset SSH_CONNECTION; {shlex.quote(sys.executable)} {shlex.quote(str(probe))}"
    out = subprocess.run(
        ["sh", "-c", f"sh -c {shlex.quote(inner)}; true"],
        env={**os.environ, "SSH_CONNECTION": "10.9.8.7 50000 10.9.8.1 2222"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "('10.9.8.7', 2222)"


def test_plan_end_to_end(range_file: Path) -> None:
    request = {
        "ssh_port": 22,
        "guard": True,
        "range_file": str(range_file),
        "sources": {"ssh": ["10.213.0.0/24"], "api": ["10.213.0.13"], "cluster": ["10.213.0.11"]},
        "ports": {"api": [8000], "cluster": ["6379", "ephemeral"]},
    }
    out = fw.plan(request, ("10.213.0.2", 22))
    assert out["ports"] == {"api": ["8000"], "cluster": ["6379", "32768-60999"]}
    assert out["sources"]["api"] == {"v4": ["10.213.0.13/32"], "v6": []}
    assert out["ephemeral"] == "32768-60999" and out["controller"] == "10.213.0.2"
    request["guard"] = False
    assert fw.plan(request, ("192.0.2.1", 22))["controller"] is None


def test_the_helper_exits_2_with_one_line(range_file: Path) -> None:
    request = {
        "ssh_port": 22,
        "range_file": str(range_file),
        "sources": {"ssh": ["10.0.0.0/8"], "api": [], "cluster": []},
        "ports": {"api": ["nope"], "cluster": []},
    }
    out = subprocess.run(
        [sys.executable, str(ROLE / "files" / "vfleet_firewall.py"), json.dumps(request)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr


# --- the template, checked by nft ------------------------------------------------------------


def _render(**overrides: Any) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLE / "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,  # as Ansible's template module
        keep_trailing_newline=True,
    )
    env.filters["bool"] = lambda v: (
        v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes")
    )
    context: dict[str, Any] = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    context.update(
        ansible_managed="Ansible managed",
        _firewall_rendered={
            "api": [{"engine": "engine-0", "port": 8000}],
            "cluster": [
                {"engine": "engine-0", "ports": "6379", "why": "Ray GCS"},
                {"engine": "engine-0", "ports": "ephemeral", "why": "NCCL"},
            ],
            "peers": ["10.213.0.12"],
        },
        _firewall_merged={
            "sources": {
                "ssh": {"v4": ["0.0.0.0/0"], "v6": ["::/0"]},
                "api": {"v4": ["10.213.0.11/32", "10.213.0.13/32"], "v6": []},
                "cluster": {"v4": ["10.213.0.11/32", "10.213.0.12/32"], "v6": ["fd00::/64"]},
            },
            "ports": {"api": ["8000"], "cluster": ["6379", "32768-60999"]},
            "ephemeral": "32768-60999",
            "controller": "10.213.0.2",
        },
    )
    context.update(overrides)
    return env.get_template("nftables.conf.j2").render(context)


def _nft(*args: str) -> subprocess.CompletedProcess[str]:
    nft = shutil.which("nft") or "/usr/sbin/nft"
    ok = os.geteuid() == 0 and Path(nft).exists() and shutil.which("unshare")
    if not ok:
        ci_gate.require(False, "nft -c needs root, nft and unshare")
    return subprocess.run(
        ["unshare", "--net", nft, *args], capture_output=True, text=True, timeout=30, check=False
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"firewall_enabled": False},
        {"firewall_extra_rules": ['tcp dport 9100 ip saddr 10.0.0.5 accept comment "exporter"']},
        {"firewall_allow_probe": True, "firewall_cluster_ports": ["7000-7010"]},
    ],
    ids=["enabled", "disabled", "extra-rules", "probe"],
)
def test_the_ruleset_passes_nft_check(tmp_path: Path, overrides: dict[str, Any]) -> None:
    conf = tmp_path / "nftables.conf"
    conf.write_text(_render(**overrides))
    out = _nft("-c", "-f", str(conf))
    assert out.returncode == 0, out.stderr + conf.read_text()


def test_the_loaded_ruleset_drops_by_default_and_opens_what_was_asked(tmp_path: Path) -> None:
    conf = tmp_path / "nftables.conf"
    conf.write_text(_render())
    # Load twice, then list, in one namespace: the second load replaces the table in place.
    script = f"nft -f {conf} && nft -f {conf} && nft list ruleset"
    nft_dir = str(Path(shutil.which("nft") or "/usr/sbin/nft").parent)
    _nft("--version")  # skips, or fails under CI, without the tools
    out = subprocess.run(
        ["unshare", "--net", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, "PATH": f"{nft_dir}:{os.environ.get('PATH', '')}"},
    )
    assert out.returncode == 0, out.stderr
    ruleset = out.stdout
    assert ruleset.count("table inet vfleet") == 1
    assert "policy drop;" in ruleset
    assert "tcp dport 22 ip saddr @ssh_v4 accept" in ruleset
    assert "tcp dport 8000 ip saddr @api_v4 accept" in ruleset
    assert "tcp dport { 6379, 32768-60999 } ip saddr @cluster_v4 accept" in ruleset
    assert "10.213.0.12" in ruleset
