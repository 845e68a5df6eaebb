"""How fast `vfleet budget` answers, interpreter start included (target: under 1 s)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

VFLEET = Path(sys.executable).parent / "vfleet"
CASES = [
    ["--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H200-SXM-141GB", "--tp", "8", "--json"],
    [
        "--model",
        "meta-llama/Llama-3.1-405B-Instruct",
        "--gpu",
        "H100-SXM-80GB",
        "--tp",
        "8",
        "--pp",
        "2",
    ],
    [
        "--model",
        "openai/gpt-oss-120b",
        "--gpu",
        "H100-SXM-80GB",
        "--tp",
        "2",
        "--json",
    ],
]


def main() -> int:
    print(f"{'command':<70} {'median s':>9} {'max s':>7}")
    for args in CASES:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run([str(VFLEET), "budget", *args], check=True, capture_output=True)
            times.append(time.perf_counter() - start)
        label = " ".join(args)[:70]
        print(f"{label:<70} {statistics.median(times):9.3f} {max(times):7.3f}")
    print("target: under 1 s per call, interpreter start included")
    return 0


if __name__ == "__main__":
    sys.exit(main())
