"""Role variables checked as Ansible checks them when a role starts: each role's
meta/argument_specs.yml (the `main` entry point's options) fed to ansible-core's
ArgumentSpecValidator, the validator behind the validate_argument_spec task Ansible puts
in front of every role. So a value is accepted exactly when Ansible would accept it, with
Ansible's conversions ("12" is an int, "yes" a bool, "a,b" a list).

Where this differs from the run-time check, on purpose:
- a value Ansible templates at run time (a Jinja expression, or `!vault` anywhere in it) is
  skipped: only Ansible can resolve it;
- each variable is checked alone against its own option, so an option group_vars leave to
  the playbook is not "missing", and each error names its variable; a variable no role
  declares is not checked (group_vars hold other things too);
- a str or path option refuses a list or a mapping, which the validator would quietly turn
  into its Python text (`"['580']"`): never what an operator meant.

Plans, deploy variables and inventories are checked by the pydantic models in vfleet.documents
(plan.py, deploy.py); the JSON Schemas in vfleet/schemas/ are generated from those models
for editors (`python -m vfleet.documents.schemas`), not used for checking here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from vfleet.documents.deploy import is_templated
from vfleet.errors import UserError
from vfleet.inputs.files import load_yaml

_TEXT_TYPES = ("str", "path")


@dataclass(frozen=True)
class RoleOption:
    """One role variable: the role that declares it and a validator for it alone."""

    role: str
    validator: Any  # ansible.module_utils.common.arg_spec.ArgumentSpecValidator


def _one_value(kind: str) -> Callable[[Any], str]:
    """Ansible's own str/path check, refusing a list or a mapping first."""
    from ansible.module_utils.common.validation import check_type_path, check_type_str

    convert = check_type_str if kind == "str" else check_type_path

    def check(value: Any) -> str:
        if isinstance(value, list | dict):
            what = "list" if isinstance(value, list) else "mapping"
            raise TypeError(f"a {kind} is one value, not a {what}")
        return str(convert(value))  # Ansible's checkers return str (untyped)

    check.__name__ = kind  # the validator names the wanted type by it
    return check


def _tightened(option: dict[str, Any]) -> dict[str, Any]:
    """`option` with its str/path types (its own, its elements', its sub-options') refusing
    lists and mappings."""
    out = dict(option)
    if str(out.get("type", "str")) in _TEXT_TYPES:  # no type means str, as in Ansible
        out["type"] = _one_value(str(out.get("type", "str")))
    if out.get("elements") in _TEXT_TYPES:
        out["elements"] = _one_value(str(out["elements"]))
    if isinstance(out.get("options"), dict):
        out["options"] = {k: _tightened(v or {}) for k, v in out["options"].items()}
    return out


def _main_options(data: Any, spec_file: Path) -> dict[str, Any]:
    """argument_specs.main.options (a role without a `main` entry point declares nothing)."""
    node = data
    for key in ("argument_specs", "main", "options"):
        if node is not None and not isinstance(node, dict):
            break
        node = (node or {}).get(key)
    if node is not None and not isinstance(node, dict):
        raise UserError(f"{spec_file}: argument_specs.main.options must be a mapping")
    return node or {}


@cache
def role_options(roles_dir: Path) -> dict[str, tuple[RoleOption, ...]]:
    """Every variable the roles' `main` entry points declare -> the roles that declare it."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    options: dict[str, tuple[RoleOption, ...]] = {}
    for spec_file in sorted(roles_dir.glob("*/meta/argument_specs.yml")):
        role = spec_file.parent.parent.name
        main = _main_options(load_yaml(spec_file, "role argument spec").data, spec_file)
        for name, opt in main.items():
            validator = ArgumentSpecValidator({str(name): _tightened(opt or {})})
            options[str(name)] = (*options.get(str(name), ()), RoleOption(role, validator))
    return options


def _resolved_at_run_time(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_resolved_at_run_time(v) for v in value.values())
    if isinstance(value, list):
        return any(_resolved_at_run_time(v) for v in value)
    return is_templated(value)


def check_role_vars(values: dict[str, Any], roles_dir: Path, source: str) -> None:
    """Check each role variable in `values` (one file's, `source`) against every role that
    declares it; raise one UserError line on the first problem."""
    options = role_options(roles_dir)
    for name, value in values.items():
        if _resolved_at_run_time(value):
            continue
        for option in options.get(name, ()):
            errors = option.validator.validate({name: value}).error_messages
            if errors:
                reason = " ".join(str(errors[0]).split())  # one line, whatever Ansible wrote
                raise UserError(
                    f"{source}: {name}: {reason} (role {option.role}): "
                    f"see ansible/roles/{option.role}/README.md"
                )
