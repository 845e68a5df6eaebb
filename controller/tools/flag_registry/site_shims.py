"""Import-time workarounds for running an older vLLM on the pinned CPU environment's torch and
transformers (release_table.VERSION_SHIMS says which release needs which).

Each is Python source that the capture writes into a sitecustomize.py, after the parser probe,
so it runs before vLLM is imported. None of them touches argparse or vLLM's config classes,
so the recorded parser (its flags, types, choices and defaults) is unchanged.
"""

from __future__ import annotations

SHIMS: dict[str, str] = {
    # vLLM 0.8.5 decorates helpers with @torch.compile at import time; torch 2.13 then imports
    # inductor, which trips over vLLM's own `triton` placeholder module. The help path never
    # calls those helpers, so an identity decorator is enough.
    "torch_compile_noop": """
import torch as _torch


def _noop_compile(model=None, **_kwargs):
    if model is None:
        return lambda fn: fn
    return model


_torch.compile = _noop_compile
""",
    # torch 2.13 dropped torch._C._cpu._is_avx512_supported, which 0.17's CPU platform calls
    # to choose between its AVX2 and AVX-512 kernel modules (neither is unpacked here anyway).
    "torch_cpu_avx512_probe": """
import torch as _torch

if not hasattr(_torch._C._cpu, "_is_avx512_supported"):
    _torch._C._cpu._is_avx512_supported = lambda: False
""",
    # vLLM 0.9.2 registers its own config for a model type ("aimv2") that transformers 5.x
    # now ships; AutoConfig.register then raises. Which class serves a model type does not
    # matter to the CLI parser.
    "transformers_register_exist_ok": """
from transformers import AutoConfig as _AutoConfig

_orig_register = _AutoConfig.register


def _register(model_type, config, exist_ok=False):
    return _orig_register(model_type, config, exist_ok=True)


_AutoConfig.register = staticmethod(_register)
""",
}
