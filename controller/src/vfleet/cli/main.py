"""`vfleet` command line: a thin layer over the library. Bad input exits 2 with one line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from vfleet.budget import speculative
from vfleet.cli import estimate as cli_estimate
from vfleet.errors import UserError
from vfleet.spec import flags

_PARALLEL = flags.count(1, flags.MAX_PARALLEL)
_TOKENS = flags.count(1, flags.MAX_TOKENS, "a token count")
_SEQS = flags.count(1, flags.MAX_SEQS)
_LONG_HELP = (
    "tokens per sequence; past the model's window only with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, "
    "as vLLM itself"
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other bad input
        raise UserError(f"{message} (see `{self.prog} --help`)")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> object:
        # Python 3.11's argparse drops a value spelt "--" (`--tp=--`) and stores [] in its
        # place, which no check after the parser expects: keep "--" as the value it is.
        if action.nargs is None and action.option_strings and arg_strings == ["--"]:
            value = self._get_value(action, "--")
            self._check_value(action, value)
            return value
        return super()._get_values(action, arg_strings)


def _budget_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="catalog id, model folder or config.json")
    p.add_argument("--gpu", required=True, help="catalog name or the name nvidia-smi prints")
    p.add_argument(
        "--gpu-memory-gib",
        type=flags.number(0, 4096, example="80"),
        help="override the GPU's memory (GiB)",
    )
    p.add_argument("--tp", type=_PARALLEL, default=1, help="tensor parallel size")
    p.add_argument("--pp", type=_PARALLEL, default=1, help="pipeline parallel size")
    p.add_argument("--dp", type=_PARALLEL, default=1, help="data parallel size")
    p.add_argument("--enable-expert-parallel", action="store_true")
    p.add_argument("--dcp", type=_PARALLEL, default=1, help="decode context parallel size")
    p.add_argument("--gpu-memory-utilization", type=flags.fraction)
    p.add_argument("--max-model-len", type=_TOKENS, help=_LONG_HELP)
    p.add_argument("--max-num-batched-tokens", type=_TOKENS)
    p.add_argument("--max-num-seqs", type=_SEQS)
    p.add_argument("--kv-cache-dtype", type=flags.kv_dtype, default="auto")
    p.add_argument(
        "--kv-cache-memory-bytes", type=flags.count(1, 1 << 50), help="pin the KV size per GPU"
    )
    p.add_argument("--dtype", default="auto")
    p.add_argument("--quantization", help="runtime quantization, e.g. fp8")
    p.add_argument("--block-size", type=flags.block_size)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument(
        "--cpu-offload-gb", type=flags.number(0, 1 << 20, lo_open=False, example="0"), default=0.0
    )
    p.add_argument(
        "--mean-context-len",
        type=_TOKENS,
        help="mean context for the recommended max-num-seqs (default min(len, 4096))",
    )
    p.add_argument("--vllm-version", help="target vLLM release (default 0.33.0)")
    speculative.add_cli_args(p)
    p.add_argument("--sweep-gpu-memory-utilization", type=flags.sweep, metavar="START:STOP:STEP")
    p.add_argument("--plot", type=flags.png_path, help="write the sweep as a PNG")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="vfleet", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _budget_args(sub.add_parser("budget", help="predict vLLM's KV cache per GPU"))
    plan = sub.add_parser("plan", help="choose TP/PP/DP/EP and the scheduler knobs")
    plan.add_argument(
        "--cluster",
        required=True,
        type=flags.path,
        help="cluster YAML or a directory of probe facts",
    )
    plan.add_argument("--model", required=True, help="catalog id, model folder or config.json")
    plan.add_argument("--workload", default="chat", help="chat | rag | batch | FILE.yaml")
    plan.add_argument(
        "--vllm-version", help="target vLLM release (default: the probed one, else 0.33.0)"
    )
    plan.add_argument("--gpu-memory-utilization", type=flags.fraction)
    plan.add_argument(
        "--kv-cache-dtype", type=flags.kv_dtype, help="override the planner's choice (auto|fp8)"
    )
    plan.add_argument("--layout", help="evaluate only this layout, e.g. 'TP8 PP2 EP'")
    speculative.add_cli_args(plan)
    plan.add_argument(
        "--allow-partial-facts",
        action="store_true",
        help="plan even if a host's probe failed or measured nothing",
    )
    plan.add_argument("--out", type=flags.path, help="also write the plan JSON here")
    plan.add_argument("--json", action="store_true", help="print one JSON object")
    rend = sub.add_parser("render", help="write per-host launch scripts and systemd units")
    rend.add_argument("--plan", required=True, type=flags.path, help="plan JSON from vfleet plan")
    source = rend.add_mutually_exclusive_group(required=True)
    source.add_argument("--facts", type=flags.path, help="probe facts directory")
    source.add_argument("--cluster", type=flags.path, help="cluster spec YAML")
    rend.add_argument("--out", required=True, type=flags.path, help="e.g. artifacts/<env>/launch")
    rend.add_argument("--model-path", help="model folder on the hosts (default /srv/models/<name>)")
    rend.add_argument("--served-model-name", help="API model name (default: the model id)")
    rend.add_argument("--vllm-bin", default="/opt/vfleet/vllm/bin/vllm")
    rend.add_argument(
        "--port", type=flags.count(1, 65535), default=8000, help="first API port on each host"
    )
    rend.add_argument(
        "--backend",
        choices=("auto", "mp", "ray"),
        default="auto",
        help="multi-node TP/PP backend (auto: mp from vLLM 0.11.1, else ray)",
    )
    rend.add_argument("--api-key-file", help="file on the hosts holding the API key")
    rend.add_argument("--install-dir", default="/etc/vfleet", help="where units expect files")
    rend.add_argument(
        "--extra-arg",
        action="append",
        default=[],
        help="extra vllm serve argument, --flag=value or --flag then value (repeat); "
        "not one vfleet or the plan sets",
    )
    rend.add_argument(
        "--env",
        action="append",
        default=[],
        help="extra KEY=VALUE for vllm.env (repeat); not one vfleet sets per engine",
    )
    rend.add_argument("--allow-partial-facts", action="store_true")
    speculative.add_cli_args(rend)
    rend.add_argument(
        "--draft-model-path", help="EAGLE draft on the hosts (default /srv/models/<name>)"
    )
    doc = sub.add_parser("doctor", help="diagnose overload, tail latency, OOM and preemption")
    doc.add_argument(
        "--endpoint",
        action="append",
        default=[],
        type=flags.endpoint,
        help="vLLM API base URL, e.g. http://10.0.0.11:8000 (repeat)",
    )
    doc.add_argument(
        "--endpoints",
        type=flags.path,
        metavar="FILE",
        help="every engine in this endpoints.json from `vfleet render`",
    )
    doc.add_argument(
        "--log",
        action="append",
        default=[],
        type=flags.path,
        help="a vLLM service log to read (repeat)",
    )
    doc.add_argument(
        "--journal",
        action="append",
        default=[],
        type=flags.unit,
        help="a local systemd unit whose journal to read (repeat)",
    )
    doc.add_argument("--plan", type=flags.path, help="the deployed plan JSON")
    doc.add_argument(
        "--served-model-name",
        help="read only this model's series (default: the model --endpoints names)",
    )
    doc.add_argument("--max-num-seqs", type=_SEQS, help="the engine's max-num-seqs, if known")
    doc.add_argument(
        "--watch",
        type=flags.number(0, flags.MAX_WATCH_S, lo_open=False, example="30"),
        default=0.0,
        metavar="SECONDS",
        help="sample over this many seconds and report rates",
    )
    doc.add_argument("--json", action="store_true")
    for name, text in (
        ("deploy", "the whole rollout for an environment"),
        ("destroy", "remove everything a deploy made"),
        ("probe", "provision, install and probe only"),
        ("plan-env", "plan and render from the probed facts; no host changes"),
        ("restart", "restart every engine, one host at a time (the others keep serving)"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--env", type=flags.env_name, default="local", help="local | staging | prod")
        if name in ("deploy", "plan-env"):
            p.add_argument(
                "--allow-partial-facts",
                action="store_true",
                help="plan even if a host's probe failed (hosts it saw no GPU on are left out)",
            )
    val = sub.add_parser("validate", help="check an environment's inventory and group_vars")
    val.add_argument("--env", type=flags.env_name, default="local", help="local | staging | prod")
    val.add_argument(
        "--inventory",
        type=flags.path,
        help="check this inventory folder instead of inventories/ENV",
    )
    kh = sub.add_parser("known-hosts", help="record the hosts' SSH keys for staging or prod")
    kh.add_argument("--env", type=flags.env_name, required=True, help="staging | prod")
    sub.add_parser("models", help="list the bundled model catalog")
    sub.add_parser("gpus", help="list the GPU catalog")
    cli_estimate.add_parser(sub)
    return parser


def _budget_request(args: argparse.Namespace):
    from vfleet.budget.compute import BudgetRequest
    from vfleet.budget.params import Layout
    from vfleet.catalog.gpus import resolve_gpu
    from vfleet.catalog.models import load_model
    from vfleet.catalog.releases import traits

    # Each flag's own range is checked by its argparse type (vfleet.spec.flags).
    gpu = resolve_gpu(args.gpu)
    if args.gpu_memory_gib:
        gpu = gpu.with_memory_gib(args.gpu_memory_gib)
    spec = load_model(args.model)
    flags.check_scheduler(args, spec)
    return BudgetRequest(
        spec=spec,
        gpu=gpu,
        traits=traits(args.vllm_version),
        layout=Layout(
            tp=args.tp,
            pp=args.pp,
            dp=args.dp,
            enable_expert_parallel=args.enable_expert_parallel,
            dcp=args.dcp,
        ),
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        kv_cache_dtype=args.kv_cache_dtype,
        dtype=args.dtype,
        quantization=args.quantization,
        block_size=args.block_size,
        enforce_eager=args.enforce_eager,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        cpu_offload_gb=args.cpu_offload_gb,
        mean_context_len=args.mean_context_len,
        speculative=speculative.from_args(
            args.speculative_method, args.num_speculative_tokens, args.draft_model, spec
        ),
    )


def _does_not_fit(req, budget) -> UserError:
    from vfleet.budget.compute import smallest_fitting_layout

    need = sum(s.weights_bytes for s in budget.stages) * budget.tensor_parallel_size / (1 << 30)
    better = smallest_fitting_layout(req)
    hint = (
        f"the smallest layout that fits is TP{better.tensor_parallel_size} "
        f"PP{better.pipeline_parallel_size}"
        if better
        else "no layout up to 64 GPUs fits: use a quantized checkpoint (e.g. FP8) or bigger GPUs"
    )
    return UserError(
        f"{budget.model} does not fit: weights need {need:.1f} GiB across "
        f"TP{budget.tensor_parallel_size} PP{budget.pipeline_parallel_size}, each "
        f"{budget.gpu} gives {budget.requested_gib:.1f} GiB at utilization "
        f"{budget.gpu_memory_utilization} and one {budget.max_model_len}-token request needs "
        f"more KV than is left; {hint} (or lower --max-model-len)"
    )


def cmd_budget(args: argparse.Namespace) -> int:
    from vfleet.budget.compute import compute, fits
    from vfleet.present import budget_report

    req = _budget_request(args)
    result = compute(req)
    if not fits(result):
        raise _does_not_fit(req, result)
    points = None
    if args.sweep_gpu_memory_utilization or args.plot:
        # flags.sweep parsed and bounded the range; the default is the usual 0.6..0.95.
        utils = args.sweep_gpu_memory_utilization or flags.sweep("0.6:0.95:0.05")
        points = budget_report.sweep(req, utils)
        if args.plot:
            try:
                budget_report.plot_sweep(points, args.plot)
            except OSError as exc:
                raise UserError(
                    f"cannot write the plot to {args.plot}: {exc.strerror or exc}"
                ) from None
    if args.json:
        out = result.to_json()
        if points:
            out["sweep"] = [
                {
                    "gpu_memory_utilization": p.gpu_memory_utilization,
                    "available_kv_gib": p.available_kv_gib,
                    "kv_tokens": p.kv_tokens,
                    "max_concurrency": p.max_concurrency,
                }
                for p in points
            ]
        print(json.dumps(out, indent=2))
        return 0
    print(budget_report.worked_table(result))
    if points:
        print("\nConcurrency ceiling by gpu-memory-utilization:")
        print(budget_report.sweep_table(points))
    if args.plot:
        print(f"\nplot written to {args.plot}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from vfleet.catalog.models import load_model
    from vfleet.catalog.releases import traits
    from vfleet.plan.cluster import load_cluster
    from vfleet.plan.search import PlanInputs, parse_layout, plan
    from vfleet.plan.workload import load_workload
    from vfleet.present import plan_output

    cluster = load_cluster(args.cluster, allow_partial=args.allow_partial_facts)
    version = traits(args.vllm_version or cluster.vllm_version)
    spec = load_model(args.model)
    draft = speculative.from_args(
        args.speculative_method, args.num_speculative_tokens, args.draft_model, spec
    )
    if draft:  # refuse a method the target release lacks before planning for it
        draft.check(spec, version.version)
    inputs = PlanInputs(
        spec=spec,
        cluster=cluster,
        workload=load_workload(args.workload),
        traits=version,
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_cache_dtype=args.kv_cache_dtype,
        speculative=draft,
    )
    ranked = plan(inputs, parse_layout(args.layout) if args.layout else None)
    doc = plan_output.plan_document(
        cluster,
        inputs.workload,
        ranked,
        inputs.spec.name,
        version.label,
        inputs.spec.model_type,
        speculative=draft.to_json() if draft else None,
    )
    if args.out:
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(doc, indent=2) + "\n")
        except OSError as exc:
            raise UserError(
                f"cannot write the plan to {args.out}: {exc.strerror or exc}: pass a file path "
                "in a folder you can write"
            ) from None
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(plan_output.table(cluster, inputs.workload, ranked, inputs.spec.name))
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from vfleet.catalog.flags import flag_set
    from vfleet.plan.cluster import load_cluster
    from vfleet.render.engines import RenderOptions, render
    from vfleet.render.files import render_files
    from vfleet.render.write import check_out, write_render
    from vfleet.spec.files import Document
    from vfleet.spec.render import RenderArgs
    from vfleet.spec.validate import describe

    check_out(args.out)
    plan = _check_plan_shape(args.plan)
    if args.speculative_method or args.num_speculative_tokens or args.draft_model:
        plan = {**plan, "speculative": _render_speculative(args, plan)}
    cluster = load_cluster(args.facts or args.cluster, allow_partial=args.allow_partial_facts)
    flags = flag_set(plan["vllm_version"], cluster.vllm_flags if args.facts else ())
    name = plan["model"].rstrip("/").split("/")[-1]
    given = {
        "--model-path": args.model_path or f"/srv/models/{name}",
        "--served-model-name": args.served_model_name or plan["model"],
        "--vllm-bin": args.vllm_bin,
        "--port": args.port,
        "--backend": args.backend,
        "--api-key-file": args.api_key_file,
        "--install-dir": args.install_dir,
        # argparse turns `--extra-arg=--` into [] (it drops a lone "--"): keep it visible.
        "--extra-arg": [a if isinstance(a, str) else "--" for a in args.extra_arg],
        "--env": list(args.env),
        "--draft-model-path": args.draft_model_path,
        "--plan": args.plan.name,
    }
    # Engines headed on one host take consecutive API ports from --port.
    heads: dict[str, int] = {}
    for replica in {r: None for h in plan["hosts"] for r in h["engines"]}:
        head = next(h["host"] for h in plan["hosts"] if replica in h["engines"])
        heads[head] = heads.get(head, 0) + 1
    try:
        checked = RenderArgs.model_validate(
            given, context={"engines_per_host": max(heads.values(), default=1)}
        )
    except ValidationError as exc:
        raise UserError(describe(exc, RenderArgs, Document(given, "vfleet render"))) from None
    opts = RenderOptions(
        model_path=checked.model_path,
        served_model_name=checked.served_model_name,
        vllm_bin=checked.vllm_bin,
        ray_bin=str(Path(checked.vllm_bin).with_name("ray")),
        port=checked.port,
        backend=checked.backend,
        api_key_file=checked.api_key_file,
        install_dir=checked.install_dir,
        extra_args=tuple(checked.extra_args),
        extra_env=checked.env_pairs,
        plan_name=checked.plan_name,
        draft_model_path=checked.draft_model_path,
    )
    rendered = render(plan, cluster, opts, flags)
    files = render_files(rendered, opts, flags, plan)
    write_render(args.out, files)
    modes = sorted(set(rendered.mode_by_replica.values()))
    print(
        f"rendered {len(rendered.endpoints)} engine(s) on {len(rendered.hosts)} host(s) "
        f"({', '.join(modes)}) for vLLM {plan['vllm_version']} (flag set {flags.summary})"
    )
    for ep in rendered.endpoints:
        print(f"  {ep['engine']}: {ep['url']}  ({ep['mode']}, hosts {', '.join(ep['hosts'])})")
    print(f"files under {args.out}")
    return 0


def _render_speculative(args: argparse.Namespace, plan: dict) -> dict:
    """`vfleet render --speculative-method ...` replaces the plan's choice; an MTP choice is
    checked against the model's layers (the plan's memory check did not include it)."""
    from vfleet.catalog.models import load_model

    spec = load_model(plan["model"])
    draft = speculative.from_args(
        args.speculative_method, args.num_speculative_tokens, args.draft_model, spec
    )
    return draft.to_json() if draft else {}


def _check_plan_shape(path: Path) -> dict:
    """A plan edited by hand must still be one vLLM can start: read and checked by the plan
    model (vfleet.spec.plan), returned as the dict render reads."""
    from vfleet.spec.plan import load_plan

    return load_plan(path)


def _fetch_metrics(endpoint: str) -> str:
    import urllib.error
    import urllib.request

    url = endpoint.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UserError(f"--endpoint {endpoint!r} is not a URL: write it like http://HOST:8000")
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
            # A vLLM server's /metrics is tens of KiB; cap what a wrong server can send.
            text = reply.read(64 << 20).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        raise UserError(
            f"{url}/metrics answered HTTP {exc.code}: is this a vLLM API "
            "server? point --endpoint at its base URL"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:  # ValueError: a bad URL
        reason = getattr(exc, "reason", exc)
        raise UserError(
            f"cannot reach {url}/metrics ({reason}): check the address, the port "
            "and that the vLLM service is running"
        ) from None
    if not text.strip():
        raise UserError(
            f"{url}/metrics is empty: the server is not exporting metrics yet; "
            "retry once it has started"
        )
    return text


LOG_TAIL_BYTES = 32 << 20  # the start-up lines doctor looks for sit in the last restart


def _read_logs(args: argparse.Namespace) -> str:
    import subprocess

    parts = []
    for path in args.log:
        try:
            with path.open("rb") as f:
                size = f.seek(0, 2)
                f.seek(max(0, size - LOG_TAIL_BYTES))
                parts.append(f.read().decode("utf-8", "replace"))
        except OSError as exc:
            raise UserError(f"cannot read log {path}: {exc.strerror or exc}") from None
    for unit in args.journal:
        try:
            out = subprocess.run(
                ["journalctl", "-u", unit, "--no-pager", "-o", "cat", "-n", "20000"],
                capture_output=True,
                text=True,
                errors="replace",
                check=False,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UserError(
                f"cannot read the journal of {unit} ({exc}): run doctor on the host itself, "
                "or pass the log with --log"
            ) from None
        if out.returncode != 0:
            raise UserError(f"journalctl -u {unit} failed: {out.stderr.strip()[:200]}")
        parts.append(out.stdout)
    return "\n".join(parts)


def _served_model(models: list[str], path: Path) -> str:
    """The one served model an endpoints.json names: with several, the user chooses."""
    models = list(dict.fromkeys(models))
    if len(models) > 1:
        raise UserError(
            f"{path} serves {len(models)} models ({', '.join(map(repr, models[:5]))}): pass "
            "the one to diagnose with --served-model-name"
        )
    return models[0]


def cmd_doctor(args: argparse.Namespace) -> int:
    import time

    from vfleet.observe import doctor, metrics
    from vfleet.spec.endpoints import load_endpoints

    endpoints = list(args.endpoint)
    served = args.served_model_name
    if served is not None and not served.strip():
        raise UserError("--served-model-name is empty: give the name the engine serves")
    if args.endpoints:
        listed = load_endpoints(args.endpoints).endpoints
        endpoints += [e.base_url for e in listed]
        served = served or _served_model([e.model for e in listed], args.endpoints)
    endpoints = list(dict.fromkeys(endpoints))  # the same server once, however it was named
    if not endpoints and not args.log and not args.journal:
        raise UserError("give at least one --endpoint (or --log/--journal) to diagnose")
    log = _read_logs(args)
    cfg = doctor.config_from_log(log)
    if args.plan:
        from vfleet.spec.plan import load_plan

        cfg = doctor.merge(cfg, doctor.config_from_plan(load_plan(args.plan), str(args.plan)))
    if args.max_num_seqs:
        cfg.max_num_seqs, cfg.source = args.max_num_seqs, "--max-num-seqs"
    obs = None
    if endpoints:

        def scrape() -> tuple[float, metrics.Snapshot]:
            texts = [_fetch_metrics(e) for e in endpoints]
            sources = [e.rstrip("/") for e in endpoints]
            return time.monotonic(), metrics.parse(texts, sources, served)

        samples = [scrape()]
        if args.watch > 0:
            step = max(0.5, args.watch / 10)
            deadline = samples[0][0] + args.watch
            while time.monotonic() < deadline:
                time.sleep(min(step, max(0.0, deadline - time.monotonic())))
                samples.append(scrape())
        obs = doctor.observe(samples)
    found = doctor.log_diagnoses(log, cfg) + (doctor.metric_diagnoses(obs, cfg) if obs else [])
    if args.json:
        print(json.dumps(doctor.report_json(obs, cfg, found), indent=2))
    else:
        print(doctor.report_text(obs, cfg, found, endpoints))
    return 0


def cmd_deploy(args: argparse.Namespace) -> int:
    from vfleet.deploy import pipeline

    return pipeline.deploy(args.env, allow_partial=args.allow_partial_facts)


def cmd_destroy(args: argparse.Namespace) -> int:
    from vfleet.deploy import pipeline

    return pipeline.destroy(args.env)


def cmd_probe(args: argparse.Namespace) -> int:
    from vfleet.deploy import pipeline

    return pipeline.deploy(args.env, probe_only=True)


def cmd_plan_env(args: argparse.Namespace) -> int:
    from vfleet.deploy import pipeline

    return pipeline.deploy(args.env, plan_only=True, allow_partial=args.allow_partial_facts)


def cmd_validate(args: argparse.Namespace) -> int:
    from vfleet.deploy import envcheck, pipeline

    if args.env not in pipeline.ENVS:
        raise UserError(f"--env {args.env} is not one of {', '.join(pipeline.ENVS)}")
    inventory = args.inventory or pipeline.ROOT / "inventories" / args.env
    provisioned = pipeline.ROOT / "artifacts" / args.env / "hosts.yml"
    checked = envcheck.check_environment(
        args.env, inventory, pipeline.ROOT / "ansible" / "roles", [provisioned], False
    )
    gpu_hosts = [h for h in checked.hosts if "gpu_hosts" in h.groups]
    values = checked.group_vars
    print(f"{inventory}: valid")
    print(f"  model          {values['vfleet_model']}")
    print(f"  vLLM           {values.get('vfleet_vllm_version', 'newest recorded')}")
    print(f"  vaulted values {'yes' if checked.vaulted else 'no'}")
    print(f"  GPU hosts      {len(gpu_hosts) or 'none yet (Terraform provisions them)'}")
    for host in gpu_hosts:
        print(f"    {host.name:<20} {host.address}:{host.port}")
    return 0


def cmd_known_hosts(args: argparse.Namespace) -> int:
    from vfleet.deploy import envcheck, known_hosts, pipeline

    if args.env not in ("staging", "prod"):
        raise UserError("--env must be staging or prod: the local testbed checks no host keys")
    ctx = pipeline.load_context(args.env)
    docs = pipeline.inventory_docs(ctx)
    checked = envcheck.check_inventories(docs, args.env, True)
    hosts = [h for h in checked if "gpu_hosts" in h.groups]
    path = pipeline.known_hosts_file(ctx)
    for line in known_hosts.scan(path, hosts):
        print(line)
    print(f"{len(hosts)} host(s) recorded in {path}: compare the fingerprints above with each host")
    return 0


def cmd_restart(args: argparse.Namespace) -> int:
    from vfleet.deploy import pipeline

    return pipeline.restart(args.env)


def cmd_models(_args: argparse.Namespace) -> int:
    from vfleet.catalog.models import catalog_ids

    for model_id in catalog_ids():
        print(model_id)
    return 0


def cmd_gpus(_args: argparse.Namespace) -> int:
    from vfleet.catalog.gpus import catalog

    print(f"{'name':<30} {'memory GiB':>10}  nvidia-smi names")
    for gpu in catalog():
        print(f"{gpu.name:<30} {gpu.memory_gib:10.2f}  {', '.join(gpu.aliases)}")
    return 0


COMMANDS = {
    "budget": cmd_budget,
    "plan": cmd_plan,
    "render": cmd_render,
    "doctor": cmd_doctor,
    "deploy": cmd_deploy,
    "destroy": cmd_destroy,
    "probe": cmd_probe,
    "plan-env": cmd_plan_env,
    "restart": cmd_restart,
    "validate": cmd_validate,
    "known-hosts": cmd_known_hosts,
    "models": cmd_models,
    "gpus": cmd_gpus,
    "estimate": cli_estimate.run,
}


INTERNAL_ERROR = 70  # EX_SOFTWARE (sysexits.h): a bug in vfleet, not bad input


def _one_line(text: str) -> str:
    """The message on one line whatever it quotes: a newline or other control character
    from a user's value is shown escaped, as repr() would."""
    # Surrogates (undecodable bytes of a file name) are not printable either: escaped too.
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text.strip())


def main(argv: Sequence[str] | None = None) -> int:
    import os

    try:
        args = _parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UserError as exc:
        print(f"vfleet: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except Exception as exc:  # the last resort: one line, never a bare traceback
        if os.environ.get("VFLEET_DEBUG") == "1":
            import traceback

            traceback.print_exc()
        print(
            f"vfleet: internal error: {type(exc).__name__}: {_one_line(str(exc))} (a bug: "
            "please report it with the command line; VFLEET_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
