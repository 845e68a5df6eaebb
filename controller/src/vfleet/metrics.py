"""Read vLLM's Prometheus /metrics text into the signals `vfleet doctor` reasons about.

Metric names moved between releases (vllm-reference.md §7); each signal lists every name it
has had, newest first, so one parser serves 0.8 through 0.33:
- KV usage: vllm:kv_cache_usage_perc (was vllm:gpu_cache_usage_perc until 0.12);
- inter-token latency: vllm:inter_token_latency_seconds (was
  vllm:time_per_output_token_seconds until 0.15);
- preemptions: vllm:num_preemptions_total (V1 counter), vllm:num_preemptions (older);
- queue time: vllm:request_queue_time_seconds (V0: vllm:time_in_queue_requests).
Series with several engines (label engine="0", "1", ...) are summed (counters, gauges of
requests) or averaged (usage), and histograms are merged bucket by bucket.

A value that is not a finite, non-negative number (NaN, +Inf, -3) is no measurement of any
of these signals: its series is left out and the snapshot's `notes` say so, so a broken
exporter shows in the report instead of steering the diagnosis.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field

from vfleet.errors import UserError

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

NAMES = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    "prompt_tokens": ("vllm:prompt_tokens_total", "vllm:prompt_tokens"),
    "generation_tokens": ("vllm:generation_tokens_total", "vllm:generation_tokens"),
    "requests_done": ("vllm:request_success_total", "vllm:request_success"),
}
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


def _parse_lines(text: str) -> list[tuple[str, dict[str, str], float]]:
    rows = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            continue
        name, _, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        rows.append((name, dict(_LABEL.findall(labels or "")), number))
    return rows


def _bound(le: str) -> float | None:
    """A bucket's upper bound, or None when it is not a number Prometheus writes."""
    try:
        bound = float(le)
    except ValueError:
        return None
    return None if math.isnan(bound) or bound < 0 else bound


def parse(texts: list[str], sources: list[str] | None = None) -> Snapshot:
    """Merge the /metrics texts of several endpoints into one snapshot; `sources` names
    each text in errors (its endpoint)."""
    snap = Snapshot()
    samples: dict[str, list[float]] = {}  # plain series by name, across engines
    buckets: dict[str, dict[float, float]] = {}  # histogram base -> bound -> cumulative
    broken: dict[str, str] = {}  # series name -> the first bad value seen
    engines: set[tuple[int, str]] = set()
    for index, text in enumerate(texts):
        rows = _parse_lines(text)
        if not any(name.startswith("vllm:") for name, _, _ in rows):
            where = sources[index] if sources else "the endpoint"
            raise UserError(
                f"{where}/metrics has no vllm: series: point --endpoint at a vLLM API "
                "server (http://HOST:PORT), and check it is the right port"
            )
        for name, labels, value in rows:
            snap.metric_names.add(name)
            if not name.startswith("vllm:"):
                continue
            engines.add((index, labels.get("engine", "0")))
            if name == "vllm:cache_config_info":
                snap.cache_config = labels
                continue
            base = name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
            if not math.isfinite(value) or value < 0:
                broken.setdefault(base, f"{value:g}")
            elif name.endswith("_bucket") and "le" in labels:
                bound = _bound(labels["le"])
                if bound is None:
                    broken.setdefault(base, f"le={labels['le'][:20]!r}")
                    continue
                per = buckets.setdefault(base, {})
                per[bound] = per.get(bound, 0.0) + value
            else:
                samples.setdefault(name, []).append(value)
    for key, values in buckets.items():
        cumulative = [c for _, c in sorted(values.items())]
        if any(b < a for a, b in itertools.pairwise(cumulative)):
            broken.setdefault(key, "buckets that are not cumulative")
    for base, bad in sorted(broken.items()):
        # The whole series goes: a histogram missing one bucket gives wrong quantiles.
        buckets.pop(base, None)
        for suffix in ("", "_count", "_sum"):
            samples.pop(base + suffix, None)
        snap.notes.append(f"{base} ignored: {bad} is not a finite, non-negative measurement")
    for key, names in NAMES.items():
        present = next((n for n in names if n in samples), None)  # newest name wins
        if present:
            values = samples[present]
            snap.values[key] = sum(values) / len(values) if key == "kv_usage" else sum(values)
    for key, names in HISTOGRAMS.items():
        base = next((n for n in names if n in buckets), None)
        if base:
            ordered = sorted(buckets[base].items())
            count = sum(samples.get(f"{base}_count", [ordered[-1][1]]))
            snap.histograms[key] = Histogram(ordered, count, sum(samples.get(f"{base}_sum", [0])))
    snap.engines = max(1, len(engines))
    return snap
