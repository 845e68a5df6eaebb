"""`vfleet` command line: a thin layer over the library. Bad input exits 2 with one line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple, NoReturn

from vfleet.cli import budget, catalog
from vfleet.cli import doctor_command as doctor
from vfleet.cli import env_commands as env
from vfleet.cli import estimate_command as estimate
from vfleet.cli import plan_commands as plan
from vfleet.cli import upgrade_command as upgrade
from vfleet.errors import UserError

if TYPE_CHECKING:
    from pydantic import BaseModel


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


class Command(NamedTuple):
    name: str
    help: str
    # The models its parser is generated from (cli.from_model), as "module:Model" under
    # vfleet: imported only for the command that runs, so start-up stays light.
    flags: tuple[str, ...]
    run: Callable[[argparse.Namespace], int]
    epilog: str | None = None

    def flag_models(self) -> tuple[type[BaseModel], ...]:
        import importlib

        models = []
        for ref in self.flags:
            module, _, name = ref.partition(":")
            models.append(getattr(importlib.import_module(f"vfleet.{module}"), name))
        return tuple(models)


SPECULATIVE = "documents.requests:SpeculativeOptions"


# The whole CLI at a glance.
TABLE: tuple[Command, ...] = (
    Command(
        "budget", "predict vLLM's KV cache per GPU", ("documents.requests:BudgetFlags",), budget.run
    ),
    Command(
        "plan",
        "choose TP/PP/DP/EP and the scheduler knobs",
        ("documents.requests:PlanFlags",),
        plan.run_plan,
    ),
    Command(
        "render",
        "write per-host launch scripts and units, or Kubernetes manifests (--target lws)",
        (
            "documents.render:RenderFlags",
            "documents.render:RenderOptions",
            SPECULATIVE,
            "documents.lws:LwsOptions",
        ),
        plan.run_render,
    ),
    Command(
        "doctor",
        "diagnose overload, tail latency, OOM and preemption",
        ("documents.requests:DoctorFlags",),
        doctor.run,
    ),
    Command(
        "deploy",
        "the whole rollout for an environment",
        ("cli.env_flags:DeployFlags",),
        env.cmd_deploy,
    ),
    Command(
        "destroy",
        "remove the hosts and what a deploy made",
        ("cli.env_flags:DestroyFlags",),
        env.cmd_destroy,
    ),
    Command(
        "probe", "provision, install and probe only", ("cli.env_flags:EnvFlags",), env.cmd_probe
    ),
    Command(
        "plan-env",
        "plan and render from the probed facts; no host changes",
        ("cli.env_flags:PlanEnvFlags",),
        env.cmd_plan_env,
    ),
    Command(
        "restart",
        "restart every engine, one host at a time (the others keep serving)",
        ("cli.env_flags:EnvFlags",),
        env.cmd_restart,
    ),
    Command(
        "validate",
        "check an environment's inventory and group_vars",
        ("cli.env_flags:ValidateFlags",),
        env.cmd_validate,
    ),
    Command(
        "known-hosts",
        "record the hosts' SSH keys for staging or prod",
        ("cli.env_flags:KnownHostsFlags",),
        env.cmd_known_hosts,
    ),
    Command(
        "preflight",
        "check every probed host's GPUs and fabric (the deploy's health gate)",
        ("cli.env_flags:PreflightFlags",),
        env.cmd_preflight,
    ),
    Command(
        "calibrate",
        "refit the estimator on an environment's measured runs (its ledger)",
        ("cli.env_flags:CalibrateFlags",),
        env.cmd_calibrate,
    ),
    Command(
        "upgrade-check",
        "what a vLLM upgrade breaks and changes, before it reaches a host",
        ("cli.env_flags:UpgradeCheckFlags",),
        upgrade.run,
    ),
    Command("models", "list the bundled model catalog", (), catalog.cmd_models),
    Command("gpus", "list the GPU catalog", (), catalog.cmd_gpus),
    Command(
        "estimate",
        "predict throughput and latency of one layout at one operating point",
        ("documents.requests:EstimateFlags",),
        estimate.run,
        estimate.EXAMPLE,
    ),
)
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {c.name: c.run for c in TABLE}


def _parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with the flags of the command `argv` names (of every command when
    `argv` is None): argparse reads only the flags of the command it runs."""
    from vfleet.cli.from_model import add_arguments

    parser = _Parser(prog="vfleet", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    # The top level has no option that takes a value: the first other word is the command.
    named = None if argv is None else next((a for a in argv if not a.startswith("-")), "")
    for command in TABLE:
        command_parser = sub.add_parser(command.name, help=command.help, epilog=command.epilog)
        if named is None or named == command.name:
            for model in command.flag_models():
                add_arguments(command_parser, model)
    return parser


INTERNAL_ERROR = 70  # EX_SOFTWARE (sysexits.h): a bug in vfleet, not bad input


def _one_line(text: str) -> str:
    """The message on one line whatever it quotes: a newline or other control character
    from a user's value is shown escaped, as repr() would."""
    # Surrogates (undecodable bytes of a file name) are not printable either: escaped too.
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text.strip())


def main(argv: Sequence[str] | None = None) -> int:
    import os

    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = _parser(argv).parse_args(argv)
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
