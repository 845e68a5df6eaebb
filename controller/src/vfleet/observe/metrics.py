"""Read vLLM's Prometheus /metrics text into the signals `vfleet doctor` reasons about.

Metric names moved between releases (docs/references.md#metrics); each signal lists every name it
has had, newest first, so one parser serves 0.8 through 0.33:
- KV usage: vllm:kv_cache_usage_perc (was vllm:gpu_cache_usage_perc until 0.12);
- inter-token latency: vllm:inter_token_latency_seconds (was
  vllm:time_per_output_token_seconds until 0.15);
- preemptions: vllm:num_preemptions_total (V1 counter), vllm:num_preemptions (older);
- queue time: vllm:request_queue_time_seconds (V0: vllm:time_in_queue_requests).
Series with several engines (label engine="0", "1", ...) are summed (counters, gauges of
requests) or averaged (usage), and histograms are merged bucket by bucket.

The text is read by prometheus_client's parser; a text it refuses is one error naming the
endpoint and the line, and so is a text of more than MAX_SAMPLES samples, refused before the
parser has built them all (a wrong server's page of 10^6 series would take minutes).
vLLM labels its series with the served model (`model_name`), and one scrape can hold several
models: summed, one model's load would steer another's diagnosis, so
`parse` reads the one it is given and refuses to guess between several. Series without the
label (process_*, vllm:cache_config_info) always count.

A value that is not a finite, non-negative number (NaN, +Inf, -3) is no measurement of any
of these signals: its series is left out and the snapshot's `notes` say so, so a broken
exporter shows in the report instead of steering the diagnosis.
"""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_fd_to_metric_families, text_string_to_metric_families

from vfleet.errors import UserError

# prometheus_client names a counter's samples <name>_total even where the text wrote <name>
# (vllm:num_preemptions reads as vllm:num_preemptions_total): each signal lists both.
NAMES = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    "prompt_tokens": ("vllm:prompt_tokens_total", "vllm:prompt_tokens"),
    "generation_tokens": ("vllm:generation_tokens_total", "vllm:generation_tokens"),
    "requests_done": ("vllm:request_success_total", "vllm:request_success"),
    # Prefill/decode (docs/pd-disaggregation.md): where an engine's prompt KV came from (the
    # counter's `source` label, read as one series per source), and NIXL's transfer failures
    # and KV a prefill engine released before any decode engine read it.
    "prompt_local": ("vllm:prompt_tokens_by_source_total/local_compute",),
    "prompt_transferred": ("vllm:prompt_tokens_by_source_total/external_kv_transfer",),
    "kv_transfer_failures": (
        "vllm:nixl_num_failed_transfers_total",
        "vllm:nixl_num_failed_transfers",
    ),
    "kv_expired": ("vllm:nixl_num_kv_expired_reqs_total", "vllm:nixl_num_kv_expired_reqs"),
}
# Counters read per label value: `name/value` is the series whose label has that value.
BY_LABEL = {"vllm:prompt_tokens_by_source_total": "source"}
HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "queue": ("vllm:request_queue_time_seconds", "vllm:time_in_queue_requests"),
    "prompt_len": ("vllm:request_prompt_tokens",),
}


@dataclass
class Histogram:
    buckets: list[tuple[float, float]]  # (upper bound, cumulative count), sorted
    count: float
    total: float

    def quantile(self, q: float) -> float | None:
        """Prometheus-style quantile from cumulative buckets (linear inside a bucket)."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lower_bound, lower_count = 0.0, 0.0
        for bound, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(bound):
                    return lower_bound
                width = cumulative - lower_count
                fraction = (rank - lower_count) / width if width else 1.0
                return lower_bound + (bound - lower_bound) * fraction
            lower_bound, lower_count = bound, cumulative
        return lower_bound

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None


@dataclass
class Snapshot:
    """One scrape of one or more endpoints, reduced to the signals."""

    values: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)
    cache_config: dict[str, str] = field(default_factory=dict)
    metric_names: set[str] = field(default_factory=set)
    engines: int = 1
    notes: list[str] = field(default_factory=list)  # series left out, and why

    def get(self, key: str, default: float = 0.0) -> float:
        return self.values.get(key, default)


Row = tuple[str, dict[str, str], float]  # sample name, labels, value

# A vLLM server exports a few thousand samples; parsing takes ~14 us a sample, so the cap
# bounds a wrong server's page to seconds. Lines of any kind (HELP, TYPE, comments) are capped
# too: a page of nothing but family headers costs as much.
MAX_SAMPLES = 200_000
LINES_PER_SAMPLE = 4

# What prometheus_client's parser raises on text it refuses (IndexError on some label soup).
_REFUSED = (ValueError, IndexError)


def _one_line(message: object, limit: int = 80) -> str:
    return " ".join(str(message).split())[:limit]


def _refusal(text: str, exc: Exception) -> str:
    """Where and why the parser refused `text`. It names no line itself, but every rule it
    enforces is about one line, so the first line it refuses on its own is the culprit."""
    for number, line in enumerate(io.StringIO(text), 1):  # the lines the parser read
        try:
            for _ in text_string_to_metric_families(line):
                pass
        except _REFUSED as err:
            why = f" ({_one_line(err)})" if str(err).strip() else ""
            return f"line {number} {_one_line(line)!r} is not Prometheus text{why}"
    return f"not Prometheus text ({_one_line(exc) or type(exc).__name__})"


def _capped_lines(text: str, where: str) -> Iterator[str]:
    """The lines of `text` as the parser reads them, refused once past MAX_SAMPLES sample
    lines (or LINES_PER_SAMPLE times as many lines), before the parser builds them all."""
    samples = 0
    for number, line in enumerate(io.StringIO(text), 1):
        if line.lstrip()[:1] not in ("", "#"):
            samples += 1
        if samples > MAX_SAMPLES or number > MAX_SAMPLES * LINES_PER_SAMPLE:
            raise UserError(
                f"{where}/metrics has more than {MAX_SAMPLES:,} samples (or "
                f"{MAX_SAMPLES * LINES_PER_SAMPLE:,} lines), far more than a vLLM server "
                "exports: point --endpoint at a vLLM API server (http://HOST:PORT)"
            )
        yield line


def _read(text: str, where: str) -> list[Row]:
    """Every sample of one /metrics text, in the order the text has them."""
    lines: Any = _capped_lines(text, where)  # the parser only iterates over its "file"
    try:
        return [
            (sample.name, sample.labels, float(sample.value))
            for family in text_fd_to_metric_families(lines)
            for sample in family.samples
        ]
    except _REFUSED as exc:
        raise UserError(
            f"{where}/metrics: {_refusal(text, exc)}: point --endpoint at a vLLM API server "
            "(http://HOST:PORT)"
        ) from None


def _served(rows: list[Row]) -> list[str]:
    """The served models a text's vllm: series are labelled with, first seen first."""
    return list(
        dict.fromkeys(
            labels["model_name"]
            for name, labels, _ in rows
            if name.startswith("vllm:") and "model_name" in labels
        )
    )


def _listed(models: list[str]) -> str:
    shown = ", ".join(repr(_one_line(m)) for m in models[:5])
    return shown + (f" and {len(models) - 5} more" if len(models) > 5 else "")


def _check_model(served: list[list[str]], wheres: list[str], model_name: str | None) -> None:
    """Refuse a model no text serves, and several models read without a choice."""
    if model_name is None:
        every = list(dict.fromkeys(m for models in served for m in models))
        if len(every) > 1:
            holders = [where for where, models in zip(wheres, served, strict=True) if models]
            one = len(holders) == 1
            place = f"{holders[0]}/metrics serves" if one else "the endpoints' /metrics serve"
            raise UserError(
                f"{place} {len(every)} models ({_listed(every)}): pass the served model "
                "name to read (--served-model-name)"
            )
        return
    for where, models in zip(wheres, served, strict=True):
        if models and model_name not in models:
            raise UserError(
                f"{where}/metrics serves no model named {_one_line(model_name)!r} (it serves "
                f"{_listed(models)}): pass the served model name (--served-model-name)"
            )


def _bound(le: str) -> float | None:
    """A bucket's upper bound, or None when it is not a number Prometheus writes."""
    try:
        bound = float(le)
    except ValueError:
        return None
    return None if math.isnan(bound) or bound < 0 else bound


def parse(
    texts: list[str], sources: list[str] | None = None, model_name: str | None = None
) -> Snapshot:
    """Merge the /metrics texts of several endpoints into one snapshot; `sources` names
    each text in errors (its endpoint). `model_name` is the served model to read: series of
    other models are left out, and without it a scrape of several models is refused."""
    wheres = [sources[index] if sources else "the endpoint" for index in range(len(texts))]
    read = [_read_vllm(text, where) for text, where in zip(texts, wheres, strict=True)]
    _check_model([_served(rows) for rows in read], wheres, model_name)
    snap = Snapshot()
    tally = _Tally()
    engines: set[tuple[int, str]] = set()
    for index, rows in enumerate(read):
        for name, labels, value in rows:
            if model_name is not None and labels.get("model_name", model_name) != model_name:
                continue  # another model's series
            snap.metric_names.add(name)
            if not name.startswith("vllm:"):
                continue
            engines.add((index, labels.get("engine", "0")))
            if name == "vllm:cache_config_info":
                snap.cache_config = labels
            else:
                tally.add(name, labels, value)
    snap.notes.extend(tally.drop_broken())
    snap.values.update(_signal_values(tally.samples))
    snap.histograms.update(_signal_histograms(tally.samples, tally.buckets))
    snap.engines = max(1, len(engines))
    return snap


def _read_vllm(text: str, where: str) -> list[Row]:
    """`_read`, refusing a text with no vllm: series (not a vLLM server's /metrics)."""
    rows = _read(text, where)
    if not any(name.startswith("vllm:") for name, _, _ in rows):
        raise UserError(
            f"{where}/metrics has no vllm: series: point --endpoint at a vLLM API "
            "server (http://HOST:PORT), and check it is the right port"
        )
    return rows


@dataclass
class _Tally:
    """The vllm: samples of a scrape, summed across engines, and the series that broke."""

    samples: dict[str, list[float]] = field(default_factory=dict)  # plain series by name
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)  # base -> le -> count
    broken: dict[str, str] = field(default_factory=dict)  # series -> the first bad value seen

    def add(self, name: str, labels: dict[str, str], value: float) -> None:
        base = name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
        if not math.isfinite(value) or value < 0:
            self.broken.setdefault(base, f"{value:g}")
        elif name.endswith("_bucket") and "le" in labels:
            bound = _bound(labels["le"])
            if bound is None:
                self.broken.setdefault(base, f"le={labels['le'][:20]!r}")
                return
            per = self.buckets.setdefault(base, {})
            per[bound] = per.get(bound, 0.0) + value
        else:
            if name in BY_LABEL and BY_LABEL[name] in labels:
                name = f"{name}/{labels[BY_LABEL[name]]}"
            self.samples.setdefault(name, []).append(value)

    def drop_broken(self) -> list[str]:
        """Leave out every broken series whole, returning a note for each, sorted."""
        for key, values in self.buckets.items():
            cumulative = [c for _, c in sorted(values.items())]
            if any(b < a for a, b in itertools.pairwise(cumulative)):
                self.broken.setdefault(key, "buckets that are not cumulative")
        notes = []
        for base, bad in sorted(self.broken.items()):
            # The whole series goes: a histogram missing one bucket gives wrong quantiles.
            self.buckets.pop(base, None)
            for suffix in ("", "_count", "_sum"):
                self.samples.pop(base + suffix, None)
            notes.append(f"{base} ignored: {bad} is not a finite, non-negative measurement")
        return notes


def _signal_values(samples: dict[str, list[float]]) -> dict[str, float]:
    """Each plain signal under the newest name present: KV usage averaged across engines,
    the rest summed."""
    values = {}
    for key, names in NAMES.items():
        present = next((n for n in names if n in samples), None)  # newest name wins
        if present:
            found = samples[present]
            values[key] = sum(found) / len(found) if key == "kv_usage" else sum(found)
    return values


def _signal_histograms(
    samples: dict[str, list[float]], buckets: dict[str, dict[float, float]]
) -> dict[str, Histogram]:
    """Each histogram signal under the newest name present; without a _count series the
    +Inf bucket counts the observations."""
    histograms = {}
    for key, names in HISTOGRAMS.items():
        base = next((n for n in names if n in buckets), None)
        if base:
            ordered = sorted(buckets[base].items())
            count = sum(samples.get(f"{base}_count", [ordered[-1][1]]))
            histograms[key] = Histogram(ordered, count, sum(samples.get(f"{base}_sum", [0])))
    return histograms
