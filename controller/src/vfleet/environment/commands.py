"""The commands a phase runs (ansible-playbook, terraform): streamed to a log with progress,
and on failure one PhaseFailed naming each failed host and why.

Per-host outcomes come from vfleet's results callback (ansible/plugins/callback/
vfleet_results.py), which ansible-playbook loads next to the operator's own callbacks and
which writes <log>.results.json; nothing is scraped from ansible-playbook's text.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from vfleet.environment import pins
from vfleet.environment.context import Context

RESULTS_CALLBACK = "vfleet_results"
UNREACHABLE_ADVICE = "power it on or restore its network and SSH, then resume"


class PhaseFailed(Exception):
    """A phase's command failed: which phase, on which hosts and why, and where its log is."""

    def __init__(self, phase: str, why: str, hosts: dict[str, str], log: str, tail: str) -> None:
        super().__init__(phase)
        self.phase, self.why, self.hosts, self.log, self.tail = phase, why, hosts, log, tail

    def describe(self, resume: str) -> str:
        """The operator's message: one line per failed host (the tail when Ansible named
        none), the log, and the command that resumes."""
        where = f" on {', '.join(self.hosts)}" if self.hosts else ""
        lines = [f"phase '{self.phase}' failed{where} ({self.why}); nothing after it was started."]
        lines += [f"  {host}: {what}" for host, what in self.hosts.items()] or [self.tail.rstrip()]
        return "\n".join([*lines, f"Log: {self.log}", f"Resume with: {resume}"])

    def __str__(self) -> str:
        return self.describe("the same command")


def command_env(ctx: Context, results: Path | None = None) -> dict[str, str]:
    """The environment of a phase's command; with `results`, ansible-playbook also runs the
    results callback, which writes each host's outcome there."""
    env = dict(os.environ)
    env["PATH"] = f"{ctx.venv_bin}:{env.get('PATH', '/usr/bin:/bin')}"
    env["VFLEET_ROOT"] = str(ctx.root)  # `terraform` (vfleet.terraform.shim) finds its config
    env.setdefault("ANSIBLE_CONFIG", str(ctx.root / "ansible" / "ansible.cfg"))
    env.setdefault("ANSIBLE_FORCE_COLOR", "0")
    if results is not None:
        # Added to the operator's own callbacks and plugin folders, if any, not in their place.
        plugins = [
            str(ctx.root / "ansible" / "plugins" / "callback"),
            env.get("ANSIBLE_CALLBACK_PLUGINS"),
        ]
        env["ANSIBLE_CALLBACK_PLUGINS"] = os.pathsep.join(p for p in plugins if p)
        enabled = [c for c in env.get("ANSIBLE_CALLBACKS_ENABLED", "").split(",") if c.strip()]
        env["ANSIBLE_CALLBACKS_ENABLED"] = ",".join([*enabled, RESULTS_CALLBACK])
        env["VFLEET_RESULTS_FILE"] = str(results)
    return env


def read_results(results: Path) -> dict[str, dict[str, Any]]:
    """host -> its outcome (status, task, message, recap) as the results callback wrote it;
    empty when ansible-playbook stopped before its recap (a syntax error, a signal)."""
    try:
        data = json.loads(results.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    hosts = data.get("hosts") if isinstance(data, dict) else None
    if not isinstance(hosts, dict):
        return {}
    return {str(h): r for h, r in hosts.items() if isinstance(r, dict)}


def host_failures(results: Path) -> dict[str, str]:
    """host -> one line on what failed there. The last failure per host counts (a rescue's
    closing `fail` explains the error it rescued); ignored failures, and hosts the recap
    counts neither failed nor unreachable (a rescue that recovered), do not."""
    return failures(read_results(results))


def failures(outcomes: dict[str, dict[str, Any]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for host, outcome in outcomes.items():
        what = str(outcome.get("message") or f"task {outcome.get('task')!r} failed")
        if outcome.get("status") == "unreachable":
            found[host] = f"unreachable ({what}): {UNREACHABLE_ADVICE}"
        elif outcome.get("status") == "failed":
            found[host] = what
    return found


def run(
    ctx: Context,
    name: str,
    argv: list[str],
    log_name: str,
    cwd: Path | None = None,
    ansible: bool = False,
) -> str:
    """Run one command, printing each play and task as it starts and writing the whole
    output to artifacts/<env>/logs/<log_name>.log. An `ansible` command also records each
    host's outcome in <log_name>.results.json, which names the hosts when it fails."""
    logs = ctx.artifacts / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{log_name}.log"
    results = logs / f"{log_name}.results.json" if ansible else None
    if results is not None:
        results.unlink(missing_ok=True)  # an earlier run's hosts must not be named for this one
    start = time.monotonic()
    print(f"==> {name}", flush=True)
    lines: list[str] = []
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            argv,
            cwd=cwd or ctx.root,
            env=command_env(ctx, results),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            lines.append(line)
            if line.startswith(("TASK [", "PLAY [")):
                print(f"    {line.strip().rstrip('*').strip()}", flush=True)
        rc = proc.wait()
    elapsed = time.monotonic() - start
    ctx.timings.append((name, elapsed))
    if rc != 0:
        outcomes = read_results(results) if results is not None else {}
        unreachable = any(o.get("status") == "unreachable" for o in outcomes.values())
        why = "unreachable" if unreachable else f"exit {rc}"
        raise PhaseFailed(name, why, failures(outcomes), ctx.shown(log_path), "".join(lines[-15:]))
    print(f"    done in {elapsed:.1f} s", flush=True)
    return "".join(lines)


def playbook(ctx: Context, name: str, book: str, extra: dict[str, Any] | None = None) -> None:
    """ansible-playbook over the environment's inventories (the static one, then Terraform's)."""
    provisioned = ctx.artifacts / "hosts.yml"
    argv = [
        str(ctx.venv_bin / "ansible-playbook"),
        "-i",
        str(ctx.inventory),
        *(["-i", str(provisioned)] if provisioned.is_file() else []),
        str(ctx.root / "ansible" / "playbooks" / book),
        "-e",
        json.dumps(
            {
                "vfleet_env": ctx.env,
                "vfleet_artifacts": str(ctx.artifacts),
                "vfleet_root": str(ctx.root),
                # The path, never the key: group_vars read it with a file lookup.
                "vfleet_api_key_path": str(ctx.api_key_file or ""),
                # pins.env, which group_vars read as {{ vfleet_pins.KEY }}.
                "vfleet_pins": pins.pins(ctx.root),
                **(extra or {}),
            }
        ),
    ]
    run(ctx, name, argv, book.removesuffix(".yml"), cwd=ctx.root / "ansible", ansible=True)
