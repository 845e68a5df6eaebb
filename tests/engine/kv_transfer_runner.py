"""Build one vLLM release's own `KVTransferConfig` from JSON strings, under the vLLM CPU
build's python (tests/engine/test_kv_transfer_releases.py).

Usage: PYTHONPATH=<the release's sources> python kv_transfer_runner.py
stdin: {"cases": [{"id": str, "json": str}, ...]}
stdout: {"module_file", "vllm_file", "vllm_version", "fields", "import_s", "results"}; each
result: id, init_error (`KVTransferConfig(**json.loads(json))`) and cli_error (the CLI's
`TypeAdapter(KVTransferConfig).validate_json(json)`), null where the release accepted it,
else the exception's type and text; and `held`, the given keys the built config has, with
its values (a release before 0.17 drops an unknown key without a word).

Only the module that defines the class runs, not vLLM's package `__init__` (which starts the
engine's imports): `vllm` (and from 0.11 `vllm.config`) are empty packages over the release's
folders, so `vllm.config.kv_transfer` (0.11 on) or the monolithic `vllm/config.py` (up to
0.10) and what they import are the release's own files. Up to 0.10 that file also imports the
release's model-config helpers, which register Hugging Face configs that this venv's
transformers already has; those helpers are stand-ins (as in tests/kv_oracle/runner.py), never
called by `KVTransferConfig`.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time
import types
from pathlib import Path
from typing import Any

os.environ["VLLM_CONFIGURE_LOGGING"] = "0"
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

# Imported by the monolithic config of 0.9-0.10 at module level; KVTransferConfig uses none.
STUBBED = ("vllm.transformers_utils",)


class _Anything:
    """Stands for any attribute of a stubbed module."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Anything()

    def __iter__(self) -> Any:
        return iter(())

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if any(name == s or name.startswith(s + ".") for s in STUBBED):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _bare_package(name: str, folder: Path) -> None:
    """`name` as a package over `folder` whose `__init__` does not run."""
    module = types.ModuleType(name)
    module.__path__ = [str(folder)]
    module.__file__ = str(folder / "__init__.py")
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    module.__spec__ = spec
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def _release_root() -> Path:
    """The release's `vllm` folder: the first on sys.path (PYTHONPATH comes first)."""
    for entry in sys.path:
        folder = Path(entry or ".") / "vllm"
        if (folder / "version.py").is_file():
            return folder.resolve()
    raise SystemExit("no vllm package on sys.path")


def load_kv_transfer_config() -> tuple[type, types.ModuleType]:
    root = _release_root()
    _bare_package("vllm", root)
    if (root / "config" / "kv_transfer.py").is_file():
        _bare_package("vllm.config", root / "config")
        module = importlib.import_module("vllm.config.kv_transfer")
    else:
        sys.meta_path.insert(0, _StubFinder())
        module = importlib.import_module("vllm.config")
    return module.KVTransferConfig, module


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def run_case(cls: type, case: dict[str, Any]) -> dict[str, Any]:
    from pydantic import TypeAdapter

    result: dict[str, Any] = {"id": case["id"], "init_error": None, "cli_error": None}
    try:
        given = json.loads(case["json"])
        built = cls(**given)
        result["held"] = {key: getattr(built, key) for key in given if hasattr(built, key)}
    except Exception as exc:  # the release's refusal is the answer
        result["init_error"] = _error(exc)
    try:
        TypeAdapter(cls).validate_json(case["json"])
    except Exception as exc:
        result["cli_error"] = _error(exc)
    return result


def main() -> int:
    started = time.time()
    request = json.load(sys.stdin)
    out_stream = sys.stdout
    sys.stdout = sys.stderr  # stray prints from vLLM must not corrupt the answer
    cls, module = load_kv_transfer_config()
    import_s = time.time() - started
    version = importlib.import_module("vllm.version")
    answer = {
        "module_file": module.__file__,
        "vllm_file": sys.modules["vllm"].__file__,
        "vllm_version": getattr(version, "__version__", None),
        "fields": [f.name for f in dataclasses.fields(cls)],
        "import_s": round(import_s, 2),
        "results": [run_case(cls, case) for case in request["cases"]],
    }
    json.dump(answer, out_stream, default=str)
    out_stream.write("\n")
    out_stream.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
