"""Escaping for the three formats `vfleet render` writes: bash, systemd units, env files.

Each format has its own Jinja2 environment whose `finalize` refuses any value that did not
pass through that format's filter, so a template cannot paste a raw value by mistake:

- launch.sh (`shquote`, `sh_comment`): every value is one shell word, quoted by
  shlex.quote; comments take no newline;
- systemd units (`unit_text`, `unit_path`): `%` doubled (systemd expands specifiers
  everywhere); paths, the executable of ExecStart= included, refuse what the directives
  cannot carry (systemd refuses an executable name with quotes, spaces or `$` in it, and
  WorkingDirectory= does not unquote);
- vllm.env (`env_key`, `env_value`): a shell identifier, and a value bare when it is plain,
  otherwise double-quoted with systemd's EnvironmentFile escapes.

Newlines and other control characters are refused in all three: no format can carry them
without changing what the line means.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vfleet.errors import UserError
from vfleet.inputs.values import check_env_key, check_unit_path

if TYPE_CHECKING:
    from jinja2 import Environment

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Characters every format takes bare (shlex's own safe set, without quoting).
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]*")


class Shell(str):
    """Text already quoted for bash."""


class Unit(str):
    """Text already escaped for a systemd unit file."""


class EnvFile(str):
    """Text already escaped for a systemd EnvironmentFile."""


def _text(value: Any, where: str) -> str:
    text = str(value)
    if _CONTROL.search(text):
        raise UserError(
            f"{text[:40]!r}... contains a newline or another control character, which {where} "
            "cannot carry: remove it"
        )
    return text


def shquote(value: Any) -> Shell:
    """One bash word that expands to exactly `value`."""
    return Shell(shlex.quote(_text(value, "a shell script")))


def sh_comment(value: Any) -> Shell:
    """Text for a `#` comment: anything but a line break."""
    return Shell(_text(value, "a shell comment"))


def unit_text(value: Any) -> Unit:
    """A directive value or comment: specifiers disarmed."""
    return Unit(_text(value, "a systemd unit").replace("%", "%%"))


def unit_path(value: Any) -> Unit:
    """A path for ExecStart=, WorkingDirectory=, EnvironmentFile=, ReadWritePaths=."""
    text = _text(value, "a systemd unit")
    try:
        check_unit_path(text)
    except ValueError as exc:
        raise UserError(f"{text[:60]!r} {exc}: choose a plainer path") from None
    return Unit(text.replace("%", "%%"))


def env_key(value: Any) -> EnvFile:
    text = str(value)
    try:
        check_env_key(text)
    except ValueError as exc:
        raise UserError(f"environment name {text[:40]!r} {exc}") from None
    return EnvFile(text)


def env_value(value: Any) -> EnvFile:
    """A value systemd's EnvironmentFile parser reads back as exactly `value`."""
    text = _text(value, "an environment file")
    if _PLAIN.fullmatch(text):
        return EnvFile(text)
    # Inside double quotes systemd turns \" \\ \` \$ into the bare character.
    return EnvFile('"' + re.sub(r'(["\\`$])', r"\\\1", text) + '"')


def _finalize(kind: type[str], numbers: bool) -> Callable[[Any], Any]:
    def finalize(value: Any) -> Any:
        if isinstance(value, kind):
            return value
        if numbers and isinstance(value, int) and not isinstance(value, bool):
            return value
        # A template bug, not bad input: the value skipped its format's filter.
        raise TypeError(
            f"unfiltered value {str(value)[:40]!r} in a {kind.__name__} template: "
            "pass it through the format's filter"
        )

    return finalize


def environments() -> dict[str, Environment]:
    """Template suffix -> the Jinja2 environment that renders it."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    def make(kind: type[str], numbers: bool, filters: dict[str, Any]) -> Environment:
        env = Environment(
            loader=PackageLoader("vfleet", "templates"),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            finalize=_finalize(kind, numbers),
            autoescape=False,
        )
        env.filters.clear()  # no stock filter may turn a checked value back into a str
        env.filters.update(filters)
        return env

    return {
        ".sh.j2": make(Shell, False, {"shquote": shquote, "comment": sh_comment}),
        ".service.j2": make(Unit, True, {"unit": unit_text, "unit_path": unit_path}),
        ".env.j2": make(EnvFile, False, {"env_key": env_key, "env_value": env_value}),
    }
