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
"""

from __future__ import annotations

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


def parse(texts: list[str]) -> Snapshot:
    """Merge the /metrics texts of several endpoints into one snapshot."""
    snap = Snapshot()
    samples: dict[str, list[float]] = {}  # plain series by name, across engines
    buckets: dict[str, dict[float, float]] = {}  # histogram base -> bound -> cumulative
    engines: set[tuple[int, str]] = set()
    for index, text in enumerate(texts):
        for name, labels, value in _parse_lines(text):
            snap.metric_names.add(name)
            if not name.startswith("vllm:"):
                continue
            engines.add((index, labels.get("engine", "0")))
            if name == "vllm:cache_config_info":
                snap.cache_config = labels
            elif name.endswith("_bucket") and "le" in labels:
                bound = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
                per = buckets.setdefault(name[: -len("_bucket")], {})
                per[bound] = per.get(bound, 0.0) + value
            else:
                samples.setdefault(name, []).append(value)
    if not any(n.startswith("vllm:") for n in snap.metric_names):
        raise UserError(
            "the endpoint's /metrics has no vllm: series: point --endpoint at a vLLM API "
            "server (http://HOST:PORT), and check it is the right port"
        )
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
