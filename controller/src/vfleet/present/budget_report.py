"""Human output for `vfleet budget`: the worked table, the utilization sweep and its plot."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from vfleet.budget.compute import Budget, BudgetRequest, compute

GIB = 1 << 30


def worked_table(b: Budget) -> str:
    """The budget line by line, the way a KV worked example reads
    (docs/references.md#worked-numbers)."""
    layout = f"TP{b.tensor_parallel_size} PP{b.pipeline_parallel_size}"
    if b.data_parallel_size > 1:
        layout += f" DP{b.data_parallel_size}"
    if b.enable_expert_parallel:
        layout += " EP"
    if b.decode_context_parallel_size > 1:
        layout += f" DCP{b.decode_context_parallel_size}"
    stage_note = ""
    sp = b.speculative
    kernel = f" ({b.moe_backend} MoE layout)" if b.moe_backend else ""
    weights_note = f"{b.weight_format}{kernel}, per GPU, {layout}"
    kv_note = f"kv dtype {b.kv_cache_dtype}"
    if sp:
        last = " on the last stage" if b.pipeline_parallel_size > 1 else ""
        weights_note += f", incl. {sp['method']} draft {sp['draft_weights_gib']:.2f} GiB{last}"
        if sp["draft_kv_layers"]:
            kv_note += f", incl. {sp['draft_kv_layers']} draft layer(s){last}"
    if b.pipeline_parallel_size > 1:
        stage_note = " (the tightest pipeline stage sets every stage's block count)"
    rows: list[tuple[str, str, str]] = [
        ("GPU memory (driver total)", f"{b.gpu_memory_gib:10.2f} GiB", b.gpu),
        ("x gpu-memory-utilization", f"{b.gpu_memory_utilization:10.2f}", f"vLLM {b.vllm_version}"),
        ("= requested", f"{b.requested_gib:10.2f} GiB", "ceil(total x util)"),
        ("- weights", f"{b.weights_gib:10.2f} GiB", weights_note),
        (
            "- activation peak",
            f"{b.activation_gib:10.2f} GiB",
            f"profile run of {b.max_num_batched_tokens} tokens, {b.max_num_seqs} seqs",
        ),
        ("- non-torch", f"{b.non_torch_gib:10.2f} GiB", "cuBLAS, NCCL buffers"),
        (
            "- CUDA graphs",
            f"{b.cudagraph_gib:10.2f} GiB",
            "estimate subtracted (>=0.20)" if b.cudagraph_gib else "not subtracted",
        ),
        (
            "= KV pool per GPU",
            f"{b.available_kv_gib:10.2f} GiB",
            "pinned by --kv-cache-memory-bytes" if b.kv_pinned else stage_note.strip(),
        ),
        _per_unit_row(b, kv_note),
        ("= blocks", f"{b.num_blocks:10d}", _blocks_note(b)),
        ("= KV tokens per engine", f"{b.kv_tokens:10d}", "vLLM's 'GPU KV cache size'"),
        ("/ context (max-model-len)", f"{b.max_model_len:10d}", ""),
        ("= concurrent sequences", f"{b.max_concurrency:10.2f}", "at full context"),
        (
            "recommended max-num-seqs",
            f"{b.recommended_max_num_seqs:10d}",
            f"KV cap at {b.mean_context_len}-token mean context, 10% headroom",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"KV budget: {b.model} on {b.gpu} ({layout}, vLLM {b.vllm_version})", ""]
    lines += [f"  {label:<{width}}  {value}   {note}".rstrip() for label, value, note in rows]
    if sp:
        lines.append(
            f"  (speculative {sp['method']}, {sp['num_speculative_tokens']} token(s): each "
            f"decoding sequence takes {sp['decode_tokens_per_seq']} of the "
            f"{b.max_num_batched_tokens} batched tokens per step)"
        )
    lines += [
        "",
        "  Weights by component (whole model, billions of parameters -> GiB on one GPU"
        " of the first stage):",
    ]
    for name, params in sorted(b.params_by_component_b.items(), key=lambda kv: -kv[1]):
        gib = b.weights_by_component_gib.get(name)
        on_gpu = f"{gib:8.2f} GiB" if gib is not None else "  not loaded" if name == "mtp" else ""
        lines.append(f"    {name:<16} {params:10.3f} B  {on_gpu}".rstrip())
    if "draft" in b.weights_by_component_gib:
        draft = sp["draft_model"] if sp else "draft"
        lines.append(
            f"    {'draft':<16} {draft:>12}  {b.weights_by_component_gib['draft']:8.2f} GiB"
        )
    return "\n".join(lines)


def parse_range(text: str) -> list[float]:
    start, stop, step = (float(x) for x in text.split(":"))
    values, value = [], start
    while value <= stop + 1e-9:
        values.append(round(value, 4))
        value += step
    return values


def sweep(req: BudgetRequest, utils: list[float]) -> list[Budget]:
    return [compute(replace(req, gpu_memory_utilization=u)) for u in utils]


def sweep_table(points: list[Budget]) -> str:
    base = points[0].max_concurrency or 1.0
    lines = [
        "  util   KV GiB/GPU    KV tokens   concurrency   vs first",
        "  ----   ----------   ----------   -----------   --------",
    ]
    for b in points:
        gain = (b.max_concurrency / base - 1) * 100 if base else 0.0
        lines.append(
            f"  {b.gpu_memory_utilization:4.2f}   {b.available_kv_gib:10.2f}   "
            f"{b.kv_tokens:10d}   {b.max_concurrency:11.2f}   {gain:+7.1f}%"
        )
    return "\n".join(lines)


def plot_sweep(points: list[Budget], path: Path) -> None:
    import matplotlib  # lazy: only the plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [b for b in points if b.max_concurrency >= 1] or points
    utils = [b.gpu_memory_utilization for b in points]
    conc = [b.max_concurrency for b in points]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(utils, conc, marker="o")
    ax.set_xlabel("gpu-memory-utilization")
    ax.set_ylabel(f"concurrent sequences at {points[0].max_model_len} tokens")
    first = points[0]
    ax.set_title(
        f"{first.model} on {first.gpu}, TP{first.tensor_parallel_size} "
        f"PP{first.pipeline_parallel_size}, vLLM {first.vllm_version}",
        fontsize=9,
    )
    if conc[0] > 0:
        ax.annotate(
            f"{(conc[-1] / conc[0] - 1) * 100:+.0f}% from {utils[0]} to {utils[-1]}",
            xy=(utils[-1], conc[-1]),
            xytext=(-160, -30),
            textcoords="offset points",
        )
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _per_unit_row(b: Budget, kv_note: str) -> tuple[str, str, str]:
    # A hybrid cache's block spans groups of different page sizes: divide by the block.
    if len(b.kv_groups) > 1:
        return ("/ KV bytes per block per GPU", f"{b.kv_bytes_per_block:10d} B", kv_note)
    return ("/ KV bytes per token per GPU", f"{b.kv_bytes_per_token:10d} B", kv_note)


def _blocks_note(b: Budget) -> str:
    if len(b.kv_groups) <= 1:
        return f"{b.block_size} tokens each"
    kinds: dict[str, list[int]] = {}
    for g in b.kv_groups:
        kinds.setdefault(str(g["kind"]), []).append(int(g["block_size"]))
    parts = [
        f"{len(sizes)} {kind} ({'/'.join(map(str, sorted(set(sizes))))} tok)"
        for kind, sizes in kinds.items()
    ]
    return f"shared by {len(b.kv_groups)} groups: " + ", ".join(parts)
