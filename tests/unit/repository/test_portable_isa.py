"""The engine venv's portable-ISA shim, run against a stand-in torch.cpu that reports a CPU
with AVX-512 and AMX (the real one lives in tests/engine/test_engine_isa.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO

SHIM = REPO / "scripts" / "engine-site"

# A CPU that reports every family the shim masks, next to ones it keeps.
REPORTED = {"avx2": True, "avx512_f": True, "avx512_bf16": True, "amx_tile": True,
            "avx10_1": True, "fma3": True, "architecture": "x86_64"}  # fmt: skip

TORCH_CPU = f"""
def get_capabilities():
    return {REPORTED!r}

def _is_avx512_supported():
    return get_capabilities().get("avx512_f", False)

def _is_amx_tile_supported():
    return get_capabilities().get("amx_tile", False)
"""

PROBE = """
import json, site, sys
site.addsitedir(sys.argv[1])  # reads the .pth, as the venv's site-packages does
import torch.cpu as c
print(json.dumps({"caps": dict(c.get_capabilities()), "avx512": c._is_avx512_supported(),
                  "amx": c._is_amx_tile_supported()}))
"""


@pytest.fixture
def fake_torch(tmp_path: Path) -> Path:
    (tmp_path / "torch" / "cpu").mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("")
    (tmp_path / "torch" / "cpu" / "__init__.py").write_text(TORCH_CPU)
    return tmp_path


def probe(fake_torch: Path, **env: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(SHIM)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(fake_torch), **env},
    )
    return json.loads(proc.stdout)


def test_the_shim_reports_avx512_avx10_and_amx_absent_and_keeps_the_rest(fake_torch: Path):
    seen = probe(fake_torch)
    assert seen["avx512"] is False and seen["amx"] is False
    assert seen["caps"] == {
        **REPORTED, "avx512_f": False, "avx512_bf16": False, "amx_tile": False,
        "avx10_1": False,
    }  # fmt: skip


def test_the_opt_out_leaves_the_native_capabilities(fake_torch: Path):
    seen = probe(fake_torch, VFLEET_ENGINE_NATIVE_ISA="1")
    assert seen["caps"] == REPORTED
    assert seen["avx512"] is True and seen["amx"] is True
