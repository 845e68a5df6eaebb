"""Errors `testbed` turns into one line on stderr and an exit code."""

from __future__ import annotations


class TestbedError(Exception):
    """A failure with a message that says what to do; exit code 1 (2 for bad input)."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class UsageError(TestbedError):
    """Bad input or a machine that cannot host a testbed: exit code 2."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code=2)
