"""What the deployment must serve: request shapes, concurrency and latency targets.

Presets follow common serving shapes; a YAML file with the same keys overrides them:

    input_len: {mean: 1024, p99: 4096}
    output_len: {mean: 256, p99: 1024}
    concurrency: 512          # simultaneous requests the cluster should hold
    slo: {ttft_p99_ms: 2000, tpot_p99_ms: 50}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfleet.errors import UserError


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


def _section(raw: dict[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        raise UserError(f"workload: {key} must be a mapping like {{mean: 1024, p99: 4096}}")
    return value


def _positive(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"workload: {what} must be a number, got {value!r}") from None
    if number <= 0:
        raise UserError(f"workload: {what} must be greater than zero, got {value!r}")
    return number


def workload_from_dict(raw: Any, name: str = "custom") -> Workload:
    if not isinstance(raw, dict):
        raise UserError("workload file must be a YAML mapping (see `vfleet plan --help`)")
    base = PRESETS[raw.get("preset", "chat")] if raw.get("preset") in PRESETS else PRESETS["chat"]
    inp, out, slo = _section(raw, "input_len"), _section(raw, "output_len"), _section(raw, "slo")
    input_mean = int(_positive(inp.get("mean", base.input_mean), "input_len.mean"))
    output_mean = int(_positive(out.get("mean", base.output_mean), "output_len.mean"))
    workload = Workload(
        name=name,
        input_mean=input_mean,
        input_p99=int(_positive(inp.get("p99", max(input_mean, base.input_p99)), "input_len.p99")),
        output_mean=output_mean,
        output_p99=int(
            _positive(out.get("p99", max(output_mean, base.output_p99)), "output_len.p99")
        ),
        concurrency=int(_positive(raw.get("concurrency", base.concurrency), "concurrency")),
        ttft_p99_ms=_positive(slo.get("ttft_p99_ms", base.ttft_p99_ms), "slo.ttft_p99_ms"),
        tpot_p99_ms=_positive(slo.get("tpot_p99_ms", base.tpot_p99_ms), "slo.tpot_p99_ms"),
    )
    if workload.input_p99 < workload.input_mean or workload.output_p99 < workload.output_mean:
        raise UserError("workload: a p99 length is below its mean: p99 must be >= mean")
    return workload


def load_workload(text: str | None) -> Workload:
    if not text:
        return PRESETS["chat"]
    if text in PRESETS:
        return PRESETS[text]
    path = Path(text)
    if not path.is_file():
        raise UserError(f"workload {text!r} is neither a preset ({', '.join(PRESETS)}) nor a file")
    import yaml

    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UserError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    return workload_from_dict(raw, name=path.stem)
