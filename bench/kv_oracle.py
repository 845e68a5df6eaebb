"""vfleet's KV budget against vLLM's own planner for each release: per-case tables and a summary.

Usage: PYTHONPATH=tests python bench/kv_oracle.py [--json] [--release X ...]
The oracle (tests/support/kv_oracle) runs each release's get_kv_cache_configs and capacity
report on CPU; it needs `make engine oracle-sources`. Every number printed comes from that run.
The oracle is test code shared with tests/engine/test_kv_oracle.py, so it comes from
PYTHONPATH (as `support.kv_oracle`), as `make bench` sets it, never from a path this script
adds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from support.kv_oracle import matrix, oracle


def run(releases: tuple[str, ...]) -> tuple[list[dict], dict]:
    started = time.time()
    cases = matrix.build_cases(releases)
    by_release: dict[str, list[matrix.Case]] = {}
    for case in cases:
        by_release.setdefault(case.release, []).append(case)

    def one(release: str) -> dict:
        return oracle.run_oracle_full(release, [c.oracle_input for c in by_release[release]])

    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        answers = dict(zip(by_release, pool.map(one, by_release), strict=True))
    rows = []
    runs = {}
    for release, data in answers.items():
        runs[release] = data["debug"]
        for case, result in zip(by_release[release], data["results"], strict=True):
            rows.append(matrix.compare(case, result))
    return rows, {"wall_s": round(time.time() - started, 1), "runs": runs}


def summarise(rows: list[dict]) -> dict:
    def abs_errors(key: str) -> list[float]:
        return [abs(r[key]) for r in rows if r.get(key) is not None]

    out: dict = {
        "exact": sum(r["exact"] for r in rows),
        "total": len(rows),
        "oracle_errors": sum("error" in r["oracle"] for r in rows),
        "vfleet_errors": sum(r["vfleet_error"] is not None for r in rows),
    }
    for key in ("error_blocks", "error_tokens", "error_concurrency"):
        errors = abs_errors(key)
        out[key] = {
            "median": statistics.median(errors) if errors else None,
            "max": max(errors) if errors else None,
        }
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.2f}%"


def _groups(oracle_result: dict) -> str:
    return "; ".join(
        f"{g['type']} b{g['block_size']} page {g['page_size']} x{g['layers']}"
        for g in oracle_result.get("groups", [])
    )


def print_tables(rows: list[dict], meta: dict) -> None:
    for release in dict.fromkeys(r["release"] for r in rows):
        debug = meta["runs"][release]
        print(f"\nvLLM {release}  ({debug['vllm_file']}, {debug['total_s']} s)")
        print(
            f"  {'case':<44} {'blocks vfleet/oracle':>21} {'tokens vfleet/oracle':>23} "
            f"{'conc vfleet/oracle':>19} {'tok err':>8}  exact"
        )
        for r in rows:
            if r["release"] != release:
                continue
            case = r["id"].replace(f"-{release}", "")
            o, v = r["oracle"], r["vfleet"] or {}
            if "error" in o:
                print(f"  {case:<44} oracle error: {o['error'][:90]}")
                continue
            if not v:
                print(f"  {case:<44} vfleet error: {r['vfleet_error'][:90]}")
                continue
            print(
                f"  {case:<44} {v['num_blocks']:>10}/{o['num_blocks']:<10} "
                f"{v['kv_tokens']:>11}/{o['kv_tokens']:<11} "
                f"{v['max_concurrency']:>9.2f}/{o['max_concurrency']:<9.2f} "
                f"{_pct(r.get('error_tokens')):>8}  {'yes' if r['exact'] else 'NO'}"
            )
        for r in rows:
            if r["release"] == release and not r["exact"] and "error" not in r["oracle"]:
                print(f"    {r['id']} oracle groups: {_groups(r['oracle'])}")
    s = summarise(rows)
    print(f"\nexact {s['exact']} / {s['total']} cases (oracle wall {meta['wall_s']} s)")
    for key, label in (
        ("error_blocks", "num_blocks"),
        ("error_tokens", "kv tokens"),
        ("error_concurrency", "concurrency"),
    ):
        e = s[key]
        median = "-" if e["median"] is None else f"{100 * e['median']:.3f}%"
        worst = "-" if e["max"] is None else f"{100 * e['max']:.3f}%"
        print(f"  {label:<12} |error| median {median}, max {worst}")
    if s["oracle_errors"] or s["vfleet_errors"]:
        print(f"  failed cases: oracle {s['oracle_errors']}, vfleet {s['vfleet_errors']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print rows and summary as JSON")
    parser.add_argument(
        "--release", action="append", help=f"release(s) to run (default: {matrix.RELEASES})"
    )
    args = parser.parse_args()
    releases = tuple(args.release or matrix.RELEASES)
    for release in releases:
        reason = oracle.unavailable_reason(release)
        if reason:
            print(f"kv_oracle: {reason}", file=sys.stderr)
            return 2
    rows, meta = run(releases)
    if args.json:
        json.dump({"summary": summarise(rows), "meta": meta, "rows": rows}, sys.stdout, indent=1)
        print()
    else:
        print_tables(rows, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
