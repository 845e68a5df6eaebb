"""Role variables checked against the roles' own meta/argument_specs.yml.

Plans, deploy variables and inventories are checked by the pydantic models in vfleet.spec
(plan.py, deploy.py); the JSON Schemas in vfleet/schemas/ are generated from those models
for editors (`python -m vfleet.spec.schemas`), not used for checking here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from vfleet.errors import UserError
from vfleet.spec.files import Vaulted
from vfleet.spec.files import load_yaml as load_yaml_document

SCHEMA_DIR = Path(__file__).parent / "schemas"


def load_yaml(path: Path, what: str) -> Any:
    """Read one YAML file strictly; `what` names it in the error ("inventory", ...)."""
    return load_yaml_document(path, what).data


# ---- role variables, checked with the roles' own meta/argument_specs.yml --------------------

_TEMPLATE = re.compile(r"{{|{%")
_BOOL_WORDS = {"yes", "no", "true", "false", "on", "off", "1", "0", "y", "n"}


@dataclass(frozen=True)
class RoleOption:
    role: str
    type: str
    elements: str | None
    choices: tuple[Any, ...]


@cache
def role_options(roles_dir: Path) -> dict[str, RoleOption]:
    """Every role variable the bundle's roles declare, from meta/argument_specs.yml."""
    options: dict[str, RoleOption] = {}
    for spec_file in sorted(roles_dir.glob("*/meta/argument_specs.yml")):
        role = spec_file.parent.parent.name
        specs = yaml.safe_load(spec_file.read_text()) or {}
        for entry in (specs.get("argument_specs") or {}).values():
            for name, opt in (entry.get("options") or {}).items():
                options[name] = RoleOption(
                    role,
                    str(opt.get("type", "str")),
                    opt.get("elements"),
                    tuple(opt.get("choices") or ()),
                )
    return options


def _fits(value: Any, kind: str) -> bool:
    """Whether Ansible's argument-spec validation would accept `value` as `kind` (it converts
    numbers to strings and numeric/boolean words to int/bool, so this does too)."""
    if isinstance(value, Vaulted) or (isinstance(value, str) and _TEMPLATE.search(value)):
        return True  # decrypted or templated by Ansible at run time
    if kind in ("str", "path"):
        return isinstance(value, str | int | float) and not isinstance(value, bool)
    if kind == "int":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit())
    if kind == "float":
        if isinstance(value, bool):
            return False
        try:
            float(value)
        except (TypeError, ValueError):
            return False
        return True
    if kind == "bool":
        return isinstance(value, bool) or str(value).lower() in _BOOL_WORDS
    if kind == "list":
        return isinstance(value, list) or (isinstance(value, str) and "," in value)
    if kind == "dict":
        return isinstance(value, dict)
    return True  # raw, any


def check_role_vars(values: dict[str, Any], roles_dir: Path, source: str) -> None:
    """Check each role variable in `values` against the role that declares it."""
    options = role_options(roles_dir)
    for name, value in values.items():
        opt = options.get(name)
        if opt is None:
            continue
        shown = "<vaulted>" if isinstance(value, Vaulted) else repr(value)
        if not _fits(value, opt.type):
            raise UserError(
                f"{source}: {name} must be a {opt.type} (role {opt.role}), got {shown}: "
                f"see ansible/roles/{opt.role}/README.md"
            )
        if opt.type == "list" and opt.elements and isinstance(value, list):
            for item in value:
                if not _fits(item, opt.elements):
                    raise UserError(
                        f"{source}: every item of {name} must be a {opt.elements} "
                        f"(role {opt.role}), got {item!r}"
                    )
        plain = isinstance(value, str | int) and not _TEMPLATE.search(str(value))
        if opt.choices and plain and value not in opt.choices:
            raise UserError(
                f"{source}: {name} is {shown}; role {opt.role} accepts "
                f"{', '.join(map(str, opt.choices))}"
            )
