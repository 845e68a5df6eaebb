"""The workload file (`vfleet plan --workload FILE`) as a typed document.

Every key is optional: what a file leaves out comes from its `preset` (chat by default), as
vfleet.plan.workload documents. The model checks each value; `p99 >= mean` spans two keys and the
preset's defaults, so vfleet.plan.workload checks it once they are applied, with `fail` for the
same one-line form.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from vfleet.errors import UserError
from vfleet.inputs.files import Document, Path_
from vfleet.inputs.strict import StrictModel
from vfleet.inputs.validate import validate

PRESET_NAMES = ("chat", "rag", "batch")  # vfleet.plan.workload.PRESETS, checked by a test
MAX_TOKENS = 10_000_000
MAX_CONCURRENCY = 1_000_000

Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Millis = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class LengthDoc(StrictModel):
    """A request length distribution in tokens."""

    mean: Tokens | None = None
    """mean length in tokens, 1-10000000 (e.g. 1024)"""
    p99: Tokens | None = None
    """99th percentile length in tokens, at least the mean (e.g. 4096)"""


class SloDoc(StrictModel):
    """Latency targets."""

    ttft_p99_ms: Millis | None = None
    """p99 time to first token in milliseconds, above 0 (e.g. 2000)"""
    tpot_p99_ms: Millis | None = None
    """p99 time per output token in milliseconds, above 0 (e.g. 50)"""


class WorkloadDoc(StrictModel):
    """A workload file: a preset and the values that override it."""

    preset: Literal["chat", "rag", "batch"] | None = None
    """the preset the file starts from: chat, rag or batch (e.g. rag)"""
    input_len: LengthDoc | None = None
    """prompt lengths (e.g. {mean: 1024, p99: 4096})"""
    output_len: LengthDoc | None = None
    """output lengths (e.g. {mean: 256, p99: 1024})"""
    concurrency: Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)] | None = None
    """simultaneous requests the cluster should hold, 1-1000000 (e.g. 512)"""
    slo: SloDoc | None = None
    """latency targets (e.g. {ttft_p99_ms: 2000, tpot_p99_ms: 50})"""


def fail(doc: Document, path: Path_, message: str) -> UserError:
    """One line in validate's form for a rule that spans fields."""
    line = doc.line_of(path)
    where = doc.source + (f" line {line}" if line else "")
    dotted = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return UserError(f"{where}: {dotted}: {message}")


def check_workload(doc: Document) -> WorkloadDoc:
    """`doc` as a workload document, or a UserError naming the first problem."""
    if doc.data is None:
        raise UserError(
            f"{doc.source}: the workload file is empty: write input_len, output_len, "
            "concurrency or slo (see `vfleet plan --help`)"
        )
    if not isinstance(doc.data, dict):
        raise UserError(
            f"{doc.source}: a workload file must be a YAML mapping (see `vfleet plan --help`)"
        )
    return validate(WorkloadDoc, doc)
