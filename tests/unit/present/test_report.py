"""The deployment report: report.md and report.html from one layout. Values from the plan
and the inventory are text in the HTML, never markup, and both files show the same plots."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from vfleet.budget.compute import BudgetRequest, compute
from vfleet.budget.params import Layout
from vfleet.catalog.gpus import resolve_gpu
from vfleet.catalog.models import load_model
from vfleet.catalog.releases import traits
from vfleet.documents.plan import Alternative, Plan, Predicted
from vfleet.present import report

HOSTILE = "<script>alert(1)</script>"


def _inputs() -> report.ReportInputs:
    req = BudgetRequest(
        spec=load_model("deepseek-ai/DeepSeek-V3"),
        gpu=resolve_gpu("H200-SXM-141GB"),
        traits=traits("0.33.0"),
        layout=Layout(tp=8),
    )
    budget = compute(req)
    # Unchecked, as the planner builds it: a model folder may be named anything.
    plan = Plan.model_construct(
        model=f"evil{HOSTILE}",
        nodes=2,
        gpus_per_node=8,
        gpu="H200",
        vllm_version="0.33.0",
        layout="TP8",
        replicas=2,
        reason="fastest & fits",
        gpu_memory_utilization=0.9,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        max_model_len=32768,
        kv_cache_dtype="auto",
        enable_chunked_prefill=True,
        predicted=Predicted.model_construct(tokens_per_s=1234.5, tpot_ms=20.0),
        alternatives=[
            Alternative.model_construct(
                layout="TP4 PP2",
                replicas=2,
                predicted=Predicted.model_construct(tokens_per_s=1000.0, tpot_ms=25.04),
                why_not="slower",
            )
        ],
    )
    endpoints = [
        {"engine": "engine-0", "url": "http://h1:8000/v1", "mode": "head", "hosts": [HOSTILE]}
    ]
    loadtest = {"endpoint": "engine-0", "completed": 40, "output_throughput": 100.2}
    return report.ReportInputs(
        "local", plan, budget, [budget], [loadtest], endpoints, [("plan", 1.25)], ["a note"]
    )


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.images: list[tuple[str, str]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "img":
            found = dict(attrs)
            self.images.append((found.get("alt") or "", found.get("src") or ""))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, _Page]:
    laid_out = report.build(_inputs(), tmp_path_factory.mktemp("report"))
    html = report.html(laid_out)
    page = _Page()
    page.feed(html)
    return report.markdown(laid_out), html, page


def test_a_script_in_a_model_or_host_name_is_text_in_the_html(built):
    markdown, html, page = built
    assert "script" not in page.tags and "<script" not in html
    # Shown as written, escaped: the model name and the host name.
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert f"<code>evil{escaped}</code>" in html and f"<td>{escaped}</td>" in html
    assert f"`evil{HOSTILE}`" in markdown and f"| {HOSTILE} |" in markdown


def test_every_image_the_markdown_shows_is_in_the_html(built):
    markdown, _, page = built
    shown = re.findall(r"^!\[([^\]]*)\]\(([^)]+)\)$", markdown, re.MULTILINE)
    assert len(shown) == 3  # plan alternatives, KV budget sweep, load test
    assert page.images == shown


def test_the_markdown_keeps_its_tables_and_headings(built):
    markdown, _, _ = built
    lines = markdown.splitlines()
    assert lines[0] == "# vfleet deployment report: local"
    assert [ln for ln in lines if ln.startswith("## ")] == [
        "## Endpoints",
        "## Plan",
        "## KV budget (per GPU)",
        "## Load test",
        "## Phases",
        "## Notes",
    ]
    assert "| engine | URL | mode | hosts |\n|---|---|---|---|\n" in markdown
    assert "Chosen: **TP8 x 2** — fastest & fits" in lines
    assert markdown.endswith("Total: 1 s.\n\n## Notes\n\n- a note\n")


def test_the_plots_are_pngs_next_to_the_report(tmp_path: Path):
    laid_out = report.build(_inputs(), tmp_path)
    assert sorted(p.name for p in laid_out.plots) == [
        "kv_budget.png",
        "loadtest.png",
        "plan_alternatives.png",
    ]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in laid_out.plots)
    assert {i.src for i in laid_out.images()} == {p.name for p in laid_out.plots}
