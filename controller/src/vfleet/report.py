"""The deployment report: Markdown and HTML with PNG plots, from what the pipeline produced
(plan, budget, load-test results, phase timings). Writing files is the caller's job except
for the plots, which matplotlib draws straight to PNG."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vfleet.budget import Budget


@dataclass
class ReportInputs:
    env: str
    plan: dict[str, Any]
    budget: Budget | None
    sweep: list[Budget]
    loadtests: list[dict[str, Any]]  # `vllm bench serve --save-result` JSON, one per endpoint
    endpoints: list[dict[str, Any]]
    phases: list[tuple[str, float]]  # (phase, seconds)
    notes: list[str] = field(default_factory=list)


def _plot_sweep(points: list[Budget], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    usable = [b for b in points if b.max_concurrency >= 1] or points
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(
        [b.gpu_memory_utilization for b in usable], [b.max_concurrency for b in usable], marker="o"
    )
    ax.set_xlabel("gpu-memory-utilization")
    ax.set_ylabel(f"sequences at {usable[0].max_model_len} tokens")
    ax.set_title("KV budget: concurrency ceiling per engine", fontsize=10)
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


def _plot_alternatives(plan: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [plan, *plan.get("alternatives", [])]
    labels = [f"{r['layout']} x{r['replicas']}" for r in rows]
    values = [r["predicted"]["tokens_per_s"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * len(rows)))
    colors = ["#2e7d32"] + ["#9e9e9e"] * (len(rows) - 1)
    ax.barh(labels[::-1], values[::-1], color=colors[::-1])
    ax.set_xlabel("predicted output tokens/s (whole cluster)")
    ax.set_title("The plan and its alternatives", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def build(inputs: ReportInputs, out_dir: Path) -> tuple[str, list[Path]]:
    """Draw the plots into out_dir and return the Markdown text and the plot paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plots: list[Path] = []
    plan = inputs.plan
    md = [f"# vfleet deployment report: {inputs.env}", ""]
    md += [
        f"Model `{plan['model']}` on {plan['nodes']} x {plan['gpus_per_node']} "
        f"{plan['gpu']}, vLLM {plan['vllm_version']}.",
        "",
    ]
    md += ["## Endpoints", ""]
    md += [
        _table(
            ["engine", "URL", "mode", "hosts"],
            [[e["engine"], e["url"], e["mode"], ", ".join(e["hosts"])] for e in inputs.endpoints],
        )
    ]
    md += [
        "",
        "## Plan",
        "",
        f"Chosen: **{plan['layout']} x {plan['replicas']}** — {plan.get('reason', '')}",
        "",
        _table(
            ["knob", "value"],
            [
                ["gpu-memory-utilization", str(plan["gpu_memory_utilization"])],
                ["max-num-seqs", str(plan["max_num_seqs"])],
                ["max-num-batched-tokens", str(plan["max_num_batched_tokens"])],
                ["max-model-len", str(plan["max_model_len"])],
                ["kv-cache-dtype", plan["kv_cache_dtype"]],
                ["chunked prefill", "on" if plan["enable_chunked_prefill"] else "off"],
            ],
        ),
    ]
    if plan.get("alternatives"):
        path = out_dir / "plan_alternatives.png"
        _plot_alternatives(plan, path)
        plots.append(path)
        md += [
            "",
            "![plan alternatives](plan_alternatives.png)",
            "",
            _table(
                ["layout", "tokens/s", "TPOT ms", "why not"],
                [
                    [
                        f"{a['layout']} x{a['replicas']}",
                        f"{a['predicted']['tokens_per_s']:,.0f}",
                        f"{a['predicted']['tpot_ms']:.1f}",
                        a["why_not"],
                    ]
                    for a in plan["alternatives"]
                ],
            ),
        ]
    if inputs.budget:
        b = inputs.budget
        md += [
            "",
            "## KV budget (per GPU)",
            "",
            _table(
                ["term", "GiB"],
                [
                    ["requested", f"{b.requested_gib:.2f}"],
                    ["weights", f"{b.weights_gib:.2f}"],
                    ["activation", f"{b.activation_gib:.2f}"],
                    ["non-torch", f"{b.non_torch_gib:.2f}"],
                    ["CUDA graphs", f"{b.cudagraph_gib:.2f}"],
                    ["KV pool", f"{b.available_kv_gib:.2f}"],
                ],
            ),
            "",
            f"{b.kv_tokens:,} KV tokens per engine; {b.max_concurrency:.1f} sequences at "
            f"{b.max_model_len} tokens.",
        ]
    if inputs.sweep:
        path = out_dir / "kv_budget.png"
        _plot_sweep(inputs.sweep, path)
        plots.append(path)
        md += ["", "![KV budget sweep](kv_budget.png)"]
    if inputs.loadtests:
        path = out_dir / "loadtest.png"
        _plot_loadtest(inputs.loadtests, path)
        plots.append(path)
        md += [
            "",
            "## Load test",
            "",
            _table(
                [
                    "endpoint",
                    "completed",
                    "req/s",
                    "output tok/s",
                    "TTFT p50/p99 ms",
                    "ITL p50/p99 ms",
                ],
                [
                    [
                        r.get("endpoint", "?"),
                        str(r.get("completed", "?")),
                        f"{r.get('request_throughput', 0):.2f}",
                        f"{r.get('output_throughput', 0):.1f}",
                        f"{r.get('median_ttft_ms', 0):.1f} / {r.get('p99_ttft_ms', 0):.1f}",
                        f"{r.get('median_itl_ms', 0):.1f} / {r.get('p99_itl_ms', 0):.1f}",
                    ]
                    for r in inputs.loadtests
                ],
            ),
            "",
            "![load test](loadtest.png)",
        ]
    md += [
        "",
        "## Phases",
        "",
        _table(["phase", "seconds"], [[p, f"{s:.1f}"] for p, s in inputs.phases]),
    ]
    total = sum(s for _, s in inputs.phases)
    md += ["", f"Total: {total:.0f} s."]
    if inputs.notes:
        md += ["", "## Notes", ""] + [f"- {n}" for n in inputs.notes]
    return "\n".join(md) + "\n", plots


def to_html(markdown: str, title: str) -> str:
    """A small, dependency-free Markdown subset (headings, tables, images, lists) to HTML."""
    body: list[str] = []
    in_table = False
    for line in markdown.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if all(set(c) <= {"-"} for c in cells):
                continue
            tag = "th" if not in_table else "td"
            if not in_table:
                body.append("<table>")
                in_table = True
            body.append("<tr>" + "".join(f"<{tag}>{_inline(c)}</{tag}>" for c in cells) + "</tr>")
            continue
        if in_table:
            body.append("</table>")
            in_table = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            body.append(f"<h{level}>{_inline(line[level:].strip())}</h{level}>")
        elif line.startswith("![") and "](" in line:
            alt, src = line[2:].split("](", 1)
            body.append(
                f'<p><img src="{html.escape(src.rstrip(")"))}" alt="{html.escape(alt)}"></p>'
            )
        elif line.startswith("- "):
            body.append(f"<ul><li>{_inline(line[2:])}</li></ul>")
        elif line.strip():
            body.append(f"<p>{_inline(line)}</p>")
    if in_table:
        body.append("</table>")
    style = (
        "body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
        "padding:4px 8px;font-size:14px}th{background:#f0f0f0}img{max-width:100%}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
        f"</title><style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _inline(text: str) -> str:
    out = html.escape(text)
    while "**" in out:
        out = out.replace("**", "<b>", 1).replace("**", "</b>", 1)
    while out.count("`") >= 2:
        out = out.replace("`", "<code>", 1).replace("`", "</code>", 1)
    return out
