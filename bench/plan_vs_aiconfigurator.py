"""vfleet's plan next to NVIDIA AIConfigurator's (AIC 0.12.0, vLLM 0.24.0 data), both ways.

Part 1, per scenario (a cluster file and a model), at the same fixed ISL/OSL and TTFT/TPOT
targets on both sides (vfleet gets a workload file with p99 = mean, AIC's closed loop has
fixed lengths) and the same vLLM release (AIC's data release, 0.24.0, unless --vllm-version):
  - vfleet's pick (`vfleet plan --json`, the controller's venv): its layout and its own
    predicted output tok/s, next to AIC's score of that same layout (batch per rank picked by
    AIC under the SLOs) and at vfleet's own max-num-seqs (SLOs lifted);
  - AIC's best aggregated layout, searched with pipeline parallelism allowed (PP 1-8 where
    the GPU count allows), with vfleet's prediction for it (`vfleet estimate --json` at the
    concurrency AIC reports: batch per rank x DP ranks x replicas);
  - AIC's best disaggregated (prefill/decode) configuration from AIC's own disagg search, or
    why there is none;
  - the ratio AIC's score of vfleet's pick / AIC's best aggregated layout.
The Ethernet scenario (2 x 8 H100 over 25 GbE) runs on an AIC system written at run time: a
copy of AIC's h100_sxm with `node.inter_node_bw` set to the cluster file's measured all-reduce
bus bandwidth; both layouts are also re-scored at AIC's stock 50 GB/s and at the per-GPU share
of the measured link, to show how much AIC's answer depends on the link.

Part 2, both tools against published measurements (controller/src/vfleet/data/perf_cases/
measured.json): every aggregated vLLM run on H100/H200 SXM with a model AIC bundles, fixed
random lengths and a fixed concurrency (or all prompts at once), scored at its measured layout
by AIC and by vfleet (vfleet_devtools.perfcases + vfleet.plan.estimate, in the controller's
venv); each
tool's |error| and the median |error| over the points both model. Points AIC cannot model are
listed with the reason.

Every AIC score comes from a single-candidate sweep (`cli_exp`), the path AIC's own default
sweep takes: for expert-parallel layouts AIC's one-shot `cli_estimate` returns a different
number than its sweep does for the same layout, and the sweep's is the one AIC users see.

Run from the repository root: `python bench/plan_vs_aiconfigurator.py`. AIC lives in its own
venv (scripts/install-aiconfigurator.sh, run here when missing); the script re-executes
itself under that venv's python and calls vfleet through the controller's .venv. The work is
in bench/aic/: AIC's tables (`tables`), vfleet's side (`vfleet_side`), AIC's calls in child
processes (`calls`), both sides per scenario and per measured point (`runs`), the report
(`report`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aic.report import disagg_reasons, print_report
from aic.runs import run_measured, run_scenario
from aic.scenarios import AIC_VERSION, AIC_VLLM, DEFAULT_AIC_VENV, REPO, SCENARIOS
from aic.tables import link_systems

REEXEC_MARK = "VFLEET_AIC_BENCH_REEXEC"


def _reexec_under_aic(venv: Path) -> None:
    """Run this script again under the AIC venv's python (installing it when missing)."""
    python = venv / "bin" / "python"
    if os.environ.get(REEXEC_MARK):
        sys.exit(f"aiconfigurator is not importable under {sys.executable}")
    if not (venv / ".vfleet-ready").is_file():
        print(f"AIC venv {venv} missing: running scripts/install-aiconfigurator.sh", flush=True)
        subprocess.run([str(REPO / "scripts" / "install-aiconfigurator.sh"), str(venv)], check=True)
    env = {**os.environ, REEXEC_MARK: "1"}
    os.execve(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]], env)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run scenarios whose name contains this text")
    ap.add_argument("--workload", default="chat", help="vfleet workload: preset or file")
    ap.add_argument(
        "--fixed-lengths",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give vfleet p99 = mean lengths, like AIC's fixed ISL/OSL closed loop (default)",
    )
    ap.add_argument(
        "--vllm-version", default=AIC_VLLM, help="release vfleet plans for (default: AIC's data)"
    )
    ap.add_argument(
        "--measured",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also score the published measurements with both tools (default)",
    )
    ap.add_argument("--timeout", type=float, default=420, help="AIC seconds per call group")
    ap.add_argument(
        "--aic-venv", type=Path, default=Path(os.environ.get("AIC_VENV", DEFAULT_AIC_VENV))
    )
    ap.add_argument("--vfleet", type=Path, default=REPO / ".venv" / "bin" / "vfleet")
    ap.add_argument("--log", help="AIC log file (default: a temp file)")
    ap.add_argument("--json", help="also write the raw results here")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    if importlib.util.find_spec("aiconfigurator") is None:
        _reexec_under_aic(args.aic_venv)

    from importlib.metadata import version

    found = version("aiconfigurator")
    if found != AIC_VERSION:
        print(f"warning: aiconfigurator {found}, this bench was written for {AIC_VERSION}")
    tmp = Path(tempfile.mkdtemp(prefix="vfleet-aic-"))
    log = args.log or str(tmp / "aic.log")
    scenarios = [s for s in SCENARIOS if not args.only or args.only.lower() in s.name.lower()]
    started = time.perf_counter()
    systems = link_systems(scenarios, tmp / "aic_systems")
    rows = [run_scenario(sc, args, tmp, log, systems) for sc in scenarios]
    disagg_reasons(rows)
    measured = run_measured(args, log) if args.measured else None
    print_report(rows, measured, args)
    total = time.perf_counter() - started
    print(f"\nTotal {total:.0f} s; AIC log: {log}")
    if args.json:
        doc = {"scenarios": rows, "measured": measured}
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
