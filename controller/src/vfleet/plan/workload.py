"""What the deployment must serve: request shapes, concurrency and latency targets.

Presets follow common serving shapes (chat, rag, batch); a YAML file with the same keys
overrides them, and every key is optional:

    preset: chat              # chat | rag | batch: the values the file leaves out
    input_len: {mean: 1024, p99: 4096}     # tokens, 1-10000000; p99 >= mean
    output_len: {mean: 256, p99: 1024}
    concurrency: 512          # simultaneous requests the cluster should hold, 1-1000000
    slo: {ttft_p99_ms: 2000, tpot_p99_ms: 50}   # milliseconds, finite and above 0

vfleet.documents.workload_file checks the file: an unknown key (`concurency:`) is refused with the
nearest known one, an unknown preset with the list of presets; a p99 left out follows a
raised mean, one written below its mean is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfleet.documents.workload_file import LengthDoc, SloDoc, check_workload, fail
from vfleet.errors import UserError
from vfleet.inputs.files import Document, load_yaml


@dataclass(frozen=True)
class Workload:
    name: str
    input_mean: int
    input_p99: int
    output_mean: int
    output_p99: int
    concurrency: int
    ttft_p99_ms: float
    tpot_p99_ms: float

    @property
    def max_context(self) -> int:
        """max-model-len that admits the p99 request."""
        return self.input_p99 + self.output_p99

    @property
    def mean_context(self) -> int:
        """Average tokens a running sequence holds in KV (prompt plus half its output)."""
        return self.input_mean + self.output_mean // 2


PRESETS = {
    "chat": Workload("chat", 1024, 4096, 256, 1024, 512, 2000, 50),
    "rag": Workload("rag", 4096, 12288, 256, 1024, 256, 4000, 60),
    "batch": Workload("batch", 1024, 4096, 1024, 4096, 2048, 60000, 250),
}


def _from_doc(doc: Document, name: str) -> Workload:
    spec = check_workload(doc)
    base = PRESETS[spec.preset or "chat"]
    inp = spec.input_len or LengthDoc()
    out = spec.output_len or LengthDoc()
    slo = spec.slo or SloDoc()
    input_mean = inp.mean if inp.mean is not None else base.input_mean
    output_mean = out.mean if out.mean is not None else base.output_mean
    # A p99 left out follows a raised mean; one written below its mean is refused.
    for key, part, mean in (("input_len", inp, input_mean), ("output_len", out, output_mean)):
        if part.p99 is not None and part.p99 < mean:
            raise fail(
                doc,
                (key, "p99"),
                f"{part.p99} is below the mean {mean}: p99 must be >= mean (e.g. p99: {mean})",
            )
    return Workload(
        name=name,
        input_mean=input_mean,
        input_p99=inp.p99 if inp.p99 is not None else max(input_mean, base.input_p99),
        output_mean=output_mean,
        output_p99=out.p99 if out.p99 is not None else max(output_mean, base.output_p99),
        concurrency=spec.concurrency if spec.concurrency is not None else base.concurrency,
        ttft_p99_ms=slo.ttft_p99_ms if slo.ttft_p99_ms is not None else base.ttft_p99_ms,
        tpot_p99_ms=slo.tpot_p99_ms if slo.tpot_p99_ms is not None else base.tpot_p99_ms,
    )


def workload_from_dict(raw: Any, name: str = "custom") -> Workload:
    """A workload given as a mapping (no file, so errors carry no line numbers)."""
    return _from_doc(Document(raw, "workload"), name)


def load_workload(text: str | None) -> Workload:
    """`--workload`: a preset name or a YAML file (the chat preset when not given)."""
    if not text:
        return PRESETS["chat"]
    if text in PRESETS:
        return PRESETS[text]
    path = Path(text)
    if not path.exists():
        raise UserError(f"workload {text!r} is neither a preset ({', '.join(PRESETS)}) nor a file")
    return _from_doc(load_yaml(path, "workload file"), path.stem)
