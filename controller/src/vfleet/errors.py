"""Errors the CLI turns into exit code 2 and one actionable line."""


class UserError(Exception):
    """Bad input from the user: says what is wrong and what to do, never a traceback."""
