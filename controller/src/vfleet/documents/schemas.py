"""Write vfleet/schemas/*.schema.json from the models, for editors and other tools.

The models in vfleet.documents are what vfleet checks with; these JSON Schemas are derived from
them and committed so an editor's YAML/JSON plugin can complete and flag fields. After
changing a model, regenerate them:

    .venv/bin/python -m vfleet.documents.schemas

tests/unit/documents/test_spec_schemas.py fails while a committed schema differs from its model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from vfleet.documents.deploy import DeployVars, Inventory
from vfleet.documents.facts import FactsModel
from vfleet.documents.plan import Plan

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"

SCHEMAS: dict[str, tuple[type[BaseModel], str, str]] = {
    "plan": (
        Plan,
        "vfleet plan (vfleet plan --out FILE)",
        "What `vfleet render` reads; generated from vfleet.documents.plan.Plan.",
    ),
    "deploy_vars": (
        DeployVars,
        "vfleet deploy variables (inventories/<env>/group_vars/*.yml)",
        "The vfleet_* variables and firewall source lists; role variables are checked "
        "against each role's meta/argument_specs.yml. Generated from "
        "vfleet.documents.deploy.DeployVars.",
    ),
    "facts": (
        FactsModel,
        "vfleet normalised probe facts (artifacts/<env>/facts/<host>.json, vfleet.facts/1)",
        "One GPU host as the topology probe saw it; generated from "
        "vfleet.documents.facts.FactsModel.",
    ),
    "inventory": (
        Inventory,
        "vfleet inventory (inventories/<env>/hosts.yml, artifacts/<env>/hosts.yml)",
        "An Ansible YAML inventory; generated from vfleet.documents.deploy.Inventory.",
    ),
}


def generate(name: str) -> dict[str, Any]:
    """The JSON Schema of one document, as committed."""
    model, title, description = SCHEMAS[name]
    body = model.model_json_schema()
    head = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://vfleet.dev/schemas/{name}.schema.json",
        "title": title,
        "description": description,
    }
    body.pop("title", None)
    body.pop("description", None)
    if name == "deploy_vars":
        # group_vars also hold role variables: any name that is not vfleet_* is theirs.
        body["patternProperties"] = {"^(?!vfleet_|firewall_(ssh|api)_sources$)": {}}
    return {**head, **body}


def render(name: str) -> str:
    return json.dumps(generate(name), indent=2, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write every schema; `--check` only reports the ones that differ (exit 1)."""
    args = sys.argv[1:] if argv is None else argv
    stale = []
    for name in SCHEMAS:
        path = SCHEMA_DIR / f"{name}.schema.json"
        text = render(name)
        if path.is_file() and path.read_text() == text:
            continue
        stale.append(path)
        if "--check" not in args:
            path.write_text(text)
    for path in stale:
        print(f"{'stale' if '--check' in args else 'wrote'} {path}")
    return 1 if stale and "--check" in args else 0


if __name__ == "__main__":
    raise SystemExit(main())
