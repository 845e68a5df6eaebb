"""argparse flags from a pydantic model, the way vLLM builds its CLI from its config classes.

One `--kebab-case` flag per field (the alias when it has one): help is the field's
description (its docstring, StrictModel sets use_attribute_docstrings), default its
default, a bool is store_true, a Literal gives choices, a list is append. Any other value is
parsed by the field's own type and validators, so a range is written once, on the model;
argparse still reports a bad value in its own words, "argument --tp: <the rule's message>".
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

M = TypeVar("M", bound=BaseModel)


def add_arguments(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """One argument per field of `model`, in field order."""
    for name, field in model.model_fields.items():
        dest = field.alias or name
        base, metadata = _unwrap(field)
        kwargs: dict[str, Any] = {"dest": dest, "help": field.description}
        if field.is_required():
            kwargs["required"] = True
        elif field.default is not PydanticUndefined:
            kwargs["default"] = field.default
        for meta in metadata:
            if hasattr(meta, "metavar"):
                kwargs["metavar"] = meta.metavar
        if base is bool:
            kwargs["action"] = "store_true"
        elif get_origin(base) is Literal:
            kwargs["choices"] = get_args(base)
        elif get_origin(base) is list and not metadata:
            # A repeated flag: each value is one item, parsed as the item type says.
            kwargs["action"] = "append"
            kwargs["default"] = list(field.default or [])
            kwargs["type"] = _parser(get_args(base)[0], ())
        else:
            kwargs["type"] = _parser(base, metadata)
        parser.add_argument("--" + dest.replace("_", "-"), **kwargs)


def from_namespace(model: type[M], args: argparse.Namespace) -> M:
    """The model of the parsed flags (validated again: a namespace built by hand is no
    different from one argparse filled)."""
    fields = model.model_fields.items()
    return model.model_validate({f.alias or n: getattr(args, f.alias or n) for n, f in fields})


def _unwrap(field: FieldInfo) -> tuple[Any, tuple[Any, ...]]:
    """The field's type without `| None` (a flag's value is never None), and its metadata."""
    annotation: Any = field.annotation
    metadata: tuple[Any, ...] = tuple(field.metadata)
    if get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            annotation = rest[0]
    if get_origin(annotation) is Annotated:
        base, *more = get_args(annotation)
        return base, (*more, *metadata)
    return annotation, metadata


def _parser(base: Any, metadata: tuple[Any, ...]) -> Callable[[str], Any] | None:
    """An argparse `type=` that runs the field's validators on the text."""
    if base is str and not metadata:
        return None  # argparse's own: the text as given
    adapter: TypeAdapter[Any] = TypeAdapter(Annotated[base, *metadata] if metadata else base)

    def parse(text: str) -> Any:
        try:
            return adapter.validate_python(text)
        except ValidationError as exc:
            raise argparse.ArgumentTypeError(_message(exc)) from None

    return parse


def _message(exc: ValidationError) -> str:
    """The validator's own words (its ValueError), else pydantic's message for the error."""
    first = exc.errors(include_url=False)[0]
    error = (first.get("ctx") or {}).get("error")
    return str(error) if error is not None else str(first["msg"])
