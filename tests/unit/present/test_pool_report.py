"""The deploy report's prefill/decode section, from a plan the planner made, and each pool's
engines read after the load test (real HTTP servers on 127.0.0.1 answering with P/D pages)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.cli_run import vfleet
from support.metrics_server import pd_engine_text, serve, text
from vfleet.deploy.flow import measured_pools, pool_pages
from vfleet.documents.endpoints import Endpoint, pool_urls
from vfleet.documents.plan import load_plan
from vfleet.errors import UserError
from vfleet.observe.doctor import Observation
from vfleet.observe.scrape import observe_groups
from vfleet.present import report
from vfleet.present.pool_report import pools_section

CLUSTER = """\
gpus_per_node: 8
gpu: H200-SXM-141GB
intra_node: {link: nvswitch, busbw_GBps: 440}
inter_node: {fabric: infiniband, busbw_GBps: 350}
nodes:
  - {name: gpu-a, address: 10.0.0.11, ib_hcas: [mlx5_0]}
  - {name: gpu-b, address: 10.0.0.12, ib_hcas: [mlx5_0]}
"""


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("pool-report")
    (work / "cluster.yaml").write_text(CLUSTER)
    out = {}
    for mode in ("disaggregated", "aggregated"):
        out[mode] = work / f"{mode}.json"
        made = vfleet(
            "plan", "--cluster", str(work / "cluster.yaml"), "--model", "Qwen/Qwen3-30B-A3B",
            "--mode", mode, "--vllm-version", "0.33.0", "--out", str(out[mode]),
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
    return out


def _markdown(section: report.Section) -> str:
    return report.markdown(report.Report("t", "t", [], [section], []))


def test_a_disaggregated_plan_shows_both_modes_both_pools_and_the_handover(plans):
    plan = load_plan(plans["disaggregated"])
    section = pools_section(plan, [])
    assert section is not None
    text = _markdown(section)
    split = plan.disaggregation
    assert split is not None and split.prefill is not None and split.decode is not None
    for row in split.compared:
        assert row.layout in text
    assert f"| prefill | {split.prefill.layout} | {split.prefill.engines} |" in text
    assert f"| decode | {split.decode.layout} | {split.decode.engines} |" in text
    assert "NixlConnector over infiniband (RDMA)" in text
    assert "Measured through the router" not in text


def test_the_router_measurement_is_set_beside_the_prediction(plans):
    plan = load_plan(plans["disaggregated"])
    runs = [{"endpoint": "router", "completed": 100, "output_throughput": 1234.5}]
    text = _markdown(pools_section(plan, runs))  # type: ignore[arg-type]
    assert "Measured through the router: 1,234.5 output tok/s" in text


def test_aggregated_serving_asked_for_compared_nothing_and_has_no_section(plans):
    plan = load_plan(plans["aggregated"])
    assert plan.disaggregation is not None and len(plan.disaggregation.compared) == 1
    assert pools_section(plan, [{"endpoint": "engine-0", "output_throughput": 9.0}]) is None


def test_a_plan_from_before_disaggregation_has_no_section(plans):
    plan = load_plan(plans["aggregated"]).model_copy(update={"disaggregation": None})
    assert pools_section(plan, []) is None


@contextlib.contextmanager
def _serving(page: str) -> Iterator[str]:
    yield from serve(text(page))


@contextlib.contextmanager
def _pools(prefill: str, decode: str) -> Iterator[list[Endpoint]]:
    """endpoints.json's entries for one prefill and one decode engine serving these pages."""
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(_serving(page)) for page in (prefill, decode)]
        yield [
            _endpoint(i, pool, url)
            for i, (pool, url) in enumerate(zip(("prefill", "decode"), urls, strict=True))
        ]


def _read(eps: list[Endpoint]) -> dict[str, Observation]:
    """Each pool read over HTTP from here, grouped as `vfleet doctor --endpoints` groups it."""
    return observe_groups(pool_urls(eps), eps[0].model, 0)


def _endpoint(index: int, pool: str | None, url: str) -> Endpoint:
    """One endpoints.json entry, as render writes it, for an engine serving at `url`."""
    return Endpoint.model_validate(
        {
            "engine": f"engine-{index}",
            "mode": "single",
            "host": f"h{index}",
            "port": int(url.rsplit(":", 1)[1]),
            "url": f"{url}/v1",
            "health": f"{url}/health",
            "model": "m",
            "hosts": [f"h{index}"],
            "pool": pool,
        }
    )


def test_each_pools_engines_are_read_and_a_working_handover_is_said(plans):
    plan = load_plan(plans["disaggregated"])
    with _pools(pd_engine_text(local=102400), pd_engine_text(local=800, pulled=101600)) as eps:
        measured = _read(eps)
    assert set(measured) == {"prefill", "decode"}
    assert measured["decode"].prompt_transferred == 101600
    text_ = _markdown(pools_section(plan, [], measured))  # type: ignore[arg-type]
    assert "| prefill | 1 | 100 | 102,400 | 0 |" in text_
    assert "| decode | 1 | 100 | 800 | 101,600 |" in text_
    assert "computed 800 of its 102,400 prompt tokens (0.8%)" in text_
    assert "the KV handover works" in text_


def test_a_decode_pool_recomputing_prompts_is_pointed_at_the_doctor(plans):
    plan = load_plan(plans["disaggregated"])
    recomputing = pd_engine_text(local=51200, pulled=51200, failed=3)
    with _pools(pd_engine_text(local=102400), recomputing) as eps:
        measured = _read(eps)
    text_ = _markdown(pools_section(plan, [], measured))  # type: ignore[arg-type]
    assert "(50.0%)" in text_ and "recomputing prompts" in text_ and "vfleet doctor" in text_
    assert text_.count("| 3 |") == 1  # the failed transfers, on the decode row


def test_an_unreadable_engine_is_named_in_one_error():
    with _serving(pd_engine_text()) as good:
        eps = [_endpoint(0, "prefill", good), _endpoint(1, "decode", "http://127.0.0.1:9")]
        with pytest.raises(UserError, match=r"127\.0\.0\.1:9"):
            _read(eps)


def test_aggregated_engines_are_not_read():
    assert _read([_endpoint(0, None, "http://127.0.0.1:9")]) == {}


def _kept(run: Path, pages: dict[str, str]) -> list[dict[str, Any]]:
    """A load test run's folder holding these engines' pages, and endpoints.json's entries."""
    run.mkdir()
    for engine, page in pages.items():
        (run / f"{engine}.prom").write_text(page)
    (run / "router.json").write_text("{}")
    return [
        _endpoint(0, "prefill", "http://10.0.0.11:8000").model_dump(exclude_none=True),
        _endpoint(1, "decode", "http://10.0.0.12:8000").model_dump(exclude_none=True),
    ]


def test_pages_read_where_the_load_test_ran_are_reduced_per_pool(tmp_path):
    """The deploy reads the pools from the `<engine>.prom` pages the load test kept (the
    controller may have no route to the engines): the same reduction as over HTTP."""
    run = tmp_path / "20261207T000000Z"
    pages = {"engine-0": pd_engine_text(local=102400)}
    pages["engine-1"] = pd_engine_text(local=800, pulled=101600)
    eps = _kept(run, pages)
    assert set(pool_pages(run)) == {"engine-0", "engine-1"}
    measured, unread = measured_pools(eps, run)
    assert unread == "" and measured["decode"].prompt_transferred == 101600
    assert measured["prefill"].prompt_local == 102400


def test_a_missing_or_foreign_page_is_a_note_naming_what_is_wrong(tmp_path):
    eps = _kept(tmp_path / "one", {"engine-0": pd_engine_text()})
    measured, unread = measured_pools(eps, tmp_path / "one")
    assert measured == {} and "10.0.0.12:8000" in unread
    eps = _kept(tmp_path / "two", {"engine-0": pd_engine_text(), "engine-1": "<html>404</html>"})
    measured, unread = measured_pools(eps, tmp_path / "two")
    assert measured == {} and "could not be read" in unread
    assert pool_pages(None) == {} and pool_pages(tmp_path / "absent") == {}
    assert measured_pools([{**eps[0], "pool": None}], None) == ({}, "")
