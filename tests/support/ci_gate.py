"""Tests that need a tool, a root machine or the engine: skip on a developer machine that
lacks it, fail under CI (CI=true), which must have it."""

from __future__ import annotations

import os

import pytest


def require(ok: bool, reason: str, kind: str = "these tests") -> None:
    if ok:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: {kind} never skip)", pytrace=False)
    pytest.skip(reason)
