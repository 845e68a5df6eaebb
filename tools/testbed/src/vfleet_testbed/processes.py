"""The processes of a testbed's hosts, read from /proc: whether one still runs (the same
process, not a reused PID), its children, and signals that tolerate a process already gone."""

from __future__ import annotations

import os
from pathlib import Path


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    return fields[0], int(fields[19])


def start_time(pid: int) -> int | None:
    stat = _stat(pid)
    return stat[1] if stat else None


def alive(pid: int | None, started: int | None) -> bool:
    """The same process (not a reused PID) still runs; a zombie counts as gone."""
    if pid is None:
        return False
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z" and (started is None or stat[1] == started)


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def send_signal(pid: int, sig: int, group: bool = False) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
