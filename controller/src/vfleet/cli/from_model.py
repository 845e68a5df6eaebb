"""argparse flags from pydantic models, the way vLLM builds its CLI from its config classes.

One `--kebab-case` flag per field (the alias when it has one; an alias spelt `--flag` is the
flag itself): help is the field's description (its docstring, StrictModel sets
use_attribute_docstrings) followed by the default, the default is the field's, a bool is
store_true, a Literal gives choices, a list or tuple is a flag to repeat. Markers from
vfleet.documents.flag_types say the rest:
- Rule: the parser argparse runs on the text, so a range is written once, on the model,
  and argparse reports a bad value in its own words, "argument --tp: <the rule's message>";
- Metavar: how the help names the value;
- Derived: the default the help shows when the command works it out as it runs;
- OneOf: the flag is one of a group, exactly one of which must be given;
- NotAFlag: no flag (a value vfleet sets itself).
A field's other checks run when the command builds its model from the parsed values, where
it knows what they depend on (render's port range depends on the plan).
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from vfleet.documents.flag_types import Derived, Metavar, NotAFlag, OneOf, Rule

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """One argument per flag field of `model`, in field order."""
    groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for name, field in model.model_fields.items():
        base, metadata = _unwrap(field.annotation, tuple(field.metadata))
        flag = _flag(name, field, metadata)
        if flag is None:
            continue
        option, dest = flag
        one_of = _marker(metadata, OneOf)
        if one_of is None:
            parser.add_argument(option, **_settings(dest, field, base, metadata))
            continue
        if one_of.group not in groups:
            groups[one_of.group] = parser.add_mutually_exclusive_group(required=True)
        groups[one_of.group].add_argument(option, **_settings(dest, field, base, metadata))


def flag_values(model: type[BaseModel], args: argparse.Namespace) -> dict[str, Any]:
    """The values parsed for `model`'s flags, keyed as the model reads them (its aliases);
    a flag left unset (None) is left out, so the model's default applies."""
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        flag = _flag(name, field, _unwrap(field.annotation, tuple(field.metadata))[1])
        if flag is not None and (value := getattr(args, flag[1])) is not None:
            values[field.alias or name] = value
    return values


def from_namespace(model: type[M], args: argparse.Namespace) -> M:
    """The model of the parsed flags (validated again: a namespace built by hand is no
    different from one argparse filled)."""
    return model.model_validate(flag_values(model, args))


def _flag(name: str, field: FieldInfo, metadata: tuple[Any, ...]) -> tuple[str, str] | None:
    """(the option, its argparse dest), or None for a field that is not a flag."""
    if _marker(metadata, NotAFlag) is not None:
        return None
    if field.alias and field.alias.startswith("--"):
        return field.alias, field.alias[2:].replace("-", "_")
    dest = field.alias or name
    return "--" + dest.replace("_", "-"), dest


def _settings(dest: str, field: FieldInfo, base: Any, metadata: tuple[Any, ...]) -> dict[str, Any]:
    """add_argument's keywords for one field."""
    derived = _marker(metadata, Derived)
    default = None if field.is_required() else field.get_default(call_default_factory=True)
    settings: dict[str, Any] = {"dest": dest, "help": _help(field, default, derived)}
    if field.is_required() and derived is None and _marker(metadata, OneOf) is None:
        settings["required"] = True
    if (metavar := _marker(metadata, Metavar)) is not None:
        settings["metavar"] = metavar.metavar
    rule = _marker(metadata, Rule)
    if base is bool:
        return {**settings, "action": "store_true", "default": bool(default)}
    if get_origin(base) is Literal:
        return {**settings, "choices": get_args(base), "default": default}
    if rule is not None:
        return {**settings, "type": rule.parse, "default": default}
    if get_origin(base) in (list, tuple):
        # A repeated flag: each value is one item, parsed as the item's own type says.
        item, item_metadata = _unwrap(get_args(base)[0], ())
        parse = _text_parser(dest, item, item_metadata)
        settings["help"] = f"{settings['help'] or ''} (repeat)".strip()
        return {**settings, "action": "append", "type": parse, "default": list(default or ())}
    return {**settings, "type": _text_parser(dest, base, metadata), "default": default}


def _text_parser(dest: str, base: Any, metadata: tuple[Any, ...]) -> Callable[[str], Any] | None:
    """argparse's `type=` for a value: the field's Rule, else the text as given (a string
    whose other checks run on the model). Any other type without a Rule is a mistake in the
    model, found when the parser is built (tests build every command's)."""
    rule = _marker(metadata, Rule)
    if rule is not None:
        return rule.parse
    if base is str:
        return None
    raise TypeError(
        f"--{dest}: a {base} flag needs a vfleet.documents.flag_types.Rule to parse its text"
    )


def _help(field: FieldInfo, default: Any, derived: Derived | None) -> str | None:
    """The field's description and the default it takes (argparse reads % as formatting)."""
    text = " ".join((field.description or "").split())
    if derived is not None:
        text += f" (default: {derived.text})"
    elif not (default is None or isinstance(default, bool) or default in ([], ())):
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        text += f" (default {shown})"
    return text.strip().replace("%", "%%") or None


def _unwrap(annotation: Any, metadata: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
    """The type without `| None` (a flag's value is never None) and Annotated's wrapping,
    and every piece of metadata found on the way."""
    if get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            annotation = rest[0]
    if get_origin(annotation) is Annotated:
        base, *more = get_args(annotation)
        return _unwrap(base, (*more, *metadata))
    return annotation, metadata


def _marker(metadata: tuple[Any, ...], kind: type[T]) -> T | None:
    return next((m for m in metadata if isinstance(m, kind)), None)
