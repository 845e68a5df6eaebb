"""The commands that act on an environment's hosts: deploy, destroy, probe, plan-env,
restart, validate and known-hosts. Each is a call into vfleet.deploy, on the bundle that
`--root`, $VFLEET_ROOT or the working directory names (vfleet.deploy.bundle)."""

from __future__ import annotations

import argparse

from vfleet.errors import UserError
from vfleet.spec import flags


def _add_root(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--root",
        type=flags.path,
        help="the bundle (default: $VFLEET_ROOT, else the repository the command runs in)",
    )


def add_env_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", type=flags.env_name, default="local", help="local | staging | prod")
    _add_root(p)


def add_deploy_args(p: argparse.ArgumentParser) -> None:
    add_env_args(p)
    p.add_argument(
        "--allow-partial-facts",
        action="store_true",
        help="plan even if a host's probe failed (hosts it saw no GPU on are left out)",
    )
    p.add_argument(
        "--allow-degraded",
        action="store_true",
        help="plan on hosts that failed a health check too (loudly; see vfleet preflight)",
    )


def add_validate_args(p: argparse.ArgumentParser) -> None:
    add_env_args(p)
    p.add_argument(
        "--inventory",
        type=flags.path,
        help="check this inventory folder instead of inventories/ENV",
    )


def add_known_hosts_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", type=flags.env_name, required=True, help="staging | prod")
    _add_root(p)


def cmd_deploy(args: argparse.Namespace) -> int:
    from vfleet.deploy import pipeline

    return pipeline.deploy(
        args.env,
        root=args.root,
        allow_partial=args.allow_partial_facts,
        allow_degraded=args.allow_degraded,
    )


def add_destroy_args(parser: argparse.ArgumentParser) -> None:
    add_env_args(parser)
    parser.add_argument(
        "--purge",
        action="store_true",
        help="also remove the ledger and the reports (kept by default: they are history)",
    )


def cmd_destroy(args: argparse.Namespace) -> int:
    from vfleet.deploy import pipeline

    return pipeline.destroy(args.env, args.root, purge=args.purge)


def cmd_probe(args: argparse.Namespace) -> int:
    from vfleet.deploy import pipeline

    return pipeline.deploy(args.env, probe_only=True, root=args.root)


def cmd_plan_env(args: argparse.Namespace) -> int:
    from vfleet.deploy import pipeline

    return pipeline.deploy(
        args.env,
        plan_only=True,
        root=args.root,
        allow_partial=args.allow_partial_facts,
        allow_degraded=args.allow_degraded,
    )


def cmd_validate(args: argparse.Namespace) -> int:
    from vfleet.deploy import envcheck
    from vfleet.deploy.bundle import bundle_root
    from vfleet.deploy.context import ENVS

    if args.env not in ENVS:
        raise UserError(f"--env {args.env} is not one of {', '.join(ENVS)}")
    root = bundle_root(args.root)
    inventory = args.inventory or root / "inventories" / args.env
    provisioned = root / "artifacts" / args.env / "hosts.yml"
    checked = envcheck.check_environment(
        args.env, inventory, root / "ansible" / "roles", [provisioned], False
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
    from vfleet.deploy import context, envcheck, known_hosts

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


def cmd_restart(args: argparse.Namespace) -> int:
    from vfleet.deploy import pipeline

    return pipeline.restart(args.env, args.root)


def add_calibrate_args(p: argparse.ArgumentParser) -> None:
    add_env_args(p)
    p.add_argument("--json", action="store_true", help="print the calibration document")


def cmd_calibrate(args: argparse.Namespace) -> int:
    from vfleet.deploy import calibrate_env

    doc, path, left_out = calibrate_env.calibrate_env(args.env, args.root)
    calibrate_env.print_summary(doc, path, left_out, args.json)
    return 0


def add_preflight_args(p: argparse.ArgumentParser) -> None:
    add_env_args(p)
    p.add_argument("--all", action="store_true", help="list the passing checks too")
    p.add_argument("--json", action="store_true", help="print the sweep and every check as JSON")
    p.add_argument(
        "--timeout",
        type=flags.number(0, 300, example="10"),
        default=10.0,
        help="seconds to reach one host (default 10)",
    )


def cmd_preflight(args: argparse.Namespace) -> int:
    """The SSH sweep of the inventory, then the health gate on the probed facts (when the
    environment has been probed): exit 1 when a host fails either."""
    import json

    from vfleet.deploy import preflight

    swept, verdicts = preflight.run(args.env, args.root, args.timeout)
    if args.json:
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
