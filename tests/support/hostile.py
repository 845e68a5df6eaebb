"""Hypothesis strategies for hostile documents, shared by the loaders' property tests: the
values a YAML or JSON file can hold, with the numbers and strings that break naive code
(NaN, infinities, 400-digit integers, control characters, look-alike names)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

NUMBERS = [1e308, -1e308, float("inf"), float("nan"), 0, -1, 0.5, 10**7, 2**63]
STRINGS = ["1e308", "1.0e308", "nan", ".inf", "-1", "a\nb", "a\x00b", "\x1b[31m", "\u202e"]
STRINGS += ["x" * 200, "../x", "$(touch /tmp/x)"]

# Fast and reproducible: the loaders are pure, so every example must finish well in a second.
LOADER_SETTINGS = settings(
    max_examples=200,
    deadline=timedelta(seconds=1),
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def document_values(
    known_keys: Sequence[str], odd: Sequence[Any] = (), width: int = 4
) -> tuple[st.SearchStrategy[str], st.SearchStrategy[Any]]:
    """Keys (the known ones and random text) and nested values for a document's mappings."""
    keys = st.one_of(st.sampled_from(list(known_keys)), st.text(max_size=12))
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=-(10**400), max_value=10**400),
        st.floats(),
        st.text(max_size=40),
        st.sampled_from([*NUMBERS, *STRINGS, *odd]),
    )
    values = st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=width) | st.dictionaries(keys, inner, max_size=width)
        ),
        max_leaves=8,
    )
    return keys, values


def assert_one_line(message: str) -> None:
    """What every refusal must be: one non-empty line."""
    assert message and "\n" not in message and "\r" not in message, message
