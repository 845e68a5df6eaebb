"""Parse rendered `vllm serve` command lines with vLLM's own argument parser.

Runs under the vLLM venv's python: reads a JSON list of argv lists on stdin, prints a JSON
list of {"ok": bool, "error": str} in the same order. Building the parser costs one import
of vLLM (~15 s on 2 cores), so every command shares it.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys


def _parser():
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # <= 0.11.0
        from vllm.utils import FlexibleArgumentParser
    for module in (
        "vllm.entrypoints.common.cli_args",
        "vllm.entrypoints.launchers.cli_args",
        "vllm.entrypoints.openai.cli_args",
    ):
        try:
            mod = __import__(module, fromlist=["make_arg_parser"])
        except ImportError:
            continue
        return mod.make_arg_parser(FlexibleArgumentParser()), getattr(
            mod, "validate_parsed_serve_args", None
        )
    raise SystemExit("no make_arg_parser found in this vLLM")


def main() -> int:
    commands = json.load(sys.stdin)
    results = []
    for argv in commands:
        parser, validate = _parser()  # a fresh parser per command: parsing mutates state
        args = argv[argv.index("serve") + 1 :]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parsed = parser.parse_args(args)
                if validate is not None:
                    validate(parsed)
            results.append({"ok": True, "error": ""})
        except SystemExit:
            results.append({"ok": False, "error": err.getvalue().strip()[-500:]})
        except Exception as exc:  # validation errors are reported, not raised
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]})
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
