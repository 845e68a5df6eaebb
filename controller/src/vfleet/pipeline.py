"""`make deploy` / `make destroy` / `make probe` / `make plan`: the rollout, phase by phase.

Each phase is one command whose failure stops the rollout before anything that depends on
it starts; the message names the phase, the host when Ansible says which, and the command
that resumes (every phase is idempotent, so resuming is re-running). Durations are printed
at the end and written into the report.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vfleet.errors import UserError

ROOT = Path(__file__).resolve().parents[3]
VENV_BIN = Path(sys.executable).parent
ENVS = ("local", "staging", "prod")


@dataclass
class Context:
    env: str
    root: Path = ROOT
    phases: list[tuple[str, float]] = field(default_factory=list)
    group_vars: dict[str, Any] = field(default_factory=dict)

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts" / self.env

    @property
    def inventory(self) -> Path:
        return self.root / "inventories" / self.env

    def var(self, name: str, default: Any = None) -> Any:
        return self.group_vars.get(name, default)


class PhaseFailed(Exception):
    pass


def load_context(env: str) -> Context:
    if env not in ENVS:
        raise UserError(f"ENV={env} is not one of {', '.join(ENVS)}: e.g. make deploy ENV=prod")
    ctx = Context(env)
    path = ctx.inventory / "group_vars" / "all.yml"
    if not path.is_file():
        raise UserError(f"{path} is missing: every environment needs group_vars/all.yml")
    import yaml

    try:
        ctx.group_vars = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(ctx.group_vars, dict) or not ctx.group_vars.get("vfleet_model"):
        raise UserError(f"{path} names no vfleet_model: set the model to deploy")
    return ctx


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    env.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible" / "ansible.cfg"))
    env.setdefault("ANSIBLE_FORCE_COLOR", "0")
    return env


_FAILED_HOST = re.compile(r"(?:fatal|failed): \[([^\]]+)\]")
_UNREACHABLE = re.compile(r"UNREACHABLE! =>|unreachable=[1-9]")


def run(ctx: Context, name: str, argv: list[str], log_name: str,
        cwd: Path | None = None) -> str:
    """Run one phase command, streaming a progress dot per output line to the terminal and
    the whole output to artifacts/<env>/logs/<log_name>.log."""
    logs = ctx.artifacts / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{log_name}.log"
    start = time.monotonic()
    print(f"==> {name}", flush=True)
    lines: list[str] = []
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, cwd=cwd or ctx.root, env=_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            lines.append(line)
            if line.startswith(("TASK [", "PLAY [")):
                print(f"    {line.strip().rstrip('*').strip()}", flush=True)
        rc = proc.wait()
    elapsed = time.monotonic() - start
    ctx.phases.append((name, elapsed))
    output = "".join(lines)
    if rc != 0:
        hosts = sorted(set(_FAILED_HOST.findall(output)))
        where = f" on {', '.join(hosts)}" if hosts else ""
        why = "unreachable" if _UNREACHABLE.search(output) else f"exit {rc}"
        tail = "".join(lines[-15:])
        raise PhaseFailed(
            f"phase '{name}' failed{where} ({why}); nothing after it was started. Log: "
            f"{log_path.relative_to(ctx.root)}\n{tail}\nResume with: make deploy ENV={ctx.env}"
        )
    print(f"    done in {elapsed:.1f} s", flush=True)
    return output


def terraform(ctx: Context) -> None:
    env_dir = ctx.root / "terraform" / "envs" / ctx.env
    if not env_dir.is_dir():
        raise UserError(f"no Terraform environment {env_dir}")
    tf = str(VENV_BIN / "terraform")
    run(ctx, "terraform init", [tf, f"-chdir={env_dir}", "init", "-input=false"], "tf-init")
    run(ctx, "terraform apply", [tf, f"-chdir={env_dir}", "apply", "-input=false",
                                 "-auto-approve"], "tf-apply")
    out = run(ctx, "terraform output", [tf, f"-chdir={env_dir}", "output", "-json"],
              "tf-output")
    ctx.artifacts.mkdir(parents=True, exist_ok=True)
    (ctx.artifacts / "terraform-output.json").write_text(out)


def playbook(ctx: Context, name: str, book: str, extra: dict[str, Any] | None = None) -> None:
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(ctx.inventory),
            str(ctx.root / "ansible" / "playbooks" / book),
            "-e", json.dumps({"vfleet_env": ctx.env, "vfleet_artifacts": str(ctx.artifacts),
                              "vfleet_root": str(ctx.root), **(extra or {})})]
    run(ctx, name, argv, book.removesuffix(".yml"))


def vfleet(ctx: Context, name: str, *args: str) -> str:
    return run(ctx, name, [str(VENV_BIN / "vfleet"), *args], name.replace(" ", "-"))


def print_summary(ctx: Context, endpoints: list[dict[str, Any]]) -> None:
    print("\nPhases:")
    for phase, seconds in ctx.phases:
        print(f"  {phase:<28} {seconds:8.1f} s")
    print(f"  {'total':<28} {sum(s for _, s in ctx.phases):8.1f} s")
    for ep in endpoints:
        print(f"\nEndpoint {ep['engine']}: {ep['url']}  (model {ep['model']})")
