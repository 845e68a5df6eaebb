"""The commands that act on an environment's hosts: deploy, destroy, probe, plan-env,
restart, validate, known-hosts, preflight and calibrate. Each is a call into vfleet.deploy,
on the bundle that `--root`, $VFLEET_ROOT or the working directory names
(vfleet.environment.bundle). Their flags are the models in vfleet.cli.env_flags."""

from __future__ import annotations

import argparse

from vfleet.errors import UserError


def cmd_deploy(namespace: argparse.Namespace) -> int:
    from vfleet.cli.env_flags import DeployFlags
    from vfleet.cli.from_model import from_namespace
    from vfleet.deploy import pipeline

    args = from_namespace(DeployFlags, namespace)
    return pipeline.deploy(
        args.env,
        root=args.root,
        allow_partial=args.allow_partial_facts,
        allow_degraded=args.allow_degraded,
    )


def cmd_destroy(namespace: argparse.Namespace) -> int:
    from vfleet.cli.env_flags import DestroyFlags
    from vfleet.cli.from_model import from_namespace
    from vfleet.deploy import pipeline

    args = from_namespace(DestroyFlags, namespace)
    return pipeline.destroy(args.env, args.root, purge=args.purge)


def cmd_probe(namespace: argparse.Namespace) -> int:
    from vfleet.cli.env_flags import EnvFlags
    from vfleet.cli.from_model import from_namespace
    from vfleet.deploy import pipeline

    args = from_namespace(EnvFlags, namespace)
    return pipeline.deploy(args.env, probe_only=True, root=args.root)


def cmd_plan_env(namespace: argparse.Namespace) -> int:
    from vfleet.cli.env_flags import PlanEnvFlags
    from vfleet.cli.from_model import from_namespace
    from vfleet.deploy import pipeline

    args = from_namespace(PlanEnvFlags, namespace)
    return pipeline.deploy(
        args.env,
        plan_only=True,
        root=args.root,
        allow_partial=args.allow_partial_facts,
        allow_degraded=args.allow_degraded,
        target=args.target,
    )


def cmd_validate(namespace: argparse.Namespace) -> int:
    from vfleet.cli.env_flags import ValidateFlags
    from vfleet.cli.from_model import from_namespace
    from vfleet.environment import envcheck
    from vfleet.environment.bundle import bundle_root
    from vfleet.environment.context import ENVS
    from vfleet.environment.ssh_options import print_warnings

    args = from_namespace(ValidateFlags, namespace)
    if args.env not in ENVS:
        raise UserError(f"--env {args.env} is not one of {', '.join(ENVS)}")
    root = bundle_root(args.root)
    inventory = args.inventory or root / "inventories" / args.env
    provisioned = root / "artifacts" / args.env / "hosts.yml"
    checked = envcheck.check_environment(
        args.env, inventory, root / "ansible" / "roles", [provisioned], False
    )
    print_warnings(checked.warnings)
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


def cmd_known_hosts(namespace: argparse.Namespace) -> int:
    from vfleet.cli.env_flags import KnownHostsFlags
    from vfleet.cli.from_model import from_namespace
    from vfleet.environment import context, envcheck, known_hosts

    args = from_namespace(KnownHostsFlags, namespace)
    if args.env not in ("staging", "prod"):
        raise UserError("--env must be staging or prod: the local testbed checks no host keys")
    ctx = context.load_context(args.env, args.root)
    docs = context.inventory_docs(ctx)
    checked = envcheck.check_inventories(docs, args.env, True)
    hosts = [h for h in checked if "gpu_hosts" in h.groups]
    path = context.known_hosts_file(ctx)
    for line in known_hosts.scan(path, hosts):
        print(line)
    print(f"{len(hosts)} host(s) recorded in {path}: compare the fingerprints above with each host")
    return 0


def cmd_restart(namespace: argparse.Namespace) -> int:
    from vfleet.cli.env_flags import EnvFlags
    from vfleet.cli.from_model import from_namespace
    from vfleet.deploy import pipeline

    args = from_namespace(EnvFlags, namespace)
    return pipeline.restart(args.env, args.root)


def cmd_calibrate(namespace: argparse.Namespace) -> int:
    from vfleet.cli.env_flags import CalibrateFlags
    from vfleet.cli.from_model import from_namespace
    from vfleet.feedback import calibrate_env

    args = from_namespace(CalibrateFlags, namespace)
    doc, path, left_out = calibrate_env.calibrate_env(args.env, args.root)
    calibrate_env.print_summary(doc, path, left_out, args.as_json)
    return 0


def cmd_preflight(namespace: argparse.Namespace) -> int:
    """The SSH sweep of the inventory, then the health gate on the probed facts (when the
    environment has been probed): exit 1 when a host fails either."""
    import json

    from vfleet.cli.env_flags import PreflightFlags
    from vfleet.cli.from_model import from_namespace
    from vfleet.health import preflight

    args = from_namespace(PreflightFlags, namespace)
    swept, verdicts = preflight.run(args.env, args.root, args.timeout)
    if args.as_json:
        print(
            json.dumps(
                {
                    "sweep": [r.to_json() for r in swept],
                    "checks": [v.to_json() for v in verdicts] if verdicts is not None else None,
                },
                indent=2,
            )
        )
    else:
        preflight.show(swept, verdicts, args.all)
    failed = any(r.verdict == "fail" for r in swept) or any(v.failed for v in verdicts or [])
    return 1 if failed else 0
