"""How fast `vfleet` starts: `vfleet --help`, and a one-line refusal of a bad cluster file,
each run as a fresh process the way people run them in loops and scripts.

    python bench/startup.py            # 10 runs of each; the median, the fastest, the target
    python bench/startup.py --runs 30 --json

Targets: `--help` under 0.3 s and the refusal under 0.5 s of wall time on two cores. What
costs the time is imports: every command's module is imported only when that command runs
(vfleet.cli.main), so `--help` pays for argparse and the option models alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VFLEET = Path(sys.executable).with_name("vfleet")
TARGETS_S = {"vfleet --help": 0.3, "refuse a bad cluster file": 0.5}


def _timed(argv: list[str], runs: int, expect: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        if done.returncode != expect:
            raise SystemExit(f"{argv}: exit {done.returncode}, not {expect}: {done.stderr[-300:]}")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bad = Path(tmp) / "cluster.yaml"
        bad.write_text("nodes: eight\n")
        cases = {
            "vfleet --help": ([str(VFLEET), "--help"], 0),
            "refuse a bad cluster file": (
                [str(VFLEET), "plan", "--cluster", str(bad), "--model", "x"],
                2,
            ),
        }
        measured = {name: _timed(argv, args.runs, rc) for name, (argv, rc) in cases.items()}
    rows = {
        name: {
            "median_s": round(statistics.median(t), 3),
            "fastest_s": round(min(t), 3),
            "target_s": TARGETS_S[name],
            "met": statistics.median(t) < TARGETS_S[name],
        }
        for name, t in measured.items()
    }
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'command':28} {'median':>8} {'fastest':>8} {'target':>8}")
    for name, row in rows.items():
        mark = "" if row["met"] else "  <- over the target"
        print(
            f"{name:28} {row['median_s']:7.3f}s {row['fastest_s']:7.3f}s "
            f"{row['target_s']:7.1f}s{mark}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
