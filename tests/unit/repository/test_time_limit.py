"""The per-test time limit (tests/support/time_limit.py) fails a slow test and passes a quick one.

The limits are lowered for the inner run so that the check takes a second, not a minute."""

from __future__ import annotations

import pytest

from support import time_limit
from support.paths import TESTS as TESTS_DIR

pytest_plugins = ["pytester"]

CONFTEST = TESTS_DIR / "conftest.py"

TESTS = """
import time
import pytest
from support.paths import TESTS

@pytest.fixture
def slow_setup():
    time.sleep(0.4)

def test_quick():
    pass

def test_slow_body():
    time.sleep(0.4)

def test_slow_setup(slow_setup):
    pass

@pytest.mark.engine
def test_engine_gets_more(slow_setup):
    pass
"""


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini(
        f"[pytest]\n{time_limit.FAST_OPTION} = 0.2\n{time_limit.END_TO_END_OPTION} = 5\n"
        "markers =\n    engine: a real engine\n"
    )
    pytester.makepyfile(test_timed=TESTS)
    return pytester


def test_a_slow_body_or_setup_fails_and_names_the_limit(inner: pytest.Pytester) -> None:
    result = inner.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_timed.py::test_slow_body took * s, over the 0.2 s a fast test may take*",
            "*test_timed.py::test_slow_setup took * s, over the 0.2 s a fast test may take*",
        ]
    )


def test_a_failing_test_keeps_its_own_failure(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_broken="import time\ndef test_broken():\n    time.sleep(0.3)\n    assert 1 == 2\n"
    )
    result = inner.runpytest("-p", "no:cacheprovider", "test_broken.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*assert 1 == 2*"])
    result.stdout.no_fnmatch_line("*over the*")
