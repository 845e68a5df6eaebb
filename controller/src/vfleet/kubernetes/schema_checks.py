"""Every manifest checked before it is written, in four passes, the first failure one line:

1. yamllint: the text is well-formed YAML in one consistent style;
2. the text reads back (yaml.safe_load) as exactly the object built, so no value changed
   meaning on the way (a name that YAML would read as a boolean, a `!!tag`, a `#`);
3. core kinds (Service, ConfigMap, Deployment) against the Kubernetes release's own schemas
   with kubernetes-validate in strict mode (unknown keys refused);
4. the LeaderWorkerSet against the schema of the LWS CRD (vendored in vfleet/data/k8s with
   its source), read strictly: the API server would prune an unknown key such as a
   misspelt `resorces:` without a word, so every object without
   x-kubernetes-preserve-unknown-fields is closed (`additionalProperties: false`).

The same schema can be given to check-jsonschema (tests/unit/kubernetes show both agree).
The libraries are the `kubernetes` extra (`pip install 'vfleet[kubernetes]'`, in `make
setup`); they are imported here only, so other commands do not pay for them.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import yaml

from vfleet.errors import UserError

MISSING = (
    "vfleet render --target lws checks every manifest with yamllint, kubernetes-validate and "
    "jsonschema before writing it: install them with pip install 'vfleet[kubernetes]'"
)
# yamllint's default style, but PyYAML's line breaking and block indentation are the style.
YAMLLINT = """
extends: default
rules:
  line-length: disable
  indentation: {spaces: 2, indent-sequences: consistent}
"""


def closed(node: Any) -> Any:
    """The schema with every object that lists its properties closed to others."""
    if isinstance(node, list):
        return [closed(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: closed(v) for k, v in node.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def lws_schema(strict: bool = True) -> dict[str, Any]:
    text = resources.files("vfleet.data").joinpath("k8s/leaderworkerset-v1.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return closed(schema) if strict else schema


@cache
def _lint_config() -> Any:
    from yamllint.config import YamlLintConfig

    return YamlLintConfig(YAMLLINT)


def _where(path: Any) -> str:
    return ".".join(str(p) for p in path) or "(top)"


def _lint(name: str, text: str) -> None:
    from yamllint import linter

    for problem in linter.run(text, _lint_config()):
        if problem.level == "error":
            raise UserError(
                f"vfleet rendered {name} with a YAML problem at line {problem.line}: "
                f"{problem.desc} ({problem.rule}); this is a vfleet bug, please report it"
            )


def _check_lws(name: str, body: dict[str, Any]) -> None:
    import jsonschema

    validator = jsonschema.Draft202012Validator(lws_schema())
    error = next(iter(sorted(validator.iter_errors(body), key=lambda e: list(e.path))), None)
    if error is not None:
        raise UserError(
            f"{name}: {_where(error.absolute_path)}: {error.message[:200]} (the LeaderWorkerSet "
            "v1 schema refuses it): check the values given to vfleet render"
        )


def _check_core(name: str, body: dict[str, Any], version: str) -> None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(body, version, strict=True)
    except kubernetes_validate.ValidationError as exc:  # a jsonschema error, copied over
        raise UserError(
            f"{name}: {_where(exc.absolute_path)}: {exc.message[:200]} (Kubernetes "
            f"{version}'s {body['kind']} schema refuses it): check the values given to "
            "vfleet render"
        ) from None
    except kubernetes_validate.utils.VersionNotSupportedError:
        raise UserError(
            f"--kubernetes-version {version}: kubernetes-validate has no schemas for it; "
            f"use {kubernetes_validate.latest_version()} or older"
        ) from None


def validate(files: dict[str, str], objects: dict[str, dict[str, Any]], version: str) -> None:
    """`files` maps each file name to its text, `objects` to what it must read back as."""
    try:
        import jsonschema  # noqa: F401
        import kubernetes_validate  # noqa: F401
        import yamllint  # noqa: F401
    except ImportError:
        raise UserError(MISSING) from None
    for name, text in files.items():
        _lint(name, text)
        if name not in objects:
            continue
        body = objects[name]
        if yaml.safe_load(text) != body:
            raise UserError(f"vfleet rendered {name} that reads back differently: a vfleet bug")
        if body["kind"] == "LeaderWorkerSet":
            _check_lws(name, body)
        else:
            _check_core(name, body, version)
