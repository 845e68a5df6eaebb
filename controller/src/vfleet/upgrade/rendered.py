"""A rendered deployment (`vfleet render`'s folder) read back: each engine's command line
and the variables its env file sets."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from vfleet.errors import UserError

MAX_FILE_BYTES = 1 << 20  # a command.json or vllm.env is a few KiB; more is not ours


@dataclass(frozen=True)
class RenderedEngine:
    where: str  # host/engine, as the folder has it
    argv: tuple[str, ...]
    env: dict[str, str]

    @property
    def is_vllm(self) -> bool:
        """A `vllm serve` engine (the folder also holds the P/D router's command)."""
        return "serve" in self.argv[:3]

    def options(self) -> dict[str, str | None]:
        """Each `--flag` of the command line with its value (None for a switch); a
        `--flag=value` spelling is split as argparse would."""
        found: dict[str, str | None] = {}
        args = list(self.argv)
        for i, arg in enumerate(args):
            if not arg.startswith("--") or arg == "--":
                continue
            name, eq, value = arg.partition("=")
            if eq:
                found[name] = value
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                found[name] = args[i + 1]
            else:
                found[name] = None
        return found


def _read(path: Path) -> str:
    try:
        if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            raise UserError(f"{path}: not a rendered file; render the deployment again")
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: unreadable ({exc}); render the deployment again") from exc


def _env(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip().strip("\"'")
    return env


def read_rendered(root: Path) -> list[RenderedEngine]:
    """The vLLM engines of a rendered folder, in host and engine order."""
    engines = []
    for command in sorted(root.glob("*/*/command.json")):
        try:
            argv = json.loads(_read(command))
        except json.JSONDecodeError as exc:
            raise UserError(f"{command}: not JSON ({exc.msg}); render again") from exc
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise UserError(f"{command}: not a command line; render the deployment again")
        env_file = command.parent / "vllm.env"
        env = _env(_read(env_file)) if env_file.exists() else {}
        where = command.parent.relative_to(root).as_posix()
        engine = RenderedEngine(where, tuple(argv), env)
        if engine.is_vllm:
            engines.append(engine)
    if not engines:
        raise UserError(f"{root}: no rendered engine (*/*/command.json); render it first")
    return engines
