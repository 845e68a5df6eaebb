"""vfleet's record of a playbook run: each host's outcome, read by the controller
(vfleet.environment.commands.host_failures) to tell the operator which host failed and why, whatever
the stdout callback prints."""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: vfleet_results
type: notification
short_description: Write each host's outcome of a playbook run to one JSON file
description:
  - At the end of the run, writes one JSON object to O(results_file) with, per host, its
    status (ok, failed or unreachable), the task that last failed there and that task's
    message on one line, and the PLAY RECAP counts.
  - Failures that were ignored are not recorded; a host whose failures were all rescued
    is ok.
options:
  results_file:
    description: Where to write the JSON file; the run writes nothing when unset.
    type: path
    env:
      - name: VFLEET_RESULTS_FILE
"""

# Result keys too bulky, or too internal, for the one-line summary of a result without msg.
_NOT_SUMMARY = ("invocation", "stdout_lines", "stderr_lines", "results", "_ansible_no_log")
_MAX_CHARS = 400


def _last_line(text: Any) -> str:
    lines = [line for line in str(text or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _message(result: dict[str, Any]) -> str:
    """msg (with a failed command's last stderr line: pip's "No space left on device",
    for one), else stderr's last line, else a summary of the module's result."""
    # ansible-core 2.19 prefixes some messages with "Task failed: "; the task is named apart.
    msg = re.sub(r"^(Task failed: )+", "", str(result.get("msg") or ""))
    stderr = _last_line(result.get("stderr"))
    if msg and stderr and result.get("rc"):
        msg = f"{msg}: {stderr}"
    elif not msg:
        msg = stderr or json.dumps(
            {k: v for k, v in result.items() if k not in _NOT_SUMMARY and not k.startswith("_")},
            default=str,
            sort_keys=True,
        )
    msg = " ".join(msg.split())
    return msg if len(msg) <= _MAX_CHARS else msg[: _MAX_CHARS - 3] + "..."


def _loop_failure(result: dict[str, Any]) -> dict[str, Any]:
    """A loop's own result only says "One or more items failed": the last failed item's
    result says what."""
    failed = [r for r in result.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    return failed[-1] if failed else result


class CallbackModule(CallbackBase):
    """Collects each host's last failure and writes the file once, at the PLAY RECAP."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "vfleet_results"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # (host, "failed" or "unreachable") -> the last such result there: the last failure
        # wins (a rescue's closing `fail` explains the error it rescued).
        self._last: dict[tuple[str, str], dict[str, str]] = {}

    def _record(self, result: Any, status: str, data: dict[str, Any]) -> None:
        self._last[(result.host.get_name(), status)] = {
            "task": result.task_name,
            "message": _message(data),
        }

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        if not ignore_errors:
            self._record(result, "failed", _loop_failure(dict(result.result)))

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._record(result, "unreachable", dict(result.result))

    def v2_playbook_on_stats(self, stats: Any) -> None:
        path = self.get_option("results_file")
        if not path:
            return
        hosts: dict[str, dict[str, Any]] = {}
        for host in sorted(stats.processed):
            recap = stats.summarize(host)
            status = (
                "unreachable" if recap["unreachable"] else "failed" if recap["failures"] else "ok"
            )
            last = self._last.get((host, status), {})
            hosts[host] = {
                "status": status,
                "task": last.get("task"),
                "message": last.get("message"),
                "recap": recap,
            }
        _write_atomically(path, {"hosts": hosts})


def _write_atomically(path: str, data: dict[str, Any]) -> None:
    """A reader sees the whole file or none of it, never half of one."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".vfleet-results-")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, indent=2, sort_keys=True)
            out.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
