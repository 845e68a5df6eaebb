"""`vfleet ARGS` run in this process: the same `main()` the console script calls, its exit
code and what it printed, without a Python start-up per call. The console script itself
is run as a process by test_cli.py's smoke test and the wheel test."""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from unittest import mock

from vfleet.cli.main import main


@dataclass
class Result:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def _stream() -> io.TextIOWrapper:
    # Text over bytes, as a terminal is: Ansible's display reaches for sys.stdout.buffer.
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue().decode("utf-8")


def vfleet(*args: str, env: dict[str, str] | None = None) -> Result:
    out, err = _stream(), _stream()
    patch = mock.patch.dict(os.environ, env or {}, clear=env is not None)
    with patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # --help and argparse's own exits
            code = exc.code if isinstance(exc.code, int) else 1
    return Result(list(args), code, _text(out), _text(err))
