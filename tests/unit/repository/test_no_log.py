"""Every role task that handles a secret's value runs with no_log, so neither Ansible's
output nor its logs can carry it. A task that only tests whether a secret is set (`when`)
does not handle its value."""

from __future__ import annotations

import re

import yaml

from support.paths import REPO

ROLES = REPO / "ansible" / "roles"
SECRETS = ("vllm_hf_token", "vllm_launch_api_key", "loadtest_api_key")


def _mentions(value: object, names: set[str]) -> bool:
    text = yaml.safe_dump(value)
    return any(re.search(rf"\b{re.escape(n)}\b(?!_)", text) for n in names)


def _tasks(node, secrets: set[str]):
    """(task, the secret names in scope) for a task list, descending into blocks; a block's
    vars derived from a secret (e.g. an Authorization header) are secrets inside it."""
    for task in node or []:
        if not isinstance(task, dict):
            continue
        inner = set(secrets)
        for name, value in (task.get("vars") or {}).items():
            if _mentions(value, secrets):
                inner.add(name)
        if any(k in task for k in ("block", "rescue", "always")):
            for key in ("block", "rescue", "always"):
                yield from _tasks(task.get(key), inner)
        else:
            yield task, inner


def _handles_secret(task: dict, secrets: set[str]) -> bool:
    own = {k: v for k, v in task.items() if k not in ("when", "name", "vars")}
    return _mentions(own, secrets)


def test_tasks_that_handle_secrets_have_no_log():
    offenders = []
    checked = 0
    for path in sorted(ROLES.glob("*/tasks/*.yml")) + sorted(ROLES.glob("*/handlers/*.yml")):
        for task, secrets in _tasks(yaml.safe_load(path.read_text()), set(SECRETS)):
            if not _handles_secret(task, secrets):
                continue
            checked += 1
            if not task.get("no_log"):
                offenders.append(f"{path.relative_to(ROLES)}: {task.get('name')}")
    assert checked >= 3, "expected the roles to handle the HF token and the API key"
    assert not offenders, "tasks handling a secret without no_log:\n" + "\n".join(offenders)
