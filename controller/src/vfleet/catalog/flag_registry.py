"""Which `vllm serve` flags a release accepts, from data/vllm_flags.json.

That file is generated from each release's real `vllm serve --help` output by
controller/tools/flag_registry/generate.py. A release between two recorded ones takes the
flag set of the older one (flags are added more often than removed, so this errs towards
refusing). When the probe captured the host's own `--help=all`, that set wins.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from vfleet.catalog.releases import parse_version
from vfleet.data import DATA_DIR
from vfleet.errors import UserError

REGISTRY_FILE = DATA_DIR / "vllm_flags.json"


@dataclass(frozen=True)
class FlagSet:
    version: str  # the release the set was recorded from
    source: str
    flags: frozenset[str]  # every option string, aliases included

    @property
    def summary(self) -> str:
        if self.source.startswith("probed"):
            return f"probed on the host (vLLM {self.version})"
        return f"recorded from vLLM {self.version}'s own --help"

    def has(self, flag: str) -> bool:
        return flag in self.flags or flag.replace("_", "-") in self.flags


@cache
def _registry() -> dict[str, Any]:
    if not REGISTRY_FILE.is_file():
        return {"versions": {}}
    registry: dict[str, Any] = json.loads(REGISTRY_FILE.read_text())
    return registry


def recorded_versions() -> list[str]:
    versions = [v for v, entry in _registry()["versions"].items() if entry.get("flags")]
    return sorted(versions, key=parse_version)


def exact_record(version: str) -> str | None:
    """The recorded release that is `version` itself (None when only an older one is)."""
    wanted = parse_version(version)
    return next((v for v in recorded_versions() if parse_version(v) == wanted), None)


def flag_defaults(version: str) -> dict[str, str | None]:
    """Each flag of an exactly recorded release with the default its --help printed (None
    where it printed none: such defaults are resolved at start-up from the model or
    device)."""
    recorded = exact_record(version)
    if recorded is None:
        return {}
    flags = _registry()["versions"][recorded]["flags"]
    return {flag: info.get("default") for flag, info in flags.items()}


def flag_set(version: str, probed: tuple[str, ...] = ()) -> FlagSet:
    """The flags `version` accepts; `probed` (the host's own --help=all) wins."""
    if probed:
        return FlagSet(version, "probed from the host's vllm serve --help=all", frozenset(probed))
    wanted = parse_version(version)
    chosen = None
    for recorded in recorded_versions():
        if parse_version(recorded) <= wanted:
            chosen = recorded
    if chosen is None:
        known = ", ".join(recorded_versions()) or "none"
        raise UserError(
            f"no flag record for vLLM {version} (recorded: {known}): target a recorded "
            "release with --vllm-version, or probe the hosts so their own --help is used"
        )
    entry = _registry()["versions"][chosen]
    # option_index lists every spelling the release's parser accepts (aliases, negative
    # forms such as --disable-chunked-prefill, hidden --no- forms) -> its canonical flag.
    names: set[str] = set(entry.get("option_index") or {})
    for flag, info in entry["flags"].items():
        names.add(flag)
        names.update(info.get("aliases") or [])
        names.update(info.get("negative") or [])
        names.update(info.get("hidden_negative") or [])
    return FlagSet(chosen, entry.get("source", ""), frozenset(names))


def speculative_methods() -> dict[str, dict[str, str]]:
    """--speculative-config method name -> {"first": release, "source": ...}."""
    return dict((_registry().get("speculative_methods") or {}).get("methods") or {})
