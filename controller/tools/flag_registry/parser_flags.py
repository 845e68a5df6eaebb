"""A release's registry entry, built from the record of its live `vllm serve` parser
(parser_probe.py): every flag's spellings, whether it takes a value, its nargs, type, default,
choices and group come from argparse's own actions.

Two things argparse does not hold are read from text, and only these: the known values of a
flag whose metavar vLLM wrote as "{a,b,c} or ..." without enforcing them as choices, and the
deprecation sentence of a flag's help (argparse in Python 3.11 has no notion of a deprecated
option). The saved help text itself serves only to check that what users see matches the
parser (`compare_with_help`): the help formatter's output is the one thing the parser cannot
answer for.
"""

from __future__ import annotations

import re
from typing import Any

DEPRECATION_RE = re.compile(
    r"[^.]*(?:\bis deprecated\b|\bare deprecated\b|\[deprecated\]|^deprecated\b|"
    r"\bdeprecated:|\bwill be removed\b|\bdeprecated in favou?r\b|\bdeprecated, use\b)[^.]*\.?",
    re.I | re.M,
)
OPTION_LINE = re.compile(r"^  (-{1,2}[A-Za-z0-9].*)$")
BRACE_LIST = re.compile(r"\{([^{}]*)\}")
NOTE_CHARS = 240


def negation_pairs(options: list[str]) -> dict[str, str]:
    """negative option -> the positive one, for BooleanOptionalAction-style pairs.

    "--no-x" always negates "--x". For an --enable-x/--disable-x pair (0.33's
    EnableDisableAction) the declared option comes first and its inverse second, so
    "--disable-cascade-attn, --enable-cascade-attn" is a disable flag whose negation is
    --enable-cascade-attn.
    """
    longs = [o for o in options if o.startswith("--")]
    neg: dict[str, str] = {}
    for i, p in enumerate(longs):
        for o in longs[i + 1 :]:
            if o == "--no-" + p[2:]:
                neg[o] = p
            for a, b in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                if p.startswith(a) and o == b + p[len(a) :]:
                    neg[o] = p
    return neg


def known_values_of(metavar: str | list[str] | None, choices: list[str] | None) -> list[str] | None:
    """Values a flag lists but argparse does not enforce (a platform or plugin may add more).

    vLLM gives a Literal-or-str field a list as its metavar (help prints "['auto', 'fp8']"),
    and --tool-call-parser a "{a,b} or ..." string, which looks like argparse's enforced
    {choices} but is not one.
    """
    if isinstance(metavar, list):
        return metavar
    listed = BRACE_LIST.match(metavar or "")
    return listed.group(1).split(",") if listed and choices is None else None


def _metavar_text(metavar: str | list[str] | None) -> str | None:
    """The metavar as help prints it: a list as its repr."""
    return str(metavar) if isinstance(metavar, list) else metavar


def _nargs_text(nargs: int | str | None) -> str | None:
    """'?', '*', '+' or a count; None for exactly one value (or none: see takes_value)."""
    return None if nargs in (None, 0) else str(nargs)


def _deprecation_note(help_text: str | None) -> str | None:
    found = DEPRECATION_RE.search(help_text or "")
    return " ".join(found.group(0).split())[:NOTE_CHARS] if found else None


def _spellings(action: dict[str, Any]) -> tuple[str, list[str], dict[str, str], list[str]]:
    """(canonical, other positive spellings, negatives, hidden spellings) of one action."""
    shown: list[str] = action["option_strings"]
    negatives = negation_pairs(shown)
    positives = [o for o in shown if o not in negatives]
    canonical = next((o for o in positives if o.startswith("--")), positives[0])
    hidden = [o for o in action["registered"] if o not in shown]
    return canonical, [o for o in positives if o != canonical], negatives, hidden


def flag_entry(action: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(canonical spelling, registry entry) for one recorded action."""
    canonical, aliases, negatives, hidden = _spellings(action)
    # 0.33's EnableDisableAction keeps BooleanOptionalAction's "--no-<declared>" spellings
    # in the parser but out of help; the shown inverse (--enable-x <-> --disable-x) has none.
    bare = {o[2:] for o in (canonical, *aliases) if o.startswith("--")}
    hidden_negative = sorted(o for o in hidden if o.startswith("--no-") and o[5:] in bare)
    metavar = _metavar_text(action["metavar"])
    entry: dict[str, Any] = {
        "aliases": aliases,
        "takes_value": action["nargs"] != 0,
        "choices": action["choices"],
        "default": action["default"],
        "boolean_optional": bool(negatives),
        "group": action["group"],
    }
    # Optional keys only when they say something, to keep the file small.
    optional: dict[str, Any] = {
        "nargs": _nargs_text(action["nargs"]),
        "type": action["type"],
        "metavar": metavar,
        "known_values": known_values_of(action["metavar"], action["choices"]),
        "negative": sorted(negatives),
        "hidden_negative": hidden_negative,
        "hidden_aliases": sorted(o for o in hidden if o not in hidden_negative),
        "help_suppressed": action["suppressed"],
        "deprecation_note": _deprecation_note(action["help"]),
    }
    entry.update({k: v for k, v in optional.items() if v})
    return canonical, entry


def flags_from_parser(record: dict[str, Any]) -> dict[str, Any]:
    """{"flags": canonical -> entry, "option_index": every spelling -> canonical}."""
    flags: dict[str, Any] = {}
    index: dict[str, str] = {}
    for action in record["actions"]:
        # Positionals (the model tag) are not flags; --help is not a serving setting.
        if not action["option_strings"] or "--help" in action["option_strings"]:
            continue
        canonical, entry = flag_entry(action)
        if canonical in flags:
            raise ValueError(f"flag {canonical} recorded twice")
        flags[canonical] = entry
        for spelling in action["registered"]:
            index[spelling] = canonical
    return {"flags": dict(sorted(flags.items())), "option_index": dict(sorted(index.items()))}


def shown_in_help(text: str) -> set[str]:
    """Every option string the help text shows: argparse's invocation lines, '  -x, --x X'."""
    shown: set[str] = set()
    for line in text.splitlines():
        found = OPTION_LINE.match(line)
        if found:
            invocation = re.split(r"\s{2,}", found.group(1).strip(), maxsplit=1)[0]
            # Commas inside a {choice,list} are not followed by a space and a dash.
            shown.update(part.partition(" ")[0] for part in re.split(r", (?=-)", invocation))
    return shown


def compare_with_help(text: str, record: dict[str, Any]) -> dict[str, Any]:
    """Spellings the help text shows vs the parser's: the formatter must show every visible
    option string of every action whose help is not suppressed, and nothing else."""
    actions = [a for a in record["actions"] if a["option_strings"]]
    visible = {o for a in actions if not a["suppressed"] for o in a["option_strings"]}
    suppressed = {o for a in actions if a["suppressed"] for o in a["registered"]}
    shown = shown_in_help(text)
    return {
        "ok": shown == visible,
        "suppressed_options": sorted(suppressed),
        "visible_not_in_help": sorted(visible - shown),
        "in_help_not_visible": sorted(shown - visible),
    }
