"""Fixtures more than one test file uses; tests/conftest.py loads this module as a plugin
(`pytest_plugins`), so a test names them as parameters and imports nothing."""

from __future__ import annotations

import subprocess

import pytest


@pytest.fixture
def no_commands(monkeypatch):
    """Fail the test if the pipeline starts any process (Terraform, Ansible, ssh)."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"a command ran before the input was checked: {args[0]!r}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(subprocess, "run", refuse)
