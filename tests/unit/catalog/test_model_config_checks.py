"""Model configs that vLLM refuses at load time are refused before anything is computed,
and no NaN or infinity reaches a printed number: over the catalog and over configs made
from it with one field changed."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from support.cli_run import vfleet
from support.hostile import assert_one_line
from support.paths import REPO
from vfleet.catalog.models import catalog_entry, catalog_ids

# A small MoE with grouped-query attention: every check below has a field to break.
BASE: dict[str, Any] = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 8,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
}

BAD: dict[str, tuple[dict[str, Any], str]] = {
    "no expert picked": ({"num_experts_per_tok": 0}, "num_experts_per_tok"),
    "more picked than exist": ({"num_experts_per_tok": 65}, "num_experts_per_tok"),
    "kv heads do not divide": ({"num_key_value_heads": 5}, "num_key_value_heads"),
    "more kv heads than heads": ({"num_key_value_heads": 64}, "num_key_value_heads"),
    "zero kv heads": ({"num_key_value_heads": 0}, "num_key_value_heads"),
    "zero head width": ({"head_dim": 0, "hidden_size": 16}, "head_dim"),
    "zero expert width": (
        {"intermediate_size": 0, "moe_intermediate_size": 0},
        "moe_intermediate_size",
    ),
    "rope scaling text": ({"rope_scaling": "garbage"}, "rope_scaling"),
    "negative yarn factor": ({"rope_scaling": {"rope_type": "yarn", "factor": -4}}, "factor"),
    "rope factor true": ({"rope_scaling": {"type": "linear", "factor": True}}, "factor"),
    "fp8 block zero": (
        {"quantization_config": {"quant_method": "fp8", "weight_block_size": [0, 0]}},
        "weight_block_size",
    ),
    "fp8 block text": (
        {"quantization_config": {"quant_method": "fp8", "weight_block_size": "128"}},
        "weight_block_size",
    ),
    "unknown dtype": ({"torch_dtype": "int1"}, "torch_dtype"),
}

DENSE_BAD: dict[str, tuple[dict[str, Any], str]] = {
    "dense zero width": ({"intermediate_size": 0}, "intermediate_size"),
}


def _dense() -> dict[str, Any]:
    cfg = {k: v for k, v in BASE.items() if "expert" not in k}
    cfg["architectures"], cfg["model_type"] = ["Qwen3ForCausalLM"], "qwen3"
    return cfg


def _write(tmp_path: Path, cfg: dict[str, Any]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def _budget(config: Path | str, *extra: str) -> Any:
    return vfleet("budget", "--model", str(config), "--gpu", "H200", "--tp", "1", *extra)


def test_the_base_configs_are_accepted(tmp_path: Path) -> None:
    for cfg in (BASE, _dense()):
        result = _budget(_write(tmp_path, cfg), "--max-model-len", "4096")
        assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("case", [*BAD, *DENSE_BAD])
def test_a_config_vllm_refuses_is_refused_naming_the_field(tmp_path: Path, case: str) -> None:
    change, field = BAD.get(case) or DENSE_BAD[case]
    cfg = copy.deepcopy(BASE if case in BAD else _dense())
    cfg.update(change)
    result = _budget(_write(tmp_path, cfg), "--max-model-len", "4096")
    assert result.returncode == 2, (case, result.stdout, result.stderr)
    assert_one_line(result.stderr.strip())
    assert field in result.stderr and "fix config.json" in result.stderr
    assert result.stdout == ""


_NOT_FINITE = re.compile(r"\b(nan|inf|infinity)\b", re.IGNORECASE)


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return []


def _assert_finite(text: str, what: str) -> None:
    assert not _NOT_FINITE.search(text), (what, text[:400])


@pytest.mark.parametrize("model", [m for m in catalog_ids() if "/" in m])
def test_no_catalog_model_prints_a_number_that_is_not_finite(model: str) -> None:
    entry = catalog_entry(model)
    result = _budget(model, "--tp", "8", "--max-model-len", "8192", "--json")
    if result.returncode != 0:  # too large for one H200 at TP1: any refusal is one line
        assert result.returncode == 2
        assert_one_line(result.stderr.strip())
        return
    doc = json.loads(result.stdout)
    assert all(math.isfinite(n) for n in _numbers(doc)), entry["id"]
    table = _budget(model, "--tp", "8", "--max-model-len", "8192")
    _assert_finite(table.stdout + table.stderr, model)


# One field at a time, moved to the edges the range checks still allow: each config is
# either refused in one line or estimated with finite numbers, never NaN.
EDGES = {
    "hidden_size": [1, 7, 1_000_000],
    "num_attention_heads": [1, 4096],
    "num_key_value_heads": [1, 32],
    "head_dim": [1, 65_536],
    "moe_intermediate_size": [1, 10_000_000],
    "num_experts": [8, 4096],
    "num_experts_per_tok": [1, 64],
    "vocab_size": [1, 10_000_000],
    "max_position_embeddings": [1, 100_000_000],
    "num_hidden_layers": [1, 1024],
}


@pytest.mark.parametrize(
    ("field", "value"), [(f, v) for f, values in EDGES.items() for v in values]
)
def test_configs_at_the_edges_print_finite_numbers_or_one_line(
    tmp_path: Path, field: str, value: int
) -> None:
    cfg = copy.deepcopy(BASE)
    cfg[field] = value
    result = _budget(_write(tmp_path, cfg), "--max-model-len", "1024", "--json")
    if result.returncode == 2:
        assert_one_line(result.stderr.strip())
        return
    assert result.returncode == 0, (field, value, result.stderr)
    assert all(math.isfinite(n) for n in _numbers(json.loads(result.stdout))), (field, value)
    estimate = vfleet(
        "estimate",
        "--cluster",
        str(REPO / "examples/clusters/1x8-h200.yaml"),
        "--model",
        str(tmp_path / "config.json"),
        "--layout",
        "TP1",
        "--input-len",
        "512",
        "--output-len",
        "64",
        "--num-prompts",
        "8",
        "--max-model-len",
        "1024",
    )
    if estimate.returncode == 2:
        assert_one_line(estimate.stderr.strip())
        return
    assert estimate.returncode == 0, (field, value, estimate.stderr)
    _assert_finite(estimate.stdout + estimate.stderr, f"{field}={value}")
