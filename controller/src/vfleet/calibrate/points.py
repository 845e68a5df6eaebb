"""A ledger line as a fitting point: the operating point the load test ran, as the estimator
takes it, and what the engine measured there.

The deploy writes each line (`vfleet.feedback.ledger`); `vfleet calibrate` reads them back
through these strict models, so a hand-edited, truncated or hostile ledger gets one line
naming the file, the line and the field, never a traceback, a hang or a number no engine
could have measured reaching the fit.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    model_validator,
)

from vfleet.budget.kv_layout import KV_DTYPES
from vfleet.budget.speculative import MAX_TOKENS as MAX_SPECULATIVE_TOKENS
from vfleet.calibrate.fitting import BOUNDS, Point
from vfleet.catalog.model_shape import ModelShape
from vfleet.catalog.models import load_model
from vfleet.catalog.releases import traits
from vfleet.documents.flag_types import (
    ENVS,
    MAX_PARALLEL,
    MAX_PREFILL_STEPS,
    MAX_REPLAY_TOKENS,
    MAX_REQUESTS,
    MAX_SEQS,
    MAX_TOKENS,
)
from vfleet.errors import UserError
from vfleet.inputs.files import read_bytes
from vfleet.inputs.strict import StrictModel
from vfleet.perf.fit import Fit, default_fit
from vfleet.plan.candidate import Candidate
from vfleet.plan.estimate import DATASETS, EstimateRequest, prepare
from vfleet.topology.cluster import Cluster

LEDGER_SCHEMA = "vfleet.ledger/2"
READABLE_SCHEMAS = ("vfleet.ledger/1", LEDGER_SCHEMA)
MAX_LEDGER_BYTES = 64 << 20
MAX_LINE_BYTES = 64 << 10  # a deploy writes ~2 KB a line; notes and a long model path fit
MAX_NAME = 4096  # an engine, a model folder, a version: a path's length at most

# The fastest step any engine generation is fitted with (the fitter's lower bound on the
# per-step time, 0.1 ms): a forward pass through every layer of even a small model takes
# longer. A step emits at most one token per scheduled token of a DP rank (a speculative
# draft's tokens are scheduled tokens too), and pipeline stages hold at most PP steps in
# flight, so one engine's output tok/s is at most DP x PP x max-num-batched-tokens / 0.1 ms.
STEP_FLOOR_S = BOUNDS["step_s"][0]
# The same ceiling at the largest DP, PP and max-num-batched-tokens a line may hold (the check
# for a line without its operating point; LedgerLine checks each line at its own layout).
MAX_OUTPUT_TOK_S = MAX_PARALLEL * MAX_PARALLEL * MAX_TOKENS / STEP_FLOOR_S
# `vllm bench serve` gives each request at most 6 hours (its HTTP client's total timeout), so
# no measured TTFT or TPOT is longer; a first token takes at least one step, and a later one
# at least a step shared by one token and its speculative draft.
REQUEST_TIMEOUT_S = 6 * 3600.0
TTFT_FLOOR_MS = STEP_FLOOR_S * 1e3
TPOT_FLOOR_MS = STEP_FLOOR_S * 1e3 / (1 + MAX_SPECULATIVE_TOKENS)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _printable(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters (a newline, a tab, an escape)")
    return value


def _known_env(value: str) -> str:
    if value not in ENVS:
        raise ValueError(f"must be one of {', '.join(ENVS)}")
    return value


def _known_dataset(value: str) -> str:
    if value not in DATASETS:
        raise ValueError(f"must be one of {', '.join(DATASETS)}")
    return value


def _readable_schema(value: str) -> str:
    if value not in READABLE_SCHEMAS:
        raise ValueError(f"must be one of {', '.join(READABLE_SCHEMAS)}")
    return value


def _known_kv_dtype(value: str) -> str:
    if value not in KV_DTYPES:
        raise ValueError(f"must be one of {', '.join(KV_DTYPES)}")
    return value


def _zero_or_at_least(floor: float) -> AfterValidator:
    """0 is what `vllm bench serve` writes when nothing was measured; else at least `floor`."""

    def check(value: float) -> float:
        if 0 < value < floor:
            raise ValueError(f"must be 0 (not measured) or at least {floor:g} ms")
        return value

    return AfterValidator(check)


Name = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_NAME), AfterValidator(_printable)
]
Note = Annotated[str, AfterValidator(_printable)]
Env = Annotated[str, AfterValidator(_known_env)]
Parallel = Annotated[int, Field(ge=1, le=MAX_PARALLEL)]
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Requests = Annotated[int, Field(ge=1, le=MAX_REQUESTS)]
Count = Annotated[int, Field(ge=0)]
Amount = Annotated[float, Field(ge=0)]  # finite: StrictModel refuses NaN and infinities
TokPerS = Annotated[float, Field(ge=0, le=MAX_OUTPUT_TOK_S)]
TtftMs = Annotated[float, Field(ge=0, le=REQUEST_TIMEOUT_S * 1e3), _zero_or_at_least(TTFT_FLOOR_MS)]
TpotMs = Annotated[float, Field(ge=0, le=REQUEST_TIMEOUT_S * 1e3), _zero_or_at_least(TPOT_FLOOR_MS)]


class OperatingPoint(StrictModel):
    """What one engine ran under one load test: enough to ask the estimator the same question.
    Each count is held to what `vfleet estimate` takes on its command line."""

    model: Name
    """The plan's model (a catalog name or a config.json folder)."""
    vllm_version: Name
    tp: Parallel
    pp: Parallel
    dp: Parallel
    ep: bool
    dcp: Parallel
    input_len: Tokens
    output_len: Tokens
    concurrency: Requests | None = None
    """`--max-concurrency` of the run; None: every prompt at once."""
    num_prompts: Requests
    dataset: Annotated[str, AfterValidator(_known_dataset)] = "random"
    """`vllm bench serve --dataset-name`: random (fixed lengths) or sharegpt (their means)."""
    quantization: Name | None = None
    kv_cache_dtype: Annotated[str, AfterValidator(_known_kv_dtype)]
    max_num_seqs: Annotated[int, Field(ge=1, le=MAX_SEQS)]
    max_num_batched_tokens: Tokens
    max_model_len: Tokens
    gpu_memory_utilization: float = Field(gt=0, le=1)
    enable_chunked_prefill: bool

    @property
    def layout(self) -> Candidate:
        return Candidate(self.tp, self.pp, self.dp, self.ep, self.dcp)

    def request(
        self, cluster: Cluster, fit: Fit | None = None, spec: ModelShape | None = None
    ) -> EstimateRequest:
        """The estimator's question for one engine at this point (`spec`: the model already
        loaded, else read from the catalog or its folder)."""
        return EstimateRequest(
            spec=spec or load_model(self.model),
            cluster=cluster,
            layout=self.layout,
            traits=traits(self.vllm_version),
            input_len=self.input_len,
            output_len=self.output_len,
            concurrency=self.concurrency,
            num_prompts=self.num_prompts,
            dataset=self.dataset,
            quantization=self.quantization,
            replicas=1,
            kv_cache_dtype=self.kv_cache_dtype,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_model_len=self.max_model_len,
            gpu_memory_utilization=self.gpu_memory_utilization,
            enable_chunked_prefill=self.enable_chunked_prefill,
            fit=fit or default_fit(),
        )

    def over_work_cap(self) -> str:
        """Why `vfleet estimate` would refuse this run as too much to replay, else ''."""
        decode = self.num_prompts * self.output_len
        if decode > MAX_REPLAY_TOKENS:
            return (
                f"{self.num_prompts:,} prompts x {self.output_len:,} output tokens is "
                f"{decode:,} tokens to replay, more than the {MAX_REPLAY_TOKENS:,} an "
                "estimate takes"
            )
        chunks = math.ceil(self.input_len / self.max_num_batched_tokens)
        steps = self.num_prompts * chunks
        if steps > MAX_PREFILL_STEPS:
            return (
                f"{self.num_prompts:,} prompts of {self.input_len:,} tokens in chunks of "
                f"{self.max_num_batched_tokens:,} is {steps:,} prefill steps, more than the "
                f"{MAX_PREFILL_STEPS:,} an estimate takes"
            )
        return ""


class Predicted(StrictModel):
    """The plan's and the estimator's side of a line (the report's; calibration reads none)."""

    kv_tokens: Count | None = None
    kv_blocks: Count | None = None
    block_size: Count | None = None
    max_concurrency: Count | None = None
    output_tokens_per_s: Amount | None = None
    ttft_ms_median: Amount | None = None
    tpot_ms_median: Amount | None = None
    tpot_ms_p99: Amount | None = None
    preemptions: Amount | None = None
    kv_cap_seqs: Count | None = None
    note: Note | None = None


class Measured(StrictModel):
    """The engine's side: its `vllm bench serve` result and its /metrics page."""

    kv_blocks: Count | None = None
    block_size: Count | None = None
    kv_tokens: Count | None = None
    preemptions: float | None = None
    """Growth since the engine's run before: negative when the engine restarted between."""
    preemptions_total: Amount | None = None
    completed: Count | None = None
    output_tokens_per_s: TokPerS | None = None
    ttft_ms_median: TtftMs | None = None
    tpot_ms_median: TpotMs | None = None
    tpot_ms_p99: TpotMs | None = None


class LedgerLine(StrictModel):
    """One ledger line, every key the deploy writes (an unknown one is refused)."""

    ledger_schema: Annotated[str, AfterValidator(_readable_schema)] | None = Field(
        default=None, alias="schema"
    )
    env: Env | None = None
    at: Name | None = None
    run: Name | None = None
    engine: Name
    sweep_level: Requests | None = None
    measured_at: Name | None = None
    model: Name | None = None
    gpu: Annotated[str, StringConstraints(max_length=MAX_NAME), AfterValidator(_printable)] = ""
    vllm_version: Name | None = None
    layout: Name | None = None
    comparable: bool
    why_not: Note | None = None
    operating_point: OperatingPoint | None = None
    predicted: Predicted | None = None
    measured: Measured
    notes: list[Note] = Field(default_factory=list)
    _line_number: int = PrivateAttr(default=0)

    @property
    def line_number(self) -> int:
        """Where the line sits in its ledger (1-based; 0: not read from a file)."""
        return self._line_number

    @model_validator(mode="after")
    def _throughput_within_reach(self) -> LedgerLine:
        """A measured tok/s this layout could not emit, or slower than a run that ended
        within the client's timeouts, is a corrupted line: it must not reach the fit."""
        op, tok_s = self.operating_point, self.measured.output_tokens_per_s
        if op is None or not tok_s:
            return self
        ceiling = op.dp * op.pp * op.max_num_batched_tokens / STEP_FLOOR_S
        floor = 1 / (op.num_prompts * REQUEST_TIMEOUT_S)
        if not floor <= tok_s <= ceiling:
            raise ValueError(
                f"measured.output_tokens_per_s {tok_s:g} is outside what this run could "
                f"measure ({floor:.3g} to {ceiling:.3g}: DP x PP x max_num_batched_tokens "
                "tokens per 0.1 ms step at most, one token per prompt in 6 h at least)"
            )
        return self


def read_ledger(path: Path) -> list[LedgerLine]:
    """Every line of artifacts/<env>/ledger.jsonl; a malformed one stops with its line number.

    Lines end at b"\\n" alone: a JSON string may hold U+2028 and other characters that
    str.splitlines would split at."""
    if not path.exists():
        raise UserError(
            f"{path} does not exist: deploy first (make deploy ENV=...), whose load test "
            "writes the ledger"
        )
    if path.is_file() and path.stat().st_size > MAX_LEDGER_BYTES:
        raise UserError(f"{path} is over {MAX_LEDGER_BYTES >> 20} MiB: trim its oldest lines")
    raw = read_bytes(path, "ledger", max_bytes=MAX_LEDGER_BYTES)
    out = []
    for number, chunk in enumerate(raw.split(b"\n"), 1):
        if chunk.strip():
            out.append(parse_line(chunk, f"{path}:{number}", number))
    return out


def parse_line(chunk: bytes, where: str, number: int = 0) -> LedgerLine:
    """One ledger line (`where` names it in errors: file and line)."""
    try:
        line = LedgerLine.model_validate(decode_line(chunk, where))
    except ValidationError as exc:
        raise UserError(
            f"{where}: not a ledger line ({first_problem(exc)}); remove or fix that line"
        ) from None
    line._line_number = number
    return line


def decode_line(chunk: bytes, where: str) -> Any:
    """The JSON value of one line: its size, its text and its nesting checked first."""
    fix = "remove or fix that line"
    if len(chunk) > MAX_LINE_BYTES:
        raise UserError(
            f"{where}: a line of {len(chunk):,} bytes, more than the {MAX_LINE_BYTES:,} a "
            f"ledger line takes; {fix}"
        )
    try:
        text = chunk.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"{where}: not UTF-8 text (byte {exc.start}); {fix}") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: not a ledger line (not JSON: {exc.msg}); {fix}") from None
    except ValueError as exc:  # NaN, a key given twice, an integer of 4,300 digits
        reason = str(exc).splitlines()[0].split(";")[0][:200]
        raise UserError(f"{where}: not a ledger line ({reason}); {fix}") from None
    except RecursionError:
        raise UserError(f"{where}: not a ledger line (nests too deep); {fix}") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"{key!r} appears twice")
            seen.add(key)
    return out


def first_problem(exc: ValidationError) -> str:
    """The first of a validation's errors as 'field: why (got value)', on one line."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    why = first["msg"].removeprefix("Value error, ")
    given = first.get("input")
    shown = ""
    if isinstance(given, bool | int | float | str) or given is None:
        text = repr(given)
        shown = f" (got {text if len(text) <= 40 else text[:37] + '...'})"
    out = f"{where}: {why}{shown}" if where else f"{why}{shown}"
    return " ".join(out.split())


@dataclass
class Usable:
    line: LedgerLine
    point: Point


@dataclass
class Sorted:
    usable: list[Usable]
    skipped: list[tuple[LedgerLine, str]]


# The fit replays every run about a hundred times, and once more per run held out: the
# step-replays of one calibration grow as (steps of all runs) x (runs + 1). At ~0.7 us per
# replayed step and ~110 replays per fit, this bound keeps a calibration near a minute on
# one core; the newest runs are kept first and the older ones named as left out.
MAX_CALIBRATION_STEPS = 1_000_000
TIMED_STEP_COST = 10  # a request-rate run is replayed on a clock at each evaluation


def _replay_cost(point: Point) -> int:
    prepared = point.prepared
    if prepared.trajectory is not None:
        return prepared.trajectory.steps
    return TIMED_STEP_COST * int(prepared.outputs.sum())


def fitting_points(lines: list[LedgerLine], cluster: Cluster) -> Sorted:
    """The lines a cluster calibration can use, newest first within the work bound, and
    each other line with why not (both in ledger order)."""
    kept: dict[int, Usable] = {}
    left: dict[int, str] = {}
    steps = 0
    newest_first = sorted(range(len(lines)), key=lambda i: (lines[i].line_number, i))
    for index in reversed(newest_first):
        line = lines[index]
        why = _unusable(line, cluster)
        if not why and steps * (len(kept) + 2) > MAX_CALIBRATION_STEPS:
            why = _over_budget(steps)
        if why:
            left[index] = _numbered(line, why)
            continue
        assert line.operating_point is not None and line.measured.output_tokens_per_s
        try:
            prepared = prepare(line.operating_point.request(cluster))
        except UserError as exc:
            left[index] = _numbered(line, f"the estimator does not take it: {exc}")
            continue
        point = Point(prepared, line.measured.output_tokens_per_s, line.measured.tpot_ms_median)
        cost = _replay_cost(point)
        if (steps + cost) * (len(kept) + 2) > MAX_CALIBRATION_STEPS:
            left[index] = _numbered(line, _over_budget(steps, cost))
            continue
        steps += cost
        kept[index] = Usable(line, point)
    return Sorted([kept[i] for i in sorted(kept)], [(lines[i], left[i]) for i in sorted(left)])


def _over_budget(steps: int, cost: int = 0) -> str:
    more = f" its {cost:,} replay steps" if cost else " it"
    return (
        f"the newer runs already take {steps:,} replay steps and calibrating on{more} too "
        f"would pass the {MAX_CALIBRATION_STEPS:,} step-replays a calibration allows "
        "(runs x fits): older and larger runs are left out first"
    )


def _numbered(line: LedgerLine, why: str) -> str:
    return f"{why} (ledger line {line.line_number})" if line.line_number else why


def _unusable(line: LedgerLine, cluster: Cluster) -> str:
    if not line.comparable:
        return f"not comparable: {line.why_not or 'the engines stand in for the GPUs'}"
    if line.operating_point is None:
        return "written before operating points were recorded"
    if not line.measured.output_tokens_per_s:
        return "no measured output tokens/s"
    if line.gpu and line.gpu != cluster.gpu.name:
        return f"measured on {line.gpu}, the cluster now has {cluster.gpu.name}"
    return line.operating_point.over_work_cap()
