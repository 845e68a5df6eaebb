"""Value types shared by the boundary models: each one says what it accepts in its name.

Anything that can end up in a file name, a shell script, a systemd unit or an env file is
narrowed here to what those formats take without quoting surprises: host names and engine
ids are RFC 1123 labels, interfaces are Linux interface names, paths are absolute and free
of control characters.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import AfterValidator, Field

_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_IFNAME = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_label(value: str) -> str:
    if not _LABEL.fullmatch(value):
        raise ValueError(
            "must be an RFC 1123 label: 1-63 letters, digits and inner hyphens (e.g. gpu-node-01)"
        )
    return value


def check_address(value: str) -> str:
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    name = value.removesuffix(".")
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(p) for p in name.split(".")):
        raise ValueError("must be an IP address or a DNS name (e.g. 10.0.0.11 or gpu01.example)")
    if name.replace(".", "").isdigit():
        raise ValueError("is neither an IP address nor a DNS name (a DNS name has a letter)")
    return value


def check_interface(value: str) -> str:
    if not _IFNAME.fullmatch(value):
        raise ValueError("must be a Linux interface name of 1-15 characters (e.g. eth0, ens5f0)")
    return value


def check_abs_path(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters (a newline, a tab, ...)")
    if not value.startswith("/") or len(value) > 4096:
        raise ValueError("must be an absolute path (e.g. /srv/models/model)")
    return value


def check_cidr(value: str) -> str:
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError("must be an IP network in CIDR form (e.g. 10.0.0.0/16)") from None
    return value


Label = Annotated[str, AfterValidator(check_label)]
"""A host name or an engine id: it becomes a file name, a unit name and shell text."""
Address = Annotated[str, AfterValidator(check_address)]
Interface = Annotated[str, AfterValidator(check_interface)]
AbsPath = Annotated[str, AfterValidator(check_abs_path)]
Cidr = Annotated[str, AfterValidator(check_cidr)]
Port = Annotated[int, Field(ge=1, le=65535)]
Count = Annotated[int, Field(ge=1)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What a unit path may hold: WorkingDirectory= and EnvironmentFile= take it verbatim while
# ReadWritePaths= splits on spaces and unquotes, so only text all three read alike.
_UNIT_PATH = re.compile(r"/[A-Za-z0-9_@%+=:,./-]*")


def check_unit_path(value: str) -> str:
    """The value check behind `unit_path`, for pydantic and argparse alike."""
    if not _UNIT_PATH.fullmatch(value):
        raise ValueError(
            "must be an absolute path of letters, digits and _@%+=:,./- only (it goes into "
            "systemd unit directives that cannot quote spaces, quotes, backslashes or $)"
        )
    return value


def check_env_key(value: str) -> str:
    if not _IDENTIFIER.fullmatch(value):
        raise ValueError("must be a shell identifier: letters, digits and _ (e.g. NCCL_DEBUG)")
    return value
