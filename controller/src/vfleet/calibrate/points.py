"""A ledger line as a fitting point: the operating point the load test ran, as the estimator
takes it, and what the engine measured there.

The deploy writes each line (`vfleet.deploy.ledger`); `vfleet calibrate` reads them back
through these models, so a hand-edited or truncated ledger gets one line naming the entry,
not a traceback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from vfleet.calibrate.fitting import Point
from vfleet.catalog.models import load_model
from vfleet.catalog.modelspec import ModelSpec
from vfleet.catalog.releases import traits
from vfleet.errors import UserError
from vfleet.inputs.base import StrictModel
from vfleet.perf.params import Fit, default_fit
from vfleet.plan.candidate import Candidate
from vfleet.plan.cluster import ClusterSpec
from vfleet.plan.estimate import EstimateRequest, prepare

MAX_LEDGER_BYTES = 64 << 20


class OperatingPoint(StrictModel):
    """What one engine ran under one load test: enough to ask the estimator the same question."""

    model: str
    """The plan's model (a catalog name or a config.json folder)."""
    vllm_version: str
    tp: int = Field(ge=1)
    pp: int = Field(ge=1)
    dp: int = Field(ge=1)
    ep: bool
    dcp: int = Field(ge=1)
    input_len: int = Field(ge=1)
    output_len: int = Field(ge=1)
    concurrency: int | None = Field(default=None, ge=1)
    """`--max-concurrency` of the run; None: every prompt at once."""
    num_prompts: int = Field(ge=1)
    dataset: str = "random"
    """`vllm bench serve --dataset-name`: random (fixed lengths) or sharegpt (their means)."""
    quantization: str | None = None
    kv_cache_dtype: str
    max_num_seqs: int = Field(ge=1)
    max_num_batched_tokens: int = Field(ge=1)
    max_model_len: int = Field(ge=1)
    gpu_memory_utilization: float = Field(gt=0, le=1)
    enable_chunked_prefill: bool

    @property
    def layout(self) -> Candidate:
        return Candidate(self.tp, self.pp, self.dp, self.ep, self.dcp)

    def request(
        self, cluster: ClusterSpec, fit: Fit | None = None, spec: ModelSpec | None = None
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


class Measured(BaseModel):
    """The measured side of a ledger line; keys calibration does not use are kept, unread."""

    model_config = ConfigDict(extra="allow")

    output_tokens_per_s: float | None = None
    tpot_ms_median: float | None = None
    completed: int | None = None


class LedgerLine(BaseModel):
    """One ledger line as calibration reads it (other keys are the report's)."""

    model_config = ConfigDict(extra="allow")

    engine: str
    gpu: str = ""
    sweep_level: int | None = None
    comparable: StrictBool
    why_not: str | None = None
    operating_point: OperatingPoint | None = None
    measured: Measured


def read_ledger(path: Path) -> list[LedgerLine]:
    """Every line of artifacts/<env>/ledger.jsonl; a malformed one stops with its line number."""
    if not path.is_file():
        raise UserError(
            f"{path} does not exist: deploy first (make deploy ENV=...), whose load test "
            "writes the ledger"
        )
    if path.stat().st_size > MAX_LEDGER_BYTES:
        raise UserError(f"{path} is over {MAX_LEDGER_BYTES >> 20} MiB: trim its oldest lines")
    out = []
    for number, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not text.strip():
            continue
        try:
            out.append(LedgerLine.model_validate(json.loads(text)))
        except (ValueError, ValidationError) as exc:
            first = exc.errors()[0] if isinstance(exc, ValidationError) else None
            where = ".".join(str(p) for p in first["loc"]) if first else ""
            why = first["msg"] if first else str(exc).splitlines()[0]
            raise UserError(
                f"{path}:{number}: not a ledger line ({where + ': ' if where else ''}{why}); "
                "remove or fix that line"
            ) from None
    return out


@dataclass
class Usable:
    line: LedgerLine
    point: Point


@dataclass
class Sorted:
    usable: list[Usable]
    skipped: list[tuple[LedgerLine, str]]


def fitting_points(lines: list[LedgerLine], cluster: ClusterSpec) -> Sorted:
    """The lines a cluster calibration can use, and each other line with why not."""
    usable, skipped = [], []
    for line in lines:
        why = _unusable(line, cluster)
        if why:
            skipped.append((line, why))
            continue
        assert line.operating_point is not None and line.measured.output_tokens_per_s
        try:
            prepared = prepare(line.operating_point.request(cluster))
        except UserError as exc:
            skipped.append((line, f"the estimator does not take it: {exc}"))
            continue
        usable.append(
            Usable(
                line,
                Point(prepared, line.measured.output_tokens_per_s, line.measured.tpot_ms_median),
            )
        )
    return Sorted(usable, skipped)


def _unusable(line: LedgerLine, cluster: ClusterSpec) -> str:
    if not line.comparable:
        return f"not comparable: {line.why_not or 'the engines stand in for the GPUs'}"
    if line.operating_point is None:
        return "written before operating points were recorded"
    if not line.measured.output_tokens_per_s or line.measured.output_tokens_per_s <= 0:
        return "no measured output tokens/s"
    if line.gpu and line.gpu != cluster.gpu.name:
        return f"measured on {line.gpu}, the cluster now has {cluster.gpu.name}"
    return ""
