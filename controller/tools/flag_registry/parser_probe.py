"""Record vLLM's live `vllm serve` argument parser, from inside the release's own process.

The capture writes this file as the first part of a sitecustomize.py, so it is imported before
vLLM. With FLAGGEN_PROBE_OUT set, it wraps argparse.ArgumentParser.__init__ to remember every
parser, and at exit writes the serve parser's actions (option strings, type, default, choices,
nargs, metavar, help, group) and the vLLM platform that was active to that file. It only
reads argparse's objects; it changes nothing, so the help text printed in the same run is
what users see. The record is taken during a help run because vLLM fills in help strings only
when --help is on the command line. Imported any other way (the tests), it installs nothing.

Standard library only: it runs on the vLLM environment's interpreter.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
from typing import Any

RECORD_SCHEMA = "vfleet.flaggen_parser/1"
SERVE_PROG = "vllm serve"  # exactly: `vllm bench serve` is a different parser

_parsers: list[argparse.ArgumentParser] = []


def callable_name(fn: object) -> str | None:
    """`int`, `json.loads`, `vllm.engine.arg_utils.human_readable_int`: what converts a value."""
    if fn is None:
        return None
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return str(name) if module == "builtins" else f"{module}.{name}"


def default_text(default: object) -> str | None:
    """The default as ArgumentDefaultsHelpFormatter prints it (str()); None for no default."""
    if default is None or (isinstance(default, str) and default == argparse.SUPPRESS):
        return None
    return str(default)


def _group_titles(parser: argparse.ArgumentParser) -> dict[int, str | None]:
    titles: dict[int, str | None] = {}
    for group in parser._action_groups:
        for action in group._group_actions:
            titles.setdefault(id(action), group.title)
    return titles


def metavar_value(metavar: object) -> str | list[str] | None:
    """A list stays a list (vLLM's known values of a Literal-or-str field; help prints its
    repr); a tuple (one name per value of nargs=N) is joined as help prints it."""
    if isinstance(metavar, tuple):
        return " ".join(str(m) for m in metavar)
    if isinstance(metavar, list):
        return [str(m) for m in metavar]
    return None if metavar is None else str(metavar)


def describe_action(
    parser: argparse.ArgumentParser, action: argparse.Action, titles: dict[int, str | None]
) -> dict[str, Any]:
    """One action as argparse holds it. `registered` is every option string the parser maps to
    it: `option_strings` plus any spelling registered without being shown in help."""
    suppressed = action.help == argparse.SUPPRESS
    return {
        "option_strings": list(action.option_strings),
        "registered": [o for o, a in parser._option_string_actions.items() if a is action],
        "action": type(action).__name__,
        "dest": action.dest,
        "nargs": action.nargs,
        "type": callable_name(action.type),
        "default": default_text(action.default),
        "choices": None if action.choices is None else [str(c) for c in action.choices],
        "metavar": metavar_value(action.metavar),
        "required": bool(action.required),
        "help": None if suppressed else action.help,
        "suppressed": suppressed,
        "group": titles.get(id(action)),
    }


def describe_parser(parser: argparse.ArgumentParser) -> dict[str, Any]:
    titles = _group_titles(parser)
    return {
        "prog": parser.prog,
        "actions": [describe_action(parser, action, titles) for action in parser._actions],
    }


def _platform() -> str | None:
    module = sys.modules.get("vllm.platforms")
    if module is None:
        return None
    try:
        return type(module.current_platform).__name__
    except Exception as exc:
        return f"error: {exc!r}"


def _dump(out: str) -> None:
    serve = next((p for p in _parsers if p.prog == SERVE_PROG), None)
    record = {
        "schema": RECORD_SCHEMA,
        "platform": _platform(),
        "serve_parser": None if serve is None else describe_parser(serve),
    }
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(record, fh)


def install(out: str) -> None:
    """Remember every parser vLLM builds; write the record when the process exits."""
    original = argparse.ArgumentParser.__init__

    def remember(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _parsers.append(self)

    argparse.ArgumentParser.__init__ = remember  # type: ignore[method-assign]
    atexit.register(_dump, out)


if os.environ.get("FLAGGEN_PROBE_OUT"):
    install(os.environ["FLAGGEN_PROBE_OUT"])
