"""`vfleet doctor` on a disaggregated deployment: each pool judged apart, then the KV
handover and the balance between them. The counters are vLLM 0.32's (the P/D engine test
reads the same ones from real engines; the page is tests/support/metrics_server.py's)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cli_run import vfleet
from support.metrics_server import pd_engine_text as engine_text
from support.metrics_server import serve, text
from vfleet.observe.doctor import observe
from vfleet.observe.metrics import parse
from vfleet.observe.pool_findings import pool_diagnoses


def obs(**kw):
    return observe([(0.0, parse([engine_text(**kw)]))])


def ids(found):
    return [d.id for d in found]


def test_the_source_label_is_read_one_series_per_source():
    snap = parse([engine_text(local=120, pulled=880)])
    assert snap.get("prompt_local") == 120
    assert snap.get("prompt_transferred") == 880


def test_a_working_handover_with_balanced_pools_has_nothing_to_say():
    assert pool_diagnoses(obs(local=102400), obs(pulled=102400)) == []


def test_decode_engines_computing_prompts_are_named_with_their_share():
    found = pool_diagnoses(obs(local=102400), obs(local=40000, pulled=60000))
    assert ids(found) == ["decode_recomputes"]
    assert "40%" in found[0].evidence[0]
    assert "router" in found[0].first_knob


def test_a_few_recomputed_tokens_are_not_a_finding():
    assert pool_diagnoses(obs(local=102400), obs(local=400, pulled=99600)) == []


@pytest.mark.parametrize(
    ("prefill", "decode"),
    [({"expired": 2}, {}), ({}, {"failed": 3}), ({"failed": 1}, {"failed": 1})],
)
def test_failed_or_expired_transfers_point_at_the_nixl_path(prefill, decode):
    found = pool_diagnoses(obs(local=1000, **prefill), obs(pulled=1000, **decode))
    assert ids(found) == ["kv_transfer_failing"]
    assert "UCX_TLS" in found[0].first_knob


def test_a_queue_at_prefill_with_decode_idle_asks_for_more_prefill():
    found = pool_diagnoses(obs(waiting=20, local=1000), obs(running=2, pulled=1000))
    assert ids(found) == ["prefill_starves_decode"]


def test_a_queue_at_decode_with_prefill_idle_asks_for_more_decode():
    found = pool_diagnoses(obs(local=1000), obs(waiting=30, pulled=1000))
    assert ids(found) == ["decode_starves_prefill"]


def test_queues_at_both_pools_blame_neither():
    assert pool_diagnoses(obs(waiting=5, local=10), obs(waiting=5, pulled=10)) == []


@contextlib.contextmanager
def _serving(body: str) -> Iterator[str]:
    yield from serve(text(body))


def _endpoints(path: Path, prefill: str, decode: str) -> Path:
    def entry(engine: str, url: str, pool: str) -> dict[str, object]:
        port = int(url.rsplit(":", 1)[1])
        return {
            "engine": engine, "mode": "single", "host": "h1", "address": "127.0.0.1",
            "port": port, "url": f"{url}/v1", "health": f"{url}/health", "model": "m",
            "hosts": ["h1"], "pool": pool,
        }  # fmt: skip

    doc = {
        "model": "m",
        "endpoints": [
            entry("engine-prefill-0", prefill, "prefill"),
            entry("engine-0", decode, "decode"),
        ],
        "router": {
            "host": "h1",
            "url": "http://127.0.0.1:9/v1",
            "health": "http://127.0.0.1:9/health",
        },
    }
    path.write_text(json.dumps(doc))
    return path


def test_doctor_reads_each_pool_of_a_rendered_endpoints_file(tmp_path):
    with (
        _serving(engine_text(local=102400)) as prefill,
        _serving(engine_text(local=50000, pulled=52400, failed=4)) as decode,
    ):
        listed = _endpoints(tmp_path / "endpoints.json", prefill, decode)
        as_json = vfleet("doctor", "--endpoints", str(listed), "--json")
        as_text = vfleet("doctor", "--endpoints", str(listed))
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    assert set(report["pools"]) == {"prefill", "decode"}
    assert report["verdict"] == "problems"
    assert [d["id"] for d in report["between_pools"]] == [
        "kv_transfer_failing",
        "decode_recomputes",
    ]
    assert report["pools"]["decode"]["observation"]["prompt_transferred"] == 52400
    assert as_text.returncode == 0, as_text.stderr
    for heading in ("== the prefill pool ==", "== the decode pool ==", "== between the pools =="):
        assert heading in as_text.stdout
    assert "The KV handover between the pools is failing" in as_text.stdout
