"""One model check, one line: the first problem pydantic finds, with the file, the YAML
line, the field, what is wrong and what to write instead (the field's description)."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from vfleet.errors import UserError
from vfleet.inputs.files import Document, Path_

M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], doc: Document, context: dict[str, Any] | None = None) -> M:
    """`doc.data` as `model`, or a UserError naming the first problem."""
    try:
        return model.model_validate(doc.data, context=context)
    except ValidationError as exc:
        raise UserError(describe(exc, model, doc)) from None


def _data_path(data: Any, loc: Sequence[Any]) -> Path_:
    """The part of pydantic's error location that names keys and items of the data (it also
    holds the names of union members and validators, which the data does not have)."""
    path: list[str | int] = []
    node = data
    for step in loc:
        if step == "[key]":  # pydantic's marker after a mapping key that failed: name the key
            break
        in_mapping = isinstance(node, Mapping) and step in node
        in_list = isinstance(node, list | tuple) and isinstance(step, int) and 0 <= step < len(node)
        if in_mapping or in_list:
            path.append(step)
            node = node[step]
        elif isinstance(node, Mapping) and step == loc[-1] and isinstance(step, str):
            path.append(step)  # a missing key: name it
            node = None
    return tuple(path)


def _members(tp: Any) -> list[Any]:
    """The types an annotation may hold: unions and Annotated unwrapped."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _members(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(tp) for m in _members(arg)]
    return [tp]


def _step(tp: Any, step: str | int) -> tuple[Any, str]:
    """The annotation one step down, and that field's description."""
    for member in _members(tp):
        if isinstance(step, str) and isinstance(member, type) and issubclass(member, BaseModel):
            for name, info in member.model_fields.items():
                if step in (name, info.alias):
                    return info.annotation, info.description or ""
        origin = typing.get_origin(member)
        args = typing.get_args(member)
        if isinstance(step, int) and origin in (list, tuple) and args:
            return args[0], ""
        if isinstance(step, str) and origin is dict and len(args) == 2:
            return args[1], ""
    return None, ""


def _known_keys(model: type[BaseModel], path: Path_) -> list[str]:
    tp: Any = model
    for step in path:
        tp, _ = _step(tp, step)
    keys: list[str] = []
    for member in _members(tp):
        if isinstance(member, type) and issubclass(member, BaseModel):
            keys += [info.alias or name for name, info in member.model_fields.items()]
    return keys


def _description(model: type[BaseModel], path: Path_) -> str:
    tp: Any = model
    found = ""
    for step in path:
        tp, text = _step(tp, step)
        found = text or (found if isinstance(step, int) else "")
    return " ".join(found.split())


def _dotted(path: Path_) -> str:
    out = ""
    for step in path:
        if isinstance(step, str) and not step.isprintable():
            step = repr(step)  # a key with a newline would break the one-line message
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out or "top level"


def _shown(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe(exc: ValidationError, model: type[BaseModel], doc: Document) -> str:
    errors = exc.errors(include_url=False)
    paths = [_data_path(doc.data, e["loc"]) for e in errors]
    # The most specific problem; on a tie an unknown key first, since it is most often the
    # misspelling of the key reported missing beside it.
    best = max(
        range(len(errors)),
        key=lambda i: (len(paths[i]), errors[i]["type"] == "extra_forbidden", -i),
    )
    error, path = errors[best], paths[best]
    line = doc.line_of(path)
    where = doc.source + (f" line {line}" if line else "")
    kind = error["type"]
    if kind == "extra_forbidden":
        known = _known_keys(model, path[:-1])
        guess = difflib.get_close_matches(str(path[-1]), known, n=1, cutoff=0.6)
        advice = f"did you mean {guess[0]!r}?" if guess else f"known keys: {', '.join(known)}"
        return f"{where}: {_dotted(path)}: unknown key: {advice}"
    message = "is missing" if kind == "missing" else error["msg"].removeprefix("Value error, ")
    # A rule about a whole mapping (a model validator) says what is wrong in its message;
    # "got a mapping" after it says nothing more. A flag's rule already names the value.
    if kind != "missing" and not isinstance(error.get("input"), dict) and ", got " not in message:
        message += f", got {_shown(error.get('input'))}"
    hint = _description(model, path)
    return f"{where}: {_dotted(path)}: {message}" + (f"; expected {hint}" if hint else "")
