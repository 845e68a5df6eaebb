"""The controller's shape, checked: imports between its packages run one way (no cycle, the
bottom package stands alone), no product module reaches into tests/, and modules stay small
enough to read in one sitting (docs/architecture.md)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "controller" / "src"
SHARED = {"errors", "data"}  # plain leaves every package may use
MAX_LINES = 460


def _modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / "vfleet").rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(path: Path) -> set[str]:
    """Every vfleet module `path` imports, at the top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {name for name in out if name.split(".")[0] in ("vfleet", "tests")}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in _modules().items():
        for target in _imports(path):
            a, b = _package(module), _package(target)
            if a and b and a != b and b not in SHARED:
                graph[a].add(b)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return []


def test_no_cycle_between_packages():
    assert _cycle(_graph()) == []


def test_the_cycle_check_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_inputs_is_the_bottom_and_observe_stands_beside():
    graph = _graph()
    assert graph.get("inputs", set()) == set()
    assert graph.get("observe", set()) == set()
    assert "cli" not in {b for targets in graph.values() for b in targets}
    assert not {"deploy", "cli"} & (graph["plan"] | graph["render"] | graph["probe"])


def test_no_product_module_imports_tests():
    offenders = [
        m for m, path in _modules().items() if any(i.startswith("tests") for i in _imports(path))
    ]
    assert offenders == []


def test_modules_stay_short():
    long = {
        str(path.relative_to(SRC)): n
        for path in _modules().values()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these by job: {long}"
