"""How long one test may take (its set-up and its body), by tier.

CI has 90 minutes for the whole of `make test` on two cores; a test that quietly grows is
how the suite outgrew it once. The fast tier (no engine, no test hosts) runs about a
thousand tests in a couple of minutes, so one of them past a minute is a mistake to fix:
share its set-up in a fixture, shrink its input, or move it to a slower tier. Tests that
start a real vLLM engine or boot test hosts are end-to-end by nature (an engine loads in
30-60 s on two busy cores); they get a larger bound that still catches a runaway. The
deploy scenarios in tests/e2e are the suite's long stories and are bounded by their own
timeouts instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.paths import TESTS

# Defaults of the ini options that set them (the check's own test lowers them).
FAST_LIMIT_S = 60.0
END_TO_END_LIMIT_S = 300.0
FAST_OPTION, END_TO_END_OPTION = "fast_test_limit_s", "end_to_end_test_limit_s"
E2E_DIR = TESTS / "e2e"

# The set-up phase's duration, kept until the body's report is made.
SETUP_S = pytest.StashKey[float]()


def add_options(parser: pytest.Parser) -> None:
    parser.addini(FAST_OPTION, "seconds a fast test may take", default=str(FAST_LIMIT_S))
    parser.addini(
        END_TO_END_OPTION,
        "seconds a test with an engine or test hosts may take",
        default=str(END_TO_END_LIMIT_S),
    )


def limit_for(item: pytest.Item) -> tuple[float, str] | None:
    """The limit that applies to `item` and what kind of test it is; None for tests/e2e."""
    if E2E_DIR in Path(item.path).parents:
        return None
    if item.get_closest_marker("engine") or item.get_closest_marker("testbed"):
        return float(item.config.getini(END_TO_END_OPTION)), "a test with an engine or test hosts"
    return float(item.config.getini(FAST_OPTION)), "a fast test"


def over_limit(item: pytest.Item, took_s: float) -> str | None:
    """Why `item` failed its limit after `took_s` seconds, or None if it is within it."""
    found = limit_for(item)
    if found is None or took_s <= found[0]:
        return None
    limit, tier = found
    return (
        f"{item.nodeid} took {took_s:.1f} s, over the {limit:g} s {tier} may take "
        "(tests/support/time_limit.py): share its set-up in a fixture, shrink its input, or move "
        "it to a slower tier"
    )
