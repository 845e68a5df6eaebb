"""Score `vfleet budget` against real vLLM start-up logs: per-case table and summary.

Usage: python bench/kv_accuracy.py [--cases DIR]
Target: median |kv_tokens error| <= 0.5% and mean <= 2% over every case with a
config and a complete record. For scale, the llm-d capacity planner reports 6.7% mean
absolute error on KV memory and 9.9% on max concurrency on data of this kind.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from vfleet.budget.compute import compute
from vfleet.errors import UserError
from vfleet.inputs.files import load_json
from vfleet_devtools.kvcases import configs_by_case_model, to_run, usable

DEFAULT_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "kv_cases"


def score(cases_dir: Path) -> list[dict]:
    # --cases names the folder: its files are read as every user-named file is.
    cases = load_json(cases_dir / "cases.json", "KV cases file").data["cases"]
    configs = configs_by_case_model(load_json(cases_dir / "models.json", "KV models file").data)
    rows = []
    for case in cases:
        if not usable(case, configs):
            continue
        run = to_run(case, configs)
        budget = compute(run.request)
        error = (budget.kv_tokens - run.observed_tokens) / run.observed_tokens
        rows.append(
            {
                "id": run.case_id,
                "version": budget.vllm_version,
                "gpu": budget.gpu,
                "layout": f"TP{budget.tensor_parallel_size}PP{budget.pipeline_parallel_size}",
                "pred_kv_gib": budget.available_kv_gib,
                "obs_kv_gib": run.observed_available_gib,
                "pred_tokens": budget.kv_tokens,
                "obs_tokens": run.observed_tokens,
                "error": error,
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args()
    try:
        rows = score(args.cases)
    except UserError as exc:
        print(f"kv_accuracy: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{'case':<46} {'vLLM':<7} {'GPU':<15} {'layout':<7} {'KV GiB pred/obs':>16} "
        f"{'tokens pred':>12} {'tokens obs':>11} {'error':>7}"
    )
    for r in rows:
        obs = f"{r['obs_kv_gib']:.2f}" if r["obs_kv_gib"] is not None else "-"
        print(
            f"{r['id'][:46]:<46} {r['version']:<7} {r['gpu'][:15]:<15} {r['layout']:<7} "
            f"{r['pred_kv_gib']:>8.2f}/{obs:>7} {r['pred_tokens']:>12} {r['obs_tokens']:>11} "
            f"{r['error'] * 100:>+6.1f}%"
        )
    errors = [abs(r["error"]) for r in rows]
    print(
        f"\ncases: {len(rows)}   median |error|: {statistics.median(errors) * 100:.2f}%   "
        f"mean |error|: {statistics.mean(errors) * 100:.2f}%   "
        f"max |error|: {max(errors) * 100:.1f}%   within 5%: "
        f"{sum(e <= 0.05 for e in errors)}/{len(rows)}"
    )
    print("targets: median <= 0.5%, mean <= 2% (llm-d planner: 6.7% KV memory, 9.9% concurrency)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
