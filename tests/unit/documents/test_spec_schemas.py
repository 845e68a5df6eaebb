"""The committed JSON Schemas are the ones the models generate, and they accept what the
models accept (the shipped inventories and group_vars, a planner's plan)."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from support.paths import REPO
from vfleet.documents import schemas
from vfleet.environment import pins


@pytest.mark.parametrize("name", sorted(schemas.SCHEMAS))
def test_committed_schema_is_generated_from_the_model(name):
    committed = (schemas.SCHEMA_DIR / f"{name}.schema.json").read_text()
    assert committed == schemas.render(name), (
        f"{name}.schema.json is stale: run .venv/bin/python -m vfleet.documents.schemas"
    )


def test_check_mode_reports_a_stale_schema(tmp_path, monkeypatch, capsys):
    for name in schemas.SCHEMAS:
        (tmp_path / f"{name}.schema.json").write_text(schemas.render(name))
    monkeypatch.setattr(schemas, "SCHEMA_DIR", tmp_path)
    assert schemas.main(["--check"]) == 0
    (tmp_path / "plan.schema.json").write_text("{}\n")
    assert schemas.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().out
    assert schemas.main([]) == 0 and (tmp_path / "plan.schema.json").read_text() != "{}\n"


def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((schemas.SCHEMA_DIR / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("env", ["local", "staging", "prod"])
def test_shipped_files_fit_the_schemas(env):
    inventory = yaml.safe_load((REPO / "inventories" / env / "hosts.yml").read_text())
    group_vars = yaml.safe_load((REPO / "inventories" / env / "group_vars/all.yml").read_text())
    group_vars = pins.resolve(group_vars, REPO)  # {{ vfleet_pins.KEY }}, as the deploy reads it
    assert not list(_validator("inventory").iter_errors(inventory))
    assert not list(_validator("deploy_vars").iter_errors(group_vars))


def test_schemas_refuse_what_the_models_refuse():
    assert list(_validator("deploy_vars").iter_errors({"vfleet_modle": "x"}))
    assert list(_validator("deploy_vars").iter_errors({"vfleet_wheelhouse_port": 0}))
    assert not list(_validator("deploy_vars").iter_errors({"vfleet_wheelhouse_port": "{{ p }}"}))
    assert list(_validator("inventory").iter_errors({"every": {}}))
    assert list(_validator("plan").iter_errors({"model": "m"}))
