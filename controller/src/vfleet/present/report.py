"""The deployment report: Markdown and HTML with PNG plots, from what the pipeline produced
(plan, budget, load-test results, phase timings). `build` lays the report out once as
sections of tables, images, text and lists; `markdown` writes that as Markdown and `html`
feeds it to templates/report.html.j2 (autoescaped: plan and inventory values are text,
never markup). Writing files is the caller's job except for the plots, which matplotlib
draws straight to PNG."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from vfleet.budget.compute import Budget
from vfleet.documents.plan import Plan, Predicted
from vfleet.present.budget_report import plot_sweep


@dataclass
class ReportInputs:
    env: str
    plan: Plan
    budget: Budget | None
    sweep: list[Budget]
    loadtests: list[dict[str, Any]]  # `vllm bench serve --save-result` JSON, one per endpoint
    endpoints: list[dict[str, Any]]
    phases: list[tuple[str, float]]  # (phase, seconds)
    notes: list[str] = field(default_factory=list)
    ledger: list[dict[str, Any]] = field(default_factory=list)  # this deploy's ledger lines
    stand_in: str = ""  # what is real and what stands in, when the engines stand in for GPUs
    reference_plan: Plan | None = None  # a real model's plan on the planned GPUs
    more: list[Section] = field(default_factory=list)  # drawn by the caller (sweep_report)
    more_plots: list[Path] = field(default_factory=list)


# ---- the report's structure, shared by the Markdown and the HTML --------------------------
Span = tuple[str, str]  # (style, text): style "" (plain), "code" or "strong"


@dataclass(frozen=True)
class Text:
    spans: list[Span]
    kind: ClassVar[str] = "text"


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]
    kind: ClassVar[str] = "table"


@dataclass(frozen=True)
class Image:
    src: str  # relative to the report's directory
    alt: str
    kind: ClassVar[str] = "image"


@dataclass(frozen=True)
class Bullets:
    items: list[str]
    kind: ClassVar[str] = "bullets"


Block = Text | Table | Image | Bullets


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Report:
    title: str  # the page's <title>
    heading: str
    intro: list[Block]
    sections: list[Section]
    plots: list[Path]

    def images(self) -> list[Image]:
        blocks = [*self.intro, *(b for s in self.sections for b in s.blocks)]
        return [b for b in blocks if isinstance(b, Image)]


def _plot_ledger(ledger: list[dict[str, Any]], path: Path) -> None:
    """Measured against predicted, one point per engine and quantity, on log axes with the
    line where they agree."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 4.2))
    values: list[float] = []
    for label, key, _ in LEDGER_ROWS:
        pairs = [
            (e["predicted"].get(key), e["measured"].get(key))
            for e in ledger
            if isinstance(e["predicted"].get(key), int | float)
            and isinstance(e["measured"].get(key), int | float)
            and e["predicted"][key] > 0
            and e["measured"][key] > 0
        ]
        if pairs:
            ax.scatter([p for p, _ in pairs], [m for _, m in pairs], label=label, s=28)
            values += [v for pair in pairs for v in pair]
    if values:
        low, high = min(values) / 2, max(values) * 2
        ax.plot([low, high], [low, high], color="#888", linewidth=0.8, label="measured = predicted")
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("predicted")
    ax.set_ylabel("measured")
    stand_in = any(not e["comparable"] for e in ledger)
    title = "Predicted and measured, per engine"
    ax.set_title(title + (" (stand-in engines: no check)" if stand_in else ""), fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_loadtest(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.get("endpoint", f"#{i}") for i, r in enumerate(results)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    left.bar(names, [r.get("output_throughput", 0) for r in results], color="#4472c4")
    left.set_ylabel("output tokens/s")
    left.set_title("Throughput per endpoint", fontsize=10)
    keys = [
        ("median_ttft_ms", "TTFT p50"),
        ("p99_ttft_ms", "TTFT p99"),
        ("median_itl_ms", "ITL p50"),
        ("p99_itl_ms", "ITL p99"),
    ]
    width = 0.8 / max(len(results), 1)
    for i, r in enumerate(results):
        right.bar(
            [k + i * width for k in range(len(keys))],
            [r.get(k, 0) for k, _ in keys],
            width=width,
            label=names[i],
        )
    right.set_xticks(
        [k + width * (len(results) - 1) / 2 for k in range(len(keys))], [label for _, label in keys]
    )
    right.set_ylabel("ms")
    right.set_title("Latency", fontsize=10)
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _predicted(plan: Plan) -> Predicted:
    assert plan.predicted is not None  # the planner predicts every plan it makes
    return plan.predicted


def _plot_alternatives(plan: Plan, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(f"{plan.layout} x{plan.replicas}", _predicted(plan).tokens_per_s)]
    rows += [
        (f"{a.layout} x{a.replicas}", a.predicted.tokens_per_s) for a in plan.alternatives or []
    ]
    labels = [label for label, _ in rows]
    values = [tokens for _, tokens in rows]
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * len(rows)))
    colors = ["#2e7d32"] + ["#9e9e9e"] * (len(rows) - 1)
    ax.barh(labels[::-1], values[::-1], color=colors[::-1])
    ax.set_xlabel("predicted output tokens/s (whole cluster)")
    ax.set_title("The plan and its alternatives", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _text(*spans: str | Span) -> Text:
    return Text([(("", s) if isinstance(s, str) else s) for s in spans])


def build(inputs: ReportInputs, out_dir: Path) -> Report:
    """Draw the plots into out_dir and lay the report out."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plots: list[Path] = []
    plan = inputs.plan
    intro: list[Block] = [
        _text(
            "Model ",
            ("code", plan.model),
            f" on {plan.nodes} x {plan.gpus_per_node} {plan.gpu}, vLLM {plan.vllm_version}.",
        )
    ]
    if inputs.stand_in:
        intro.append(_text(("strong", "What is real here: "), inputs.stand_in))
    endpoints = Section(
        "Endpoints",
        [
            Table(
                ["engine", "URL", "mode", "hosts"],
                [
                    [e["engine"], e["url"], e["mode"], ", ".join(e["hosts"])]
                    for e in inputs.endpoints
                ],
            )
        ],
    )
    chosen = Section(
        "Plan",
        [
            _text(
                "Chosen: ",
                ("strong", f"{plan.layout} x {plan.replicas}"),
                f" — {plan.reason or ''}",
            ),
            Table(
                ["knob", "value"],
                [
                    ["gpu-memory-utilization", str(plan.gpu_memory_utilization)],
                    ["max-num-seqs", str(plan.max_num_seqs)],
                    ["max-num-batched-tokens", str(plan.max_num_batched_tokens)],
                    ["max-model-len", str(plan.max_model_len)],
                    ["kv-cache-dtype", plan.kv_cache_dtype],
                    ["chunked prefill", "on" if plan.enable_chunked_prefill else "off"],
                ],
            ),
        ],
    )
    sections = [endpoints, chosen]
    if plan.alternatives:
        path = out_dir / "plan_alternatives.png"
        _plot_alternatives(plan, path)
        plots.append(path)
        chosen.blocks += [
            Image(path.name, "plan alternatives"),
            Table(
                ["layout", "tokens/s", "TPOT ms", "why not"],
                [
                    [
                        f"{a.layout} x{a.replicas}",
                        f"{a.predicted.tokens_per_s:,.0f}",
                        f"{a.predicted.tpot_ms:.1f}",
                        a.why_not,
                    ]
                    for a in plan.alternatives
                ],
            ),
        ]
    if inputs.budget:
        b = inputs.budget
        table: list[tuple[str, float]] = [
            ("requested", b.requested_gib),
            ("weights", b.weights_gib),
            ("activation", b.activation_gib),
            ("non-torch", b.non_torch_gib),
            ("CUDA graphs", b.cudagraph_gib),
            ("KV pool", b.available_kv_gib),
        ]
        sections.append(
            Section(
                "KV budget (per GPU)",
                [
                    Table(["term", "GiB"], [[term, f"{gib:.2f}"] for term, gib in table]),
                    _text(
                        f"{b.kv_tokens:,} KV tokens per engine; {b.max_concurrency:.1f} "
                        f"sequences at {b.max_model_len} tokens."
                    ),
                ],
            )
        )
    if inputs.sweep:
        path = out_dir / "kv_budget.png"
        plot_sweep(inputs.sweep, path)
        plots.append(path)
        sections[-1].blocks.append(Image(path.name, "KV budget sweep"))
    if inputs.loadtests:
        path = out_dir / "loadtest.png"
        _plot_loadtest(inputs.loadtests, path)
        plots.append(path)
        sections.append(Section("Load test", [_loadtest_table(inputs.loadtests)]))
        sections[-1].blocks.append(Image(path.name, "load test"))
    if inputs.reference_plan:
        sections.append(_reference_section(inputs.reference_plan))
    main_runs = [e for e in inputs.ledger if not e.get("sweep_level")]  # the sweep: `more`
    if main_runs:
        sections.append(_ledger_section(main_runs))
        path = out_dir / "ledger.png"
        _plot_ledger(main_runs, path)
        plots.append(path)
        sections[-1].blocks.append(Image(path.name, "predicted and measured"))
    sections += inputs.more
    plots += inputs.more_plots
    total = sum(s for _, s in inputs.phases)
    sections.append(
        Section(
            "Phases",
            [
                Table(["phase", "seconds"], [[p, f"{s:.1f}"] for p, s in inputs.phases]),
                _text(f"Total: {total:.0f} s."),
            ],
        )
    )
    if inputs.notes:
        sections.append(Section("Notes", [Bullets(list(inputs.notes))]))
    title = f"vfleet {inputs.env}"
    return Report(title, f"vfleet deployment report: {inputs.env}", intro, sections, plots)


def _reference_section(ref: Plan) -> Section:
    """The plan a real catalog model gets on the GPUs the stand-ins replay: the numbers to
    read as a forecast, unlike the tiny model's."""
    p = _predicted(ref)
    headers = ["layout", "max-num-seqs", "KV tokens per engine", "tokens/s", "TPOT ms", "TTFT ms"]
    row = [
        f"{ref.layout} x{ref.replicas}",
        str(ref.max_num_seqs),
        f"{ref.kv_tokens_per_engine:,}",
        f"{p.tokens_per_s:,.0f}",
        f"{p.tpot_ms:.1f}",
        f"{p.ttft_ms:.0f}",
    ]
    return Section(
        "The same cluster with a real model",
        [
            _text(
                "What vfleet plans for ",
                ("code", ref.model),
                f" on the {ref.nodes} x {ref.gpus_per_node} {ref.gpu} these hosts "
                "stand in for (a prediction for real GPUs; nothing here ran it):",
            ),
            Table(headers, [row]),
        ],
    )


LEDGER_ROWS = (
    ("KV tokens", "kv_tokens", "{:,.0f}"),
    ("KV blocks", "kv_blocks", "{:,.0f}"),
    ("output tok/s", "output_tokens_per_s", "{:,.1f}"),
    ("TTFT p50 ms", "ttft_ms_median", "{:,.1f}"),
    ("TPOT p50 ms", "tpot_ms_median", "{:,.2f}"),
    ("preemptions", "preemptions", "{:,.0f}"),
)


def cell(value: Any, fmt: str) -> str:
    return fmt.format(value) if isinstance(value, int | float) else "n/a"


def _ledger_section(ledger: list[dict[str, Any]]) -> Section:
    """Predicted next to measured, per engine, as artifacts/<env>/ledger.jsonl records them."""
    rows = []
    for entry in ledger:
        for label, key, fmt in LEDGER_ROWS:
            want, got = entry["predicted"].get(key), entry["measured"].get(key)
            ratio = (
                f"{got / want:.2f}"
                if isinstance(want, int | float) and isinstance(got, int | float) and want
                else "n/a"
            )
            rows.append([entry["engine"], label, cell(want, fmt), cell(got, fmt), ratio])
    blocks: list[Block] = [
        Table(["engine", "", "predicted", "measured", "measured / predicted"], rows)
    ]
    stand_ins = {e["why_not"] for e in ledger if not e["comparable"]}
    if stand_ins:
        blocks.append(_text("Not a check of the model: " + "; ".join(sorted(stand_ins)) + "."))
    notes = [n for e in ledger for n in e.get("notes", [])]
    if notes:
        blocks.append(Bullets(notes))
    return Section("Predicted and measured", blocks)


def _loadtest_table(results: list[dict[str, Any]]) -> Table:
    return Table(
        ["endpoint", "completed", "req/s", "output tok/s", "TTFT p50/p99 ms", "ITL p50/p99 ms"],
        [
            [
                r.get("endpoint", "?"),
                str(r.get("completed", "?")),
                f"{r.get('request_throughput', 0):.2f}",
                f"{r.get('output_throughput', 0):.1f}",
                f"{r.get('median_ttft_ms', 0):.1f} / {r.get('p99_ttft_ms', 0):.1f}",
                f"{r.get('median_itl_ms', 0):.1f} / {r.get('p99_itl_ms', 0):.1f}",
            ]
            for r in results
        ],
    )


def _markdown_block(block: Block) -> str:
    if isinstance(block, Table):
        lines = ["| " + " | ".join(block.headers) + " |", "|" + "---|" * len(block.headers)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in block.rows])
    if isinstance(block, Image):
        return f"![{block.alt}]({block.src})"
    if isinstance(block, Bullets):
        return "\n".join(f"- {item}" for item in block.items)
    marks = {"": "", "code": "`", "strong": "**"}
    return "".join(f"{marks[style]}{text}{marks[style]}" for style, text in block.spans)


def markdown(doc: Report) -> str:
    """The report as Markdown (report.md)."""
    lines = [f"# {doc.heading}"]
    for block in doc.intro:
        lines += ["", _markdown_block(block)]
    for section in doc.sections:
        lines += ["", f"## {section.title}"]
        for block in section.blocks:
            lines += ["", _markdown_block(block)]
    return "\n".join(lines) + "\n"


def html(doc: Report) -> str:
    """The report as one HTML page (report.html), from templates/report.html.j2."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("vfleet", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return env.get_template("report.html.j2").render(report=doc)
