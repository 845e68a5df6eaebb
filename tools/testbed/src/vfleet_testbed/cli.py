"""`testbed`: systemd-nspawn test hosts in private network namespaces, for the Ansible roles.

    testbed up N --profile P[,P...] [--name NAME] [--shape ethernet|infiniband|none] [--hosts a,b]
               [--bind-ro SRC[:DST] ...]
    testbed down [--name NAME | --all]
    testbed stop [--name NAME] HOST      power one host off
    testbed start [--name NAME] HOST     power it on again (it boots blank)
    testbed status [--name NAME] [--json]
    testbed image [--rebuild]

Needs root. Bad input exits 2 with one line; a failure exits 1 with one line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import NoReturn

from vfleet_testbed import base, machines
from vfleet_testbed.errors import TestbedError, UsageError
from vfleet_testbed.profiles import PROFILES, SHAPES


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="testbed",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="profiles: "
        + "; ".join(f"{p.name} ({p.summary}, default shape {p.shape})" for p in PROFILES.values())
        + "\nshapes: "
        + "; ".join(
            f"{s.name} ({s.rate_mbit} Mbit/s, {s.stands_for})"
            if s.rate_mbit
            else f"{s.name} ({s.stands_for})"
            for s in SHAPES.values()
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p_up = sub.add_parser("up", help="boot N hosts and write their inventory and ssh config")
    p_up.add_argument("count", type=int, metavar="N", help="number of hosts")
    p_up.add_argument(
        "--profile",
        required=True,
        help=f"one of: {', '.join(PROFILES)}; or one per host, comma-separated (a mixed fleet)",
    )
    p_up.add_argument("--name", default=machines.DEFAULT_NAME, help="testbed name (default tb)")
    p_up.add_argument("--shape", help="link shape (default: the first host's profile's)")
    p_up.add_argument("--rate-mbit", type=int, help="override the shape's rate (Mbit/s)")
    p_up.add_argument("--hosts", help="comma-separated host names (default h1..hN)")
    p_up.add_argument(
        "--bind-ro",
        action="append",
        default=[],
        metavar="SRC[:DST]",
        help="bind a path of this machine read-only into every host, at DST (default: the "
        "same path); repeatable",
    )
    p_up.add_argument("--json", action="store_true", help="print the testbed's state as JSON")
    p_down = sub.add_parser("down", help="stop the hosts and remove everything the testbed made")
    which = p_down.add_mutually_exclusive_group()
    which.add_argument("--name", default=machines.DEFAULT_NAME, help="testbed name (default tb)")
    which.add_argument("--all", action="store_true", help="every testbed on this machine")
    for verb, text in (
        ("stop", "power one host off (what ran on it and its overlay are lost)"),
        ("start", "power a stopped host on again (it boots the base image afresh)"),
    ):
        p_power = sub.add_parser(verb, help=text)
        p_power.add_argument("host", help="host name, e.g. h2")
        p_power.add_argument("--name", default=machines.DEFAULT_NAME, help="testbed name")
    p_status = sub.add_parser("status", help="list testbeds and their hosts")
    p_status.add_argument("--name", help="only this testbed")
    p_status.add_argument("--json", action="store_true")
    p_image = sub.add_parser("image", help="build the cached base image if missing or stale")
    p_image.add_argument("--rebuild", action="store_true", help="build it even if current")
    return parser


def _print_up(tb: machines.Testbed) -> None:
    rate = f"{tb.rate_mbit} Mbit/s" if tb.rate_mbit else "unshaped"
    built = (
        f" (base image built in {tb.image_build_seconds:.0f} s)" if tb.image_build_seconds else ""
    )
    print(
        f"testbed {tb.name}: {len(tb.hosts)} x {tb.profile}, links {tb.shape} ({rate}), "
        f"up in {tb.up_seconds:.1f} s{built}"
    )
    for h in tb.hosts:
        print(f"  {h.name:<14} {h.address:<14} {h.system_state}")
    for bind in tb.bind_ro:
        src, _, dst = bind.partition(":")
        print(f"read-only   {src} -> {dst}" if src != dst else f"read-only   {src}")
    print(f"inventory   {tb.inventory}")
    print(f"ssh config  {tb.ssh_config}    (ssh -F {tb.ssh_config} {tb.hosts[0].name})")


def _print_status(entries: list[dict[str, object]]) -> None:
    if not entries:
        print("no testbeds")
    for e in entries:
        if e["state"] in ("absent", "leftover"):
            print(f"{e['name']}: {e['state']} (namespaces: {', '.join(e['netns']) or 'none'})")  # type: ignore[arg-type]
            continue
        print(
            f"{e['name']}: {e['state']}, {e['profile']}, links {e['shape']}, "
            f"inventory {e['inventory']}"
        )
        for bind in e.get("bind_ro") or []:  # type: ignore[attr-defined]
            print(f"  read-only bind {bind}")
        for h in e["hosts"]:  # type: ignore[attr-defined]
            print(f"  {h['name']:<14} {h['address']:<14} {'up' if h['alive'] else 'down'}")


def _power(command: str, name: str, host: str) -> None:
    machines.check_machine(need_debootstrap=False)
    if command == "stop":
        was_on = machines.stop_host(name, host)
        print(f"testbed {name}: {host} {'powered off' if was_on else 'was off already'}")
    else:
        h = machines.start_host(name, host)
        print(f"testbed {name}: {h.name} {h.address} {h.system_state} (booted blank)")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        if args.command == "up":
            hosts = [h.strip() for h in args.hosts.split(",")] if args.hosts else None
            tb = machines.up(
                args.count,
                args.profile,
                args.name,
                args.shape,
                hosts,
                args.rate_mbit,
                args.bind_ro,
            )
            if args.json:
                print(json.dumps(tb.to_json(), indent=1))
            else:
                _print_up(tb)
        elif args.command == "down":
            names = machines.all_names() if args.all else [args.name]
            if names:
                machines.check_machine(need_debootstrap=False)
            left = [item for n in names for item in machines.down(n)]
            if left:
                raise TestbedError(f"left behind: {', '.join(left)}")
        elif args.command in ("stop", "start"):
            _power(args.command, args.name, args.host)
        elif args.command == "status":
            entries = machines.status(args.name)
            if args.json:
                print(json.dumps(entries, indent=1))
            else:
                _print_status(entries)
        elif args.command == "image":
            machines.check_machine(need_debootstrap=True)
            image, seconds = base.ensure_image(rebuild=args.rebuild, busy=machines.running)
            print(f"{image} ({f'built in {seconds:.0f} s' if seconds else 'current'})")
    except TestbedError as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
