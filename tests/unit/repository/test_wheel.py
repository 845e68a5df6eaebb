"""The controller as a wheel: built from controller/ alone, unpacked away from the checkout
and run with none of it on the path, it plans and renders (its templates and data files are
package data) and a command that needs a bundle says so in one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from support.paths import REPO


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools leaves build/ and *.egg-info next to the sources.
    source = out / "controller"
    shutil.copytree(
        REPO / "controller", source, ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("vfleet-*.whl")
    site = out / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return site


def _run(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -S: no site module, so the editable install's path hook cannot put the checkout back;
    # the wheel comes first, the venv's third-party packages after it.
    path = [str(site), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    code = (
        f"import sys; sys.path[:0] = {path!r}; import vfleet.cli.main as m; "
        "assert m.__file__.startswith(sys.path[0]), m.__file__; sys.exit(m.main(sys.argv[1:]))"
    )
    return subprocess.run(
        [sys.executable, "-S", "-c", code, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_the_wheel_carries_its_templates_data_and_schemas(unpacked: Path) -> None:
    package = unpacked / "vfleet"
    for name in ("launch.sh.j2", "vllm.service.j2", "report.html.j2"):
        assert (package / "templates" / name).is_file(), name
    assert (package / "data" / "gpus.json").is_file()
    assert any((package / "data" / "models").glob("*.json"))
    assert (package / "schemas" / "plan.schema.json").is_file()
    assert not (package / "testbed").exists()  # the test host bed is a development tool


def test_the_wheel_plans_and_renders_outside_the_checkout(unpacked: Path, tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text((REPO / "examples" / "clusters" / "1x8-h100.yaml").read_text())
    plan = _run(
        unpacked,
        tmp_path,
        "plan",
        "--cluster",
        str(cluster),
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--out",
        str(tmp_path / "plan.json"),
    )
    assert plan.returncode == 0, plan.stderr
    render = _run(
        unpacked,
        tmp_path,
        "render",
        "--plan",
        str(tmp_path / "plan.json"),
        "--cluster",
        str(cluster),
        "--out",
        str(tmp_path / "launch"),
    )
    assert render.returncode == 0, render.stderr
    scripts = list((tmp_path / "launch").rglob("launch.sh"))
    assert scripts and "vllm" in scripts[0].read_text()


def test_an_environment_command_outside_a_bundle_is_one_line(
    unpacked: Path, tmp_path: Path
) -> None:
    done = _run(unpacked, tmp_path, "validate", "--env", "local")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "not inside a vfleet bundle" in done.stderr
