"""`vfleet budget` as users run it: JSON keys, the worked table, bad input, speed."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from support.cli_run import Result, vfleet

VFLEET = Path(sys.executable).parent / "vfleet"
JSON_KEYS = {
    "weights_gib",
    "activation_gib",
    "non_torch_gib",
    "cudagraph_gib",
    "available_kv_gib",
    "kv_bytes_per_token",
    "kv_tokens",
    "max_concurrency",
    "recommended_max_num_seqs",
}


def run(*args: str) -> Result:
    return vfleet(*args, env={**os.environ, "MPLBACKEND": "Agg"})


def test_json_output_has_the_documented_keys():
    out = run(
        "budget",
        "--model",
        "deepseek-ai/DeepSeek-V3",
        "--gpu",
        "H200-SXM-141GB",
        "--tp",
        "8",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data.keys() >= JSON_KEYS
    assert data["kv_bytes_per_token"] == 70_272


def test_worked_table_reads_top_to_bottom():
    out = run(
        "budget",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu",
        "NVIDIA H100 80GB HBM3",
        "--max-model-len",
        "8192",
    )
    assert out.returncode == 0, out.stderr
    labels = [
        "x gpu-memory-utilization",
        "- weights",
        "- activation peak",
        "= KV pool per GPU",
        "/ KV bytes per token",
        "= KV tokens per engine",
        "= concurrent sequences",
    ]
    positions = [out.stdout.index(label) for label in labels]
    assert positions == sorted(positions)


def test_sweep_and_plot(tmp_path):
    png = tmp_path / "sweep.png"
    out = run(
        "budget",
        "--model",
        "deepseek-ai/DeepSeek-V3",
        "--gpu",
        "H200-SXM-141GB",
        "--tp",
        "8",
        "--kv-cache-dtype",
        "fp8",
        "--sweep-gpu-memory-utilization",
        "0.6:0.9:0.1",
        "--plot",
        str(png),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n  0.") >= 4
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H1OO"], "unknown GPU"),
        (["--model", "no/such-model", "--gpu", "H100-SXM-80GB"], "unknown model"),
        (["--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H100-SXM-80GB"], "does not fit"),
        (["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L4", "--tp", "3"], "--tp 3"),
        (
            ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L4", "--vllm-version", "0.2"],
            "outside the supported range",
        ),
        (
            ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L4", "--max-num-seqs", "0"],
            "--max-num-seqs: must be a whole number from 1 to",
        ),
        (["--gpu", "L4"], "required"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, needle):
    out = run("budget", *args)
    assert out.returncode == 2
    assert needle in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr


def test_config_missing_a_field_names_it(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "vocab_size": 32000,
            }
        )
    )
    out = run("budget", "--model", str(cfg), "--gpu", "L4")
    assert out.returncode == 2
    assert "num_hidden_layers" in out.stderr


def test_does_not_fit_names_weights_memory_and_a_layout():
    out = run("budget", "--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H100-SXM-80GB")
    assert "GiB" in out.stderr and "smallest layout that fits is TP" in out.stderr


def test_budget_answers_quickly():
    start = time.perf_counter()
    out = run(
        "budget",
        "--model",
        "deepseek-ai/DeepSeek-V3",
        "--gpu",
        "H200-SXM-141GB",
        "--tp",
        "8",
        "--json",
    )
    assert out.returncode == 0
    # Generous bound for a loaded CI box; bench/budget_speed.py reports the real figure.
    assert time.perf_counter() - start < 5


def test_the_console_script_is_the_same_main() -> None:
    # Every other test here calls main() in process; this one runs the installed command.
    import subprocess

    done = subprocess.run([str(VFLEET), "gpus"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == run("gpus").stdout
