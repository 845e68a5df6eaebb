"""The engine venv runs vLLM's portable AVX2 kernels on every host (the shim's docstring in
scripts/engine-site/vfleet_portable_isa.py says why)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

PROBE = (
    "import torch.cpu as c; "
    "print(c.get_capabilities.__module__, c._is_avx512_supported(), c._is_amx_tile_supported())"
)


def run_probe(venv: Path, **env: str) -> list[str]:
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", PROBE],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
        timeout=120,
    )
    return proc.stdout.split()


def test_the_engine_venv_loads_the_shim_before_vllm_asks_about_the_cpu(vllm_venv: Path):
    assert run_probe(vllm_venv) == ["vfleet_portable_isa", "False", "False"]


def test_the_opt_out_gives_torch_its_own_answer(vllm_venv: Path):
    assert run_probe(vllm_venv, VFLEET_ENGINE_NATIVE_ISA="1")[0] == "torch.cpu"
