"""What the target release refuses or ignores in the deployment as rendered today: flags its
parser rejects (the engine stops with "unrecognized arguments"), environment variables it no
longer reads, and fields its JSON configs no longer have."""

from __future__ import annotations

import json

from vfleet.catalog.flag_registry import FlagSet
from vfleet.upgrade.outcome import Finding
from vfleet.upgrade.release_facts import CONFIG_FLAGS, ReleaseFacts
from vfleet.upgrade.rendered import RenderedEngine


def _counterpart(before: RenderedEngine, after: list[RenderedEngine]) -> RenderedEngine | None:
    same = [e for e in after if e.where == before.where]
    return same[0] if same else None


def _flags_instead(flag: str, before: RenderedEngine, twin: RenderedEngine | None) -> str:
    if twin is None:
        return "the target's rendering has no such engine"
    new = sorted(set(twin.options()) - set(before.options()))
    if flag in twin.options():
        return f"vfleet still renders {flag}"
    if new:
        return "vfleet renders " + ", ".join(new) + " and leaves it out"
    return "vfleet leaves it out"


def flag_breaks(
    before: list[RenderedEngine], after: list[RenderedEngine], target: FlagSet
) -> list[Finding]:
    found = []
    for engine in before:
        twin = _counterpart(engine, after)
        for flag in engine.options():
            if target.has(flag):
                continue
            found.append(
                Finding(
                    "breaks",
                    "flag",
                    flag,
                    f"{engine.where}/command.json",
                    f"vLLM {target.version}'s parser has no {flag}: the engine would stop "
                    "at start with 'unrecognized arguments'",
                    _flags_instead(flag, engine, twin),
                )
            )
    return found


def env_breaks(
    before: list[RenderedEngine], after: list[RenderedEngine], target: ReleaseFacts
) -> list[Finding]:
    found = []
    for engine in before:
        twin = _counterpart(engine, after)
        for name in sorted(engine.env):
            if not name.startswith("VLLM_") or name in target.envs:
                continue
            kept = twin is not None and name in twin.env
            found.append(
                Finding(
                    "breaks",
                    "env",
                    name,
                    f"{engine.where}/vllm.env",
                    f"vLLM {target.version} does not read {name}: what it sets is silently ignored",
                    "vfleet still sets it" if kept else "vfleet leaves it out",
                )
            )
    return found


def _fields(value: str | None) -> set[str]:
    try:
        doc = json.loads(value or "")
    except json.JSONDecodeError:
        return set()
    return set(doc) if isinstance(doc, dict) else set()


def config_breaks(
    before: list[RenderedEngine], after: list[RenderedEngine], target: ReleaseFacts
) -> list[Finding]:
    found = []
    for engine in before:
        twin = _counterpart(engine, after)
        options = engine.options()
        for flag, config in CONFIG_FLAGS.items():
            known = target.config_fields.get(config)
            if flag not in options or known is None:
                continue
            for name in sorted(_fields(options[flag]) - known):
                later = _fields(twin.options().get(flag)) if twin is not None else set()
                new = sorted(later - _fields(options[flag]))
                found.append(
                    Finding(
                        "breaks",
                        "config-field",
                        f"{flag} {name}",
                        f"{engine.where}/command.json",
                        f"vLLM {target.version}'s {flag} has no field {name!r}: the engine "
                        "refuses the JSON at start",
                        ("vfleet renders " + ", ".join(new)) if new else "vfleet leaves it out",
                    )
                )
    return found
