"""What each recorded vLLM release reads besides its flags (data/vllm_release_facts.json,
written by controller/tools/flag_registry/release_facts.py from the releases themselves): the
environment variables it reads, the Prometheus metric names it registers and the fields of
the JSON configs vfleet renders."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from pydantic import BaseModel

from vfleet.catalog.releases import parse_version
from vfleet.data import DATA_DIR

FACTS_FILE = DATA_DIR / "vllm_release_facts.json"
# The JSON-valued flags vfleet renders, by the config class their JSON is parsed into.
CONFIG_FLAGS = {
    "--kv-transfer-config": "kv_transfer",
    "--speculative-config": "speculative",
    "--compilation-config": "compilation",
}
# prometheus_client exports a counter as <name>_total and a histogram as <name>_bucket,
# _sum and _count, whichever the source spelt: names compare without those endings.
_SERIES_ENDINGS = ("_total", "_bucket", "_sum", "_count")


@dataclass(frozen=True)
class ReleaseFacts:
    version: str
    envs: frozenset[str]
    metrics: frozenset[str]  # base names (metric_base)
    config_fields: dict[str, frozenset[str]]


def metric_base(name: str) -> str:
    """`vllm:num_preemptions_total` and `vllm:num_preemptions` are one metric."""
    for ending in _SERIES_ENDINGS:
        if name.endswith(ending):
            return name[: -len(ending)]
    return name


class _Release(BaseModel):
    envs: list[str]
    metrics: list[str]
    config_fields: dict[str, list[str]]


class _File(BaseModel):
    versions: dict[str, _Release]


@cache
def _versions() -> dict[str, _Release]:
    return _File.model_validate_json(FACTS_FILE.read_text()).versions


def recorded() -> list[str]:
    return sorted(_versions(), key=parse_version)


def facts_for(version: str) -> ReleaseFacts | None:
    """The release's facts, or None where vfleet has no record of that exact release."""
    wanted = parse_version(version)
    for name, raw in _versions().items():
        if parse_version(name) == wanted:
            return ReleaseFacts(
                version=name,
                envs=frozenset(raw.envs),
                metrics=frozenset(metric_base(m) for m in raw.metrics),
                config_fields={k: frozenset(v) for k, v in raw.config_fields.items()},
            )
    return None
