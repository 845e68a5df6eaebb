"""argparse `type=` callables for vfleet's flags, built on vfleet.inputs.values, and the
markers that turn a model's field into a flag (vfleet.cli.from_model reads them).

A bad value fails inside argparse, so the user gets argparse's one line ("argument
--tp: ...") which the CLI turns into exit code 2. Every number is finite and bounded: an
unbounded length or count can turn a sub-second estimate into an hour (or a hang), and a
NaN compares false with everything, so it slips past any later `<= 0` check.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from pydantic import GetCoreSchemaHandler
from pydantic_core import CoreSchema, core_schema

from vfleet.errors import UserError
from vfleet.inputs.values import check_address

if TYPE_CHECKING:
    from vfleet.catalog.model_shape import ModelShape

# The KV block sizes vLLM's --block-size accepts (plan.schema.json holds the same set).
BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
MAX_TOKENS = 1 << 24  # 16M tokens: above every context window a catalog model has
MAX_SEQS = 1 << 20
MAX_PARALLEL = 1024  # per parallel dimension
MAX_REQUESTS = 200_000
MAX_SWEEP_POINTS = 200
MAX_WATCH_S = 3600.0
# The replay's work: decoded tokens over a run (estimate's cap, and calibrate's per ledger
# run) and prefill chunks (calibrate's), so a large but valid product of counts cannot run
# for hours.
MAX_REPLAY_TOKENS = 10_000_000
MAX_PREFILL_STEPS = 1_000_000
ENVS = ("local", "staging", "prod")

_INT = re.compile(r"[+-]?[0-9]{1,30}")
_URL = re.compile(r"(https?)://(\[[0-9A-Fa-f:.]+\]|[^/:\[\]]+)(?::([0-9]{1,5}))?(/\S*)?")
_UNIT = re.compile(r"[A-Za-z0-9:_.@\\-]{1,250}")


def _shown(text: str) -> str:
    """The value as the user can read it back on one line (newlines escaped, cut short)."""
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def count(lo: int = 1, hi: int = MAX_SEQS, what: str = "a whole number") -> Callable[[str], int]:
    """A whole number in [lo, hi]."""

    def parse(text: str) -> int:
        if not _INT.fullmatch(text.strip()):
            raise argparse.ArgumentTypeError(
                f"must be {what} from {lo} to {hi}, got {_shown(text)}"
            )
        value = int(text)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be {what} from {lo} to {hi}, got {value}")
        return value

    return parse


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {_shown(text)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {_shown(text)}")
    return value


def number(
    lo: float, hi: float, *, lo_open: bool = True, example: str = "1.5"
) -> Callable[[str], float]:
    """A finite number in (lo, hi] (or [lo, hi] with lo_open=False)."""
    bracket = "(" if lo_open else "["

    def parse(text: str) -> float:
        value = _float(text)
        if value < lo or (lo_open and value == lo) or value > hi:
            raise argparse.ArgumentTypeError(
                f"must be in {bracket}{lo:g}, {hi:g}] (e.g. {example}), got {text.strip()}"
            )
        return value

    return parse


def fraction(text: str) -> float:
    """--gpu-memory-utilization: the share of the GPU vLLM may use, 0 < x <= 1."""
    value = _float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(
            f"is a fraction of the GPU's memory: more than 0 and at most 1 (e.g. 0.9), "
            f"got {text.strip()}"
        )
    return value


def block_size(text: str) -> int:
    """--block-size: one of the KV block sizes vLLM accepts."""
    allowed = ", ".join(str(b) for b in BLOCK_SIZES)
    if not _INT.fullmatch(text.strip()) or int(text) not in BLOCK_SIZES:
        raise argparse.ArgumentTypeError(
            f"must be a KV block size vLLM accepts ({allowed}), got {_shown(text)}"
        )
    return int(text)


def kv_dtype(text: str) -> str:
    """--kv-cache-dtype: one of the cache dtypes vfleet models
    (vfleet.budget.kv_layout.KV_DTYPES)."""
    from vfleet.budget.kv_layout import KV_DTYPES  # lazy: the parser is built on every command

    if text not in KV_DTYPES:
        raise argparse.ArgumentTypeError(
            f"must be one of {', '.join(KV_DTYPES)}, got {_shown(text)}"
        )
    return text


def sweep(text: str) -> list[float]:
    """--sweep-gpu-memory-utilization START:STOP:STEP -> the utilizations, at most
    MAX_SWEEP_POINTS of them, each in (0, 1]."""
    want = "START:STOP:STEP with 0 < START <= STOP <= 1 and STEP > 0 (e.g. 0.6:0.95:0.05)"
    parts = text.split(":")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"wants {want}, got {_shown(text)}")
    try:
        start, stop, step = (float(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants {want}, got {_shown(text)}") from None
    if not all(math.isfinite(v) for v in (start, stop, step)) or not (
        0 < start <= stop <= 1 and step > 0
    ):
        raise argparse.ArgumentTypeError(f"wants {want}, got {_shown(text)}")
    points = math.floor((stop - start) / step + 1e-9) + 1
    if points > MAX_SWEEP_POINTS:
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} makes {points} points, more than {MAX_SWEEP_POINTS}: use a larger STEP"
        )
    return [round(start + i * step, 4) for i in range(points)]


def endpoint(text: str) -> str:
    """--endpoint: a vLLM API base URL, http(s)://HOST[:PORT][/PATH], HOST an IP or DNS name."""
    want = "write it like http://10.0.0.11:8000"
    m = _URL.fullmatch(text)
    if not m:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a URL: {want}")
    host = m.group(2).strip("[]")
    try:
        check_address(host)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: the host {exc}") from None
    if m.group(3) is not None and not 1 <= int(m.group(3)) <= 65535:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: the port must be 1-65535; {want}")
    if m.group(4) and re.search(r"[\x00-\x1f\x7f]", m.group(4)):
        raise argparse.ArgumentTypeError(f"{_shown(text)} has control characters: {want}")
    return text


def unit(text: str) -> str:
    """--journal: a systemd unit name (e.g. vfleet-vllm-engine-0)."""
    if not _UNIT.fullmatch(text) or text.startswith("-"):
        raise argparse.ArgumentTypeError(
            f"must be a systemd unit name such as vfleet-vllm-engine-0, got {_shown(text)}"
        )
    return text


def env_name(text: str) -> str:
    """--env: one of the environments the repository has."""
    if text not in ENVS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(ENVS)}, got {_shown(text)}")
    return text


def path(text: str) -> Path:
    """A file or folder argument: not empty, no NUL byte (the OS refuses one mid-call)."""
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError(f"must be a file path, got {_shown(text)}")
    return Path(text)


def png_path(text: str) -> Path:
    """--plot: where to write the PNG; the name must end in .png (the writer picks the
    format from it)."""
    if not text.lower().endswith(".png") or re.search(r"[\x00-\x1f\x7f]", text):
        raise argparse.ArgumentTypeError(f"must be a file name ending in .png, got {_shown(text)}")
    return Path(text)


class SchedulerLimits(Protocol):
    """The scheduler flags `budget` and `estimate` both take."""

    @property
    def max_model_len(self) -> int | None: ...
    @property
    def max_num_seqs(self) -> int | None: ...
    @property
    def max_num_batched_tokens(self) -> int | None: ...


def check_scheduler(args: SchedulerLimits, spec: ModelShape) -> None:
    """The rules vLLM applies between flags at start-up, checked before any work: a
    max-model-len past the model's window needs vLLM's own opt-in, and a step holds at least
    one token per sequence (max-num-batched-tokens >= max-num-seqs)."""
    window = spec.max_position_embeddings
    if (
        args.max_model_len
        and args.max_model_len > window
        and os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") != "1"
    ):
        raise UserError(
            f"--max-model-len {args.max_model_len} is past {spec.name}'s context window of "
            f"{window} tokens, which vLLM refuses: lower it, or set "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (vLLM's own opt-in) if the model takes more"
        )
    seqs, tokens = args.max_num_seqs, args.max_num_batched_tokens
    if seqs and tokens and seqs > tokens:
        raise UserError(
            f"--max-num-seqs {seqs} is above --max-num-batched-tokens {tokens}, which vLLM "
            "refuses (a step schedules at least one token per sequence): raise "
            "--max-num-batched-tokens or lower --max-num-seqs"
        )


# ---- a model's field as a flag ------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One of the parsers above as a field's validator, so that a flag's rule is written once:
    argparse runs `parse` on the text (its error reads "argument --tp: ..."), and the model
    runs it again, through the value's text, on a value that did not come from argparse."""

    parse: Callable[[str], Any]

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_before_validator_function(self._check, handler(source))

    def _check(self, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, str | int | float | Path):
            return value  # left to the field's strict type, which refuses it
        try:
            return self.parse(value if isinstance(value, str) else str(value))
        except argparse.ArgumentTypeError as exc:
            raise ValueError(str(exc)) from None


@dataclass(frozen=True)
class Metavar:
    """How --help names the flag's value."""

    metavar: str


@dataclass(frozen=True)
class Derived:
    """What --help shows as the default of a field whose default is worked out when the
    command runs (the probed release, a path from the plan's model)."""

    text: str


@dataclass(frozen=True)
class OneOf:
    """The flag belongs to `group`, of which exactly one flag must be given."""

    group: str


@dataclass(frozen=True)
class NotAFlag:
    """A field vfleet sets itself: the command line has no flag for it."""


FIXED = NotAFlag()


# A file or folder argument, the type most commands share.
FilePath = Annotated[Path, Rule(path)]
