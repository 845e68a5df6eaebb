"""Every command's flags come from typed models (vfleet.documents.requests, vfleet.documents.render,
vfleet.cli.env_flags): the parser is generated from them (vfleet.cli.from_model), the
help shows the models' defaults, and what argparse parses validates back into the same
model."""

from __future__ import annotations

import argparse
import ast
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from support.cli_run import vfleet
from vfleet.budget import speculative
from vfleet.catalog.releases import DEFAULT_VERSION
from vfleet.cli import main as cli
from vfleet.cli.env_flags import (
    CalibrateFlags,
    DeployFlags,
    DestroyFlags,
    KnownHostsFlags,
    PreflightFlags,
    ValidateFlags,
)
from vfleet.cli.from_model import add_arguments, flag_values, from_namespace
from vfleet.documents.deploy import RENDER_FIELDS
from vfleet.documents.flag_types import Derived, NotAFlag
from vfleet.documents.render import MODELS_DIR, VLLM_BIN, RenderFlags, RenderOptions
from vfleet.documents.requests import BudgetFlags, DoctorFlags, EstimateFlags, PlanFlags

CLI_DIR = Path(cli.__file__).parent
COMMANDS = {command.name: command for command in cli.TABLE}
WITH_FLAGS = [command for command in cli.TABLE if command.flags]


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = cli._parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _option(name: str, field: FieldInfo) -> str | None:
    """The flag a field should get: its alias when spelt --flag, else --kebab-case."""
    if any(isinstance(m, NotAFlag) for m in field.metadata):
        return None
    if field.alias and field.alias.startswith("--"):
        return field.alias
    return "--" + (field.alias or name).replace("_", "-")


def _options(models: tuple[type[BaseModel], ...]) -> set[str]:
    return {
        option
        for model in models
        for name, field in model.model_fields.items()
        if (option := _option(name, field)) is not None
    }


@pytest.mark.parametrize("command", cli.TABLE, ids=lambda c: c.name)
def test_every_option_is_a_model_field_and_every_field_an_option(command):
    parser = _subparser(command.name)
    options = {
        option
        for action in parser._actions
        for option in action.option_strings
        if option not in ("-h", "--help")
    }
    assert options == _options(command.flag_models())


def test_start_up_imports_no_model():
    """`vfleet --help` and the parser of one command import only what they need: the
    models (and pydantic) load when a command runs, and then only its own."""
    code = (
        "import sys\n"
        "from vfleet.cli import main\n"
        "assert 'pydantic' not in sys.modules, 'pydantic at start-up'\n"
        "main._parser(['plan'])\n"
        "assert 'vfleet.documents.render' not in sys.modules, 'render options for plan'\n"
        "assert 'vfleet.cli.env_flags' not in sys.modules, 'environment flags for plan'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_no_flag_is_written_by_hand():
    """add_argument is called in one place, the generator; every other module declares
    its flags as model fields."""
    offenders = []
    for path in sorted(CLI_DIR.parent.rglob("*.py")):
        if path == CLI_DIR / "from_model.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr
                in ("add_argument", "add_argument_group", "add_mutually_exclusive_group")
            ):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def _default_text(field: FieldInfo) -> str | None:
    """What --help should say of the field's default, taken from the model."""
    derived = next((m for m in field.metadata if isinstance(m, Derived)), None)
    if derived is not None:
        return f"(default: {derived.text})"
    if field.is_required():
        return None
    default = field.get_default(call_default_factory=True)
    if default is None or isinstance(default, bool) or default in ([], ()):
        return None
    return f"(default {default:g})" if isinstance(default, float) else f"(default {default})"


@pytest.mark.parametrize("command", WITH_FLAGS, ids=lambda c: c.name)
def test_help_shows_each_default_from_the_model(command):
    out = vfleet(command.name, "--help", env={"COLUMNS": "400"})
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    expected = [
        (name, shown)
        for model in command.flag_models()
        for name, field in model.model_fields.items()
        if _option(name, field) and (shown := _default_text(field))
    ]
    missing = [(name, shown) for name, shown in expected if shown not in text]
    assert missing == []


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("budget", f"target vLLM release (default {DEFAULT_VERSION})"),
        ("plan", f"(default: the probed one, else {DEFAULT_VERSION})"),
        ("estimate", f"(default: the probed one, else {DEFAULT_VERSION})"),
        ("render", f"(default {VLLM_BIN})"),
        ("render", "(default 8000)"),
        ("render", f"(default: {MODELS_DIR}/<name>)"),
        ("preflight", "seconds to reach one host (default 10)"),
        ("deploy", "local | staging | prod (default local)"),
        ("doctor", "e.g. http://10.0.0.11:8000 (repeat)"),
        ("render", "KEY=VALUE (e.g. NCCL_DEBUG=INFO) (repeat)"),
    ],
)
def test_help_names_the_defaults_users_look_for(command, shown):
    out = vfleet(command, "--help", env={"COLUMNS": "400"})
    assert shown in " ".join(out.stdout.split())


# (command, model, values by the model's keys) for the round trip below.
SAMPLES: list[tuple[str, type[BaseModel], dict[str, Any]]] = [
    (
        "budget",
        BudgetFlags,
        {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "gpu": "H100-SXM-80GB",
            "tp": 2,
            "pp": 4,
            "enable_expert_parallel": True,
            "gpu_memory_utilization": 0.85,
            "kv_cache_dtype": "fp8",
            "block_size": 32,
            "cpu_offload_gb": 1.5,
            "vllm_version": "0.19.1",
            "speculative_method": "ngram",
            "num_speculative_tokens": 3,
            "plot": Path("sweep.png"),
            "json": True,
        },
    ),
    (
        "plan",
        PlanFlags,
        {
            "cluster": Path("c.yaml"),
            "model": "m",
            "workload": "rag",
            "layout": "TP8 PP2",
            "draft_model": "d",
            "out": Path("plan.json"),
        },
    ),
    (
        "estimate",
        EstimateFlags,
        {
            "cluster": Path("c.yaml"),
            "model": "m",
            "layout": "TP1 DP8 EP",
            "input_len": 1024,
            "output_len": 128,
            "concurrency": 64,
            "request_rate": 2.5,
            "dataset": "sharegpt",
            "max_num_seqs": 32,
            "speculative_method": "mtp",
            "calibration": Path("calibration.json"),
        },
    ),
    ("render", RenderFlags, {"plan": Path("p.json"), "facts": Path("f"), "out": Path("o")}),
    (
        "render",
        RenderOptions,
        {
            "--model-path": "/srv/models/m",
            "--served-model-name": "org/m",
            "--port": 9000,
            "--backend": "ray",
            "--extra-arg": ("--enforce-eager", "--dtype=bfloat16"),
            "--env": ("NCCL_DEBUG=INFO",),
            "--draft-model-path": "/srv/models/d",
        },
    ),
    (
        "doctor",
        DoctorFlags,
        {
            "endpoint": ["http://10.0.0.1:8000", "http://10.0.0.2:8001"],
            "log": [Path("a.log"), Path("b.log")],
            "journal": ["vfleet-vllm-engine-0"],
            "max_num_seqs": 256,
            "watch": 30.0,
            "json": True,
        },
    ),
    ("deploy", DeployFlags, {"env": "staging", "root": Path("b"), "allow_degraded": True}),
    ("destroy", DestroyFlags, {"env": "prod", "purge": True}),
    ("validate", ValidateFlags, {"inventory": Path("inventories/x")}),
    ("known-hosts", KnownHostsFlags, {"env": "staging"}),
    ("preflight", PreflightFlags, {"all": True, "json": True, "timeout": 2.5}),
    ("calibrate", CalibrateFlags, {"json": True}),
]
# What else each command needs to parse.
REQUIRED = {"render": ["--plan=p.json", "--facts=f", "--out=o"], "known-hosts": ["--env=prod"]}


def _argv(model: type[BaseModel], values: dict[str, Any]) -> list[str]:
    """The command line that sets `values` (keys as the model reads them)."""
    fields = {field.alias or name: (name, field) for name, field in model.model_fields.items()}
    argv: list[str] = []
    for key, value in values.items():
        option = _option(*fields[key])
        assert option is not None
        if value is True:
            argv.append(option)
        elif isinstance(value, list | tuple):
            argv += [f"{option}={item}" for item in value]
        else:
            argv.append(f"{option}={value}")
    return argv


@pytest.mark.parametrize(
    ("command", "model", "values"), SAMPLES, ids=[f"{c}-{m.__name__}" for c, m, _ in SAMPLES]
)
def test_flags_round_trip_into_the_same_model(command, model, values):
    """model -> command line -> argparse -> model: the same values, each field once."""
    want = model.model_validate(values)
    argv = [command, *REQUIRED.get(command, []), *_argv(model, values)]
    args = cli._parser().parse_args(argv)
    assert from_namespace(model, args) == want
    # A flag the sample left out parses to the model's own default.
    defaults = {
        field.alias or name: field.get_default(call_default_factory=True)
        for name, field in model.model_fields.items()
        if not field.is_required()
    }
    for key, value in flag_values(model, args).items():
        if key not in values:
            assert value == defaults[key] or list(value) == list(defaults[key]), key


def test_a_rule_is_one_check_on_both_paths():
    """The flag's parser is the field's validator: argparse and the model say the same."""
    out = vfleet("budget", "--model", "m", "--gpu", "g", "--tp=0")
    assert out.returncode == 2
    assert "argument --tp: must be a whole number from 1 to 1024, got 0" in out.stderr
    with pytest.raises(ValidationError, match="must be a whole number from 1 to 1024, got 0"):
        BudgetFlags.model_validate({"model": "m", "gpu": "g", "tp": 0})
    with pytest.raises(ValidationError, match="must be a finite number, got 'inf'"):
        PreflightFlags.model_validate({"timeout": math.inf})
    with pytest.raises(ValidationError, match=r"must be in \(0, 300\]"):
        PreflightFlags.model_validate({"timeout": 301.0})


def test_a_repeated_flag_runs_the_items_rule_on_each_value():
    out = vfleet("doctor", "--endpoint=http://10.0.0.1:8000", "--endpoint=ftp://x")
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        "vfleet: error: argument --endpoint: 'ftp://x' is not a URL: write it like "
        "http://10.0.0.11:8000 (see `vfleet doctor --help`)"
    ]


@pytest.mark.parametrize("command", ["budget", "plan", "estimate", "render"])
def test_the_speculative_flags_are_one_model_in_every_command(command):
    """Same choices and the same range everywhere; render and estimate used to take any int
    (render took `--num-speculative-tokens 0` without a word)."""
    parser = _subparser(command)
    method = next(a for a in parser._actions if "--speculative-method" in a.option_strings)
    assert tuple(method.choices or ()) == speculative.METHODS
    for bad in ("0", str(speculative.MAX_TOKENS + 1), "x"):
        out = vfleet(command, f"--num-speculative-tokens={bad}")
        assert out.returncode == 2
        assert out.stderr.splitlines() == [
            "vfleet: error: argument --num-speculative-tokens: must be a whole number from 1 "
            f"to {speculative.MAX_TOKENS}, got {bad if bad != 'x' else repr(bad)} "
            f"(see `vfleet {command} --help`)"
        ]


def test_values_vfleet_fixes_have_no_flag():
    out = vfleet("render", "--plan=p", "--cluster=c", "--out=o", "--master-port=1")
    assert out.returncode == 2
    assert "unrecognized arguments: --master-port=1" in out.stderr
    assert RenderOptions(model_path="/m", served_model_name="m").master_port == 29501


def test_the_deploy_maps_group_vars_onto_render_flags():
    render_flags = _options(COMMANDS["render"].flag_models())
    for variable, (field, _suffix) in RENDER_FIELDS.items():
        alias = RenderOptions.model_fields[field].alias
        assert alias in render_flags, variable


def test_a_typed_field_without_a_rule_is_refused_when_the_parser_is_built():
    class Loose(BaseModel):
        count: int = 1

    with pytest.raises(TypeError, match=r"--count: .* needs a vfleet\.documents\.flag_types\.Rule"):
        add_arguments(argparse.ArgumentParser(), Loose)
