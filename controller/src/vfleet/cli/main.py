"""`vfleet` command line: a thin layer over the library. Bad input exits 2 with one line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from vfleet.cli import budget, catalog, doctor, env, estimate, plan
from vfleet.errors import UserError

Command = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other bad input
        raise UserError(f"{message} (see `{self.prog} --help`)")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> object:
        # Python 3.11's argparse drops a value spelt "--" (`--tp=--`) and stores [] in its
        # place, which no check after the parser expects: keep "--" as the value it is.
        if action.nargs is None and action.option_strings and arg_strings == ["--"]:
            value = self._get_value(action, "--")
            self._check_value(action, value)
            return value
        return super()._get_values(action, arg_strings)


# name, help, the flags, the command: the whole CLI at a glance.
TABLE: tuple[tuple[str, str, Callable[[argparse.ArgumentParser], None], Command], ...] = (
    ("budget", "predict vLLM's KV cache per GPU", budget.add_args, budget.run),
    (
        "plan",
        "choose TP/PP/DP/EP and the scheduler knobs",
        plan.add_plan_args,
        plan.run_plan,
    ),
    (
        "render",
        "write per-host launch scripts and systemd units",
        plan.add_render_args,
        plan.run_render,
    ),
    (
        "doctor",
        "diagnose overload, tail latency, OOM and preemption",
        doctor.add_args,
        doctor.run,
    ),
    ("deploy", "the whole rollout for an environment", env.add_deploy_args, env.cmd_deploy),
    ("destroy", "remove the hosts and what a deploy made", env.add_destroy_args, env.cmd_destroy),
    ("probe", "provision, install and probe only", env.add_env_args, env.cmd_probe),
    (
        "plan-env",
        "plan and render from the probed facts; no host changes",
        env.add_deploy_args,
        env.cmd_plan_env,
    ),
    (
        "restart",
        "restart every engine, one host at a time (the others keep serving)",
        env.add_env_args,
        env.cmd_restart,
    ),
    (
        "validate",
        "check an environment's inventory and group_vars",
        env.add_validate_args,
        env.cmd_validate,
    ),
    (
        "known-hosts",
        "record the hosts' SSH keys for staging or prod",
        env.add_known_hosts_args,
        env.cmd_known_hosts,
    ),
    (
        "preflight",
        "check every probed host's GPUs and fabric (the deploy's health gate)",
        env.add_preflight_args,
        env.cmd_preflight,
    ),
    (
        "calibrate",
        "refit the estimator on an environment's measured runs (its ledger)",
        env.add_calibrate_args,
        env.cmd_calibrate,
    ),
    ("models", "list the bundled model catalog", catalog.no_args, catalog.cmd_models),
    ("gpus", "list the GPU catalog", catalog.no_args, catalog.cmd_gpus),
    (
        "estimate",
        "predict throughput and latency of one layout at one operating point",
        estimate.add_args,
        estimate.run,
    ),
)
COMMANDS: dict[str, Command] = {name: run for name, _help, _args, run in TABLE}


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="vfleet", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, text, add_args, _run in TABLE:
        add_args(sub.add_parser(name, help=text))
    return parser


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
        # Looked up at call time: tests swap a command in COMMANDS.
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
