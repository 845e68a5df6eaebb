"""The registry document (controller/src/vfleet/data/vllm_flags.json): one entry per release,
built from that release's saved parser record, and its serialisation.

A release recorded before parser records existed (from its help text alone) has no record in
parser/; its entry is carried over from the current registry unchanged, so an offline rebuild
reproduces the file byte for byte. Capturing such a release again replaces it with an entry
built from its parser.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import parser_flags
import release_table
import wheel_capture

REPO = Path(__file__).resolve().parents[3]
OUT_JSON = REPO / "controller" / "src" / "vfleet" / "data" / "vllm_flags.json"
SCHEMA = "vfleet.vllm_flags/1"
TOOL = "controller/tools/flag_registry"

# Written into the registry as they are; the committed file holds this exact text.
NOTES: tuple[str, ...] = (
    "flags: keyed by the first long option string as printed by `vllm serve --help` "
    "(for 0.33's --enable-x/--disable-x pairs: the declared one, printed first).",
    "option_index: every option string the serve parser registers (visible in help, "
    "plus the hidden --no-<x> spellings of 0.33's EnableDisableAction) -> its flags "
    "key; capture.parser_check compares it with the live parser's option table.",
    "negative: the spellings that set a boolean_optional flag to False.",
    "choices: enforced by argparse. known_values: listed in the metavar but not "
    "enforced (vLLM's Literal-or-str fields).",
    "default: the '(default: ...)' text as printed; null when it printed None or "
    "nothing. Many None defaults are resolved later from the model or device.",
    "Not listed: spellings FlexibleArgumentParser rewrites before argparse sees them "
    "(underscores for dashes, -O<n>/-O <n> -> --optimization-level from 0.12, "
    "dotted keys such as --compilation-config.mode, --config YAML keys).",
    "Captured on vLLM's CpuPlatform: choices computed from the platform can differ "
    "on CUDA (see each version's caveats).",
    "option_history: option string -> releases (of `releases`) that accept it.",
)
# Added once a release is built from its parser record (parser_file).
PARSER_NOTES: tuple[str, ...] = (
    "Releases with parser_file: every field comes from the live `vllm serve` argparse "
    "parser's actions. default is str() of the action's default (what the help prints), "
    "null for None; type names the converter; nargs is argparse's; metavar is the one vLLM "
    "set (absent: argparse's own); hidden_aliases are spellings the parser accepts but help "
    "does not show; help_suppressed marks flags whose help is suppressed.",
    "Releases without parser_file were recorded from their help text before parser records "
    "were kept, and are carried over unchanged until captured again.",
)
SPECULATIVE_NOTE = (
    "--speculative-config method values by the first recorded release that "
    "accepts each (kept by hand in generate.py). Every recorded release spells the "
    "flag --speculative-config JSON; --speculative-model/--num-speculative-tokens "
    "predate 0.8.5.post1."
)


def describe(cap: dict[str, Any]) -> str:
    """One-sentence provenance of a release's parser record, from its recorded capture."""
    env = " ".join(f"{k}={v}" for k, v in cap.get("env", {}).items())
    return (
        f"the `vllm serve` argparse parser, recorded during `{cap.get('command')}` of the "
        f"upstream PyPI wheel {cap.get('wheel')} (only its pure-Python vllm/ package unpacked, "
        f"no .so; dist-info version marked +cpu), run by {cap.get('runtime')} on vLLM's "
        f"{cap.get('platform') or 'unknown platform'} with {env}; extra packages: "
        f"{', '.join(cap.get('extras', []))}; import shims: "
        f"{', '.join(cap.get('shims', [])) or 'none'}"
    )


def load_previous(path: Path = OUT_JSON) -> dict[str, Any]:
    """The current registry's entries by release; empty when there is none yet."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    versions = data.get("versions", {}) if isinstance(data, dict) else {}
    return versions if isinstance(versions, dict) else {}


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def entry_from_parser(
    version: str, record_text: str, help_text: str | None, capture_info: dict[str, Any]
) -> dict[str, Any]:
    """The registry entry of a release whose parser record was saved."""
    built = parser_flags.flags_from_parser(json.loads(record_text)["serve_parser"])
    key = release_table.version_key(version)
    help_file = {}
    if help_text is not None:
        help_file = {
            "help_file": f"{TOOL}/help/{version}.txt.gz",
            "help_sha256": _sha256(help_text),
        }
    return {
        "status": "ok",
        "source": describe(capture_info),
        "capture": capture_info,
        "parser_file": f"{TOOL}/parser/{version}.json.gz",
        "parser_sha256": _sha256(record_text),
        **help_file,
        "caveats": [c for first, last, c in release_table.CAVEATS if first <= key <= last],
        "flag_count": len(built["flags"]),
        "option_count": len(built["option_index"]),
        **built,
    }


def release_entry(
    version: str,
    captures: dict[str, wheel_capture.Capture],
    failures: dict[str, str],
    previous: dict[str, Any],
    folder: Path,
) -> dict[str, Any]:
    """Built from the saved parser record; else carried over; else unavailable."""
    prev = previous.get(version, {})
    record_text = wheel_capture.read_gzip(folder / "parser" / f"{version}.json.gz")
    if record_text is not None:
        cap = captures.get(version)
        # A skipped capture keeps what the earlier run recorded about how it was obtained.
        info = {k: v for k, v in vars(cap).items() if k != "version"} if cap else {}
        info = info or prev.get("capture", {})
        help_text = wheel_capture.read_gzip(folder / "help" / f"{version}.txt.gz")
        return entry_from_parser(version, record_text, help_text, info)
    if prev.get("status") == "ok":
        return dict(prev)
    reason = failures.get(version) or prev.get("reason")
    return {
        "status": "unavailable",
        "reason": reason or "parser not captured (run generate.py for this version)",
    }


def build_registry(
    captures: dict[str, wheel_capture.Capture],
    failures: dict[str, str],
    speculative_methods: dict[str, dict[str, str]],
    previous: dict[str, Any],
    folder: Path = wheel_capture.HERE,
) -> dict[str, Any]:
    """The whole registry; `folder` holds the saved parser/ records and help/ texts."""
    versions: dict[str, Any] = {}
    history: dict[str, list[str]] = {}
    for version in release_table.RELEASES:
        entry = release_entry(version, captures, failures, previous, folder)
        versions[version] = entry
        for option in entry.get("option_index", {}):
            history.setdefault(option, []).append(version)
    from_parser = any("parser_file" in e for e in versions.values())
    return {
        "schema": SCHEMA,
        "generated_by": f"{TOOL}/generate.py",
        "releases": list(release_table.RELEASES),
        "notes": [*NOTES, *(PARSER_NOTES if from_parser else ())],
        "versions": versions,
        "option_history": dict(sorted(history.items())),
        "speculative_methods": {"note": SPECULATIVE_NOTE, "methods": speculative_methods},
    }


def _dump(value: Any, path: tuple[str, ...], level: int) -> str:
    """Indented JSON, but one line per flag entry and per list of scalars (diffable, smaller)."""
    inline = (len(path) == 4 and path[0] == "versions" and path[2] == "flags") or (
        isinstance(value, list) and all(not isinstance(v, dict | list) for v in value)
    )
    if inline or not isinstance(value, dict | list) or not value:
        return json.dumps(value, ensure_ascii=False)
    pad, inner = " " * level, " " * (level + 1)
    if isinstance(value, list):
        items = [inner + _dump(v, (*path, str(i)), level + 1) for i, v in enumerate(value)]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    items = [
        inner + json.dumps(k, ensure_ascii=False) + ": " + _dump(v, (*path, k), level + 1)
        for k, v in value.items()
    ]
    return "{\n" + ",\n".join(items) + "\n" + pad + "}"


def registry_text(reg: dict[str, Any]) -> str:
    text = _dump(reg, (), 0) + "\n"
    if json.loads(text) != reg:
        raise AssertionError("registry serialisation is not faithful")
    return text


def write_registry(reg: dict[str, Any], path: Path = OUT_JSON) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(registry_text(reg))
