"""Shared by every test folder. pytest.ini puts this folder on sys.path (`pythonpath = tests`),
so the helpers in tests/support import as `support.<module>` from any test module; the
fixtures of support/fixtures.py are loaded here as a plugin.

It also holds the time limit of a single test (tests/support/time_limit.py), so that a slow
test is seen the day it is added instead of when CI runs out of time."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from support import time_limit

pytest_plugins = ["support.fixtures"]


def pytest_addoption(parser: pytest.Parser) -> None:
    time_limit.add_options(parser)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "setup":
        item.stash[time_limit.SETUP_S] = call.duration
    elif report.when == "call" and report.passed:
        took = item.stash.get(time_limit.SETUP_S, 0.0) + call.duration
        over = time_limit.over_limit(item, took)
        if over:
            report.outcome = "failed"
            report.longrepr = over
