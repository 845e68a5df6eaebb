"""Benchmarks only print and import no test code by path; the refit tool
(controller/tools/refit.py) is what writes the bundled fit, and its --check tells a changed
fitted value from a new date or description."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from support.paths import REPO

BENCH = REPO / "bench"


def _refit_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "refit_tool", REPO / "controller" / "tools" / "refit.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bench_files() -> list[Path]:
    files = sorted(BENCH.rglob("*.py"))
    assert len(files) >= 9  # the scripts and bench/aic/
    return files


def _touches_sys_path(tree: ast.AST) -> bool:
    return any(
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
        for node in ast.walk(tree)
    ) or any(
        isinstance(node, ast.Constant) and "sys.path" in str(node.value) for node in ast.walk(tree)
    )


def test_no_bench_script_touches_sys_path():
    offenders = [
        str(path.relative_to(REPO))
        for path in _bench_files()
        if _touches_sys_path(ast.parse(path.read_text()))
    ]
    assert offenders == []


def test_the_sys_path_check_finds_one():
    assert _touches_sys_path(ast.parse('import sys\nsys.path.insert(0, "tests")\n'))
    assert _touches_sys_path(ast.parse('CODE = """\nsys.path.insert(0, "tests")\n"""\n'))
    assert not _touches_sys_path(ast.parse("import sys\nsys.exit(0)\n"))


def _shipped_data_names(tree: ast.AST) -> set[str]:
    """The names through which code reaches vfleet's data files (vfleet.perf.fit,
    vfleet.perf.bands, vfleet.data), wherever they appear."""
    wanted = {"FIT_FILE", "BANDS_FILE", "DATA_DIR"}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in wanted:
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in wanted:
            found.add(node.attr)
        elif isinstance(node, ast.alias) and node.name in wanted:
            found.add(node.name)
    return found


def test_no_bench_script_reaches_the_shipped_fit_files():
    """Only the refit tool writes data/perf_fit.json and data/perf_bands.json."""
    offenders = {
        str(path.relative_to(REPO)): names
        for path in _bench_files()
        if (names := _shipped_data_names(ast.parse(path.read_text())))
    }
    assert offenders == {}
    tool = ast.parse((REPO / "controller" / "tools" / "refit.py").read_text())
    assert {"FIT_FILE", "BANDS_FILE"} <= _shipped_data_names(tool)


def test_the_accuracy_bench_has_no_fit_flag():
    assert "--fit" not in (BENCH / "perf_accuracy.py").read_text()


def _documents(tmp_path: Path, committed: dict, new: dict) -> dict[Path, dict]:
    path = tmp_path / "perf_fit.json"
    path.write_text(json.dumps(committed, indent=2) + "\n")
    return {path: new}


FIT = {
    "description": "Fitted by an older tool",
    "fitted_on": "2026-01-01",
    "score": {"points": 82, "median_abs_error": 0.1911},
    "fit": {"overheads": {"v1": {"step_s": 0.0010391281947855905}}},
}


def test_check_ignores_the_date_and_the_description(tmp_path, capsys):
    refit = _refit_tool()
    new = {**FIT, "description": "Fitted by controller/tools/refit.py", "fitted_on": "2027-02-02"}
    assert refit.check(_documents(tmp_path, FIT, new)) == 0
    assert capsys.readouterr().out == "perf_fit.json: unchanged\n"


def test_check_names_each_changed_value_and_writes_nothing(tmp_path, capsys):
    refit = _refit_tool()
    new = json.loads(json.dumps(FIT))
    new["fit"]["overheads"]["v1"]["step_s"] = 0.00137
    new["score"]["points"] = 83
    documents = _documents(tmp_path, FIT, new)
    before = next(iter(documents)).read_text()
    assert refit.check(documents) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "perf_fit.json: 2 values would change",
        "  fit.overheads.v1.step_s: 0.0010391281947855905 -> 0.00137",
        "  score.points: 82 -> 83",
    ]
    assert next(iter(documents)).read_text() == before


@pytest.mark.parametrize(
    ("old", "new", "changed"),
    [
        (0.5, 0.5 * (1 + 1e-12), False),  # the same fit on another BLAS build
        (0.5, 0.5001, True),
        ({"a": 1}, {"a": 1, "b": 2}, True),  # a new key is a change
        ("x", "y", True),
        (None, 0.1, True),  # a value the committed file lacks
    ],
)
def test_differences_between_values(old, new, changed):
    assert bool(_refit_tool().differences({"k": old}, {"k": new})) is changed


def test_write_replaces_the_file_whole(tmp_path, capsys):
    refit = _refit_tool()
    documents = _documents(tmp_path, FIT, {**FIT, "fitted_on": "2027-02-02"})
    refit.write(documents)
    path = next(iter(documents))
    assert json.loads(path.read_text())["fitted_on"] == "2027-02-02"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["perf_fit.json"]
    assert capsys.readouterr().out == f"wrote {path}\n"
