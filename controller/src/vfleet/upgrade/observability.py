"""Metric names the deployment's observers read that the target release renames or drops:
the signals `vfleet doctor` reads (each lists every name it has had) and any `vllm:` name
in the bundle's own files (playbooks, roles, dashboards)."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from vfleet.observe.metrics import HISTOGRAMS, NAMES
from vfleet.upgrade.outcome import Finding
from vfleet.upgrade.release_facts import ReleaseFacts, metric_base

# Where a bundle keeps files that name vLLM's metrics (dashboards, alert rules, roles).
BUNDLE_DIRS = ("ansible", "dashboards", "monitoring")
BUNDLE_SUFFIXES = (".yml", ".yaml", ".json", ".j2", ".rules", ".py")
MAX_BUNDLE_FILE_BYTES = 4 << 20
_METRIC = re.compile(r"vllm:[a-z0-9_]+")


def _signals() -> dict[str, tuple[str, ...]]:
    """Doctor's signals, each with its names (newest first) as base names."""
    out: dict[str, tuple[str, ...]] = {}
    for signal, names in {**NAMES, **HISTOGRAMS}.items():
        bases = []
        for name in names:
            base = metric_base(name.partition("/")[0])  # "name/label value" reads one series
            if base not in bases:
                bases.append(base)
        out[signal] = tuple(bases)
    return out


def _renamed_to(name: str, after: ReleaseFacts) -> str:
    """The target's name most like `name` (a hint: the release notes say for sure)."""
    close = difflib.get_close_matches(name, sorted(after.metrics), n=1, cutoff=0.75)
    return close[0] if close else ""


def doctor_signals(before: ReleaseFacts, after: ReleaseFacts) -> list[Finding]:
    """Each name of a doctor signal the old release exports and the target drops."""
    found = []
    for signal, names in _signals().items():
        now = next((n for n in names if n in after.metrics), None)
        for old in (n for n in names if n in before.metrics and n not in after.metrics):
            if now is not None:
                detail = f"vLLM {after.version} drops it; doctor reads {now} there"
                instead = now
            else:
                guess = _renamed_to(old, after)
                detail = (
                    f"vLLM {after.version} exports none of {', '.join(names)}: doctor loses "
                    f"its {signal} signal"
                )
                instead = f"closest new name: {guess}" if guess else ""
            found.append(
                Finding("observability", "metric", old, f"doctor: {signal}", detail, instead)
            )
    return found


def bundle_metrics(root: Path, before: ReleaseFacts, after: ReleaseFacts) -> list[Finding]:
    """`vllm:` names in the bundle's files that the old release exports and the target
    does not (a name neither exports is not this upgrade's doing)."""
    found = []
    for folder in BUNDLE_DIRS:
        base_dir = root / folder
        if not base_dir.is_dir():
            continue
        for path in sorted(base_dir.rglob("*")):
            if path.suffix not in BUNDLE_SUFFIXES or not path.is_file() or path.is_symlink():
                continue
            if path.stat().st_size > MAX_BUNDLE_FILE_BYTES:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for number, line in enumerate(text.splitlines(), start=1):
                for name in sorted(set(_METRIC.findall(line))):
                    base = metric_base(name)
                    if base not in before.metrics or base in after.metrics:
                        continue
                    guess = _renamed_to(base, after)
                    found.append(
                        Finding(
                            "observability",
                            "metric",
                            name,
                            f"{path.relative_to(root).as_posix()}:{number}",
                            f"vLLM {after.version} no longer exports it",
                            f"closest new name: {guess}" if guess else "",
                        )
                    )
    return found
