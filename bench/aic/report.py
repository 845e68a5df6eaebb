"""The printed report: the scenario table, the link variants, the measured points, details."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from aic.layouts import aic_label, disagg_label
from aic.scenarios import AIC_VERSION, AIC_VLLM, RATIO_TARGET
from aic.tables import aic_systems
from aic.vfleet_side import vfleet_label


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _err(pred: float | None, meas: float) -> float | None:
    return None if pred is None else abs(pred - meas) / meas


def scenario_table(rows: list[dict[str, Any]]) -> list[str]:
    head = (
        f"{'scenario':<31} {'layout from':<16} {'layout':<38} {'vfleet':>8} {'vf TPOT':>7} "
        f"{'AIC':>8} {'AIC TPOT':>8} {'AIC bs/rank':>11}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        plan, aic = r.get("plan"), r.get("aic") or {}
        if plan is None:
            lines.append(f"{r['name']:<31} vfleet failed: {r['error']}")
            continue
        p = plan["predicted"]
        ours, best, dis = aic.get("ours", {}), aic.get("best", {}), aic.get("disagg", {})
        vf_best = r.get("vf_best", {})

        def line(name: str, who: str, layout: str, vf: Any, vtp: Any, row: dict) -> str:
            if "error" in row:
                tail = f"{'-':>8} {'-':>8}  AIC: {row['error'][:70]}"
            else:
                bs = row.get("bs")
                if "decode" in row:
                    bs = f"P{row['prefill']['bs']}/D{row['decode']['bs']}"
                tail = f"{_fmt(row['tok_s']):>8} {row['tpot']:>8.1f} {bs!s:>11}"
            return f"{name:<31} {who:<16} {layout[:38]:<38} {vf:>8} {vtp:>7} {tail}"

        lines.append(
            line(
                r["name"],
                "vfleet plan",
                vfleet_label(plan),
                _fmt(p["tokens_per_s"]),
                f"{p['tpot_ms']:.1f}",
                ours,
            )
        )
        if "error" in best:
            lines.append(line("", "AIC best agg", "-", "-", "-", best))
        else:
            vf_txt = _fmt(vf_best.get("tok_s")) if "tok_s" in vf_best else "-"
            vtp = f"{vf_best['tpot']:.1f}" if "tpot" in vf_best else "-"
            lines.append(line("", "AIC best agg", aic_label(best), vf_txt, vtp, best))
            if "error" in vf_best:
                lines.append(f"{'':<31} {'':<16}   vfleet estimate: {vf_best['error'][:90]}")
            elif vf_best.get("reject"):
                why = vf_best["reject"]
                lines.append(f"{'':<31} {'':<16}   vfleet's planner rejects it: {why}")
        if "error" in dis:
            lines.append(line("", "AIC best disagg", "-", "-", "-", dis))
            if dis.get("why"):
                lines.append(f"{'':<31} {'':<16}   {dis['why']}")
        else:
            lines.append(line("", "AIC best disagg", disagg_label(dis), "n/a", "-", dis))
        lines.append(f"{'':<31} {'':<16}   {ratio_text(r)}")
    return lines


def ratio_text(r: dict[str, Any]) -> str:
    aic = r.get("aic") or {}
    ours, best, dis = aic.get("ours", {}), aic.get("best", {}), aic.get("disagg", {})
    parts = []
    if "tok_s" in ours and best.get("tok_s"):
        ratio = ours["tok_s"] / best["tok_s"]
        flag = "" if ratio >= RATIO_TARGET else "!"
        parts.append(f"AIC's score of vfleet's pick / AIC's best agg = {ratio:.2f}{flag}")
    else:
        parts.append("AIC's score of vfleet's pick / AIC's best agg = -")
    if "tok_s" in dis and best.get("tok_s"):
        parts.append(f"AIC disagg / agg = {dis['tok_s'] / best['tok_s']:.2f}")
    vf_best = r.get("vf_best", {})
    if "tok_s" in vf_best and r["plan"]["predicted"]["tokens_per_s"]:
        mirror = vf_best["tok_s"] / r["plan"]["predicted"]["tokens_per_s"]
        parts.append(f"vfleet's estimate of AIC's best / vfleet's pick = {mirror:.2f}")
    return "; ".join(parts)


def disagg_reasons(rows: list[dict[str, Any]]) -> None:
    """Why AIC's disagg search found nothing, where the agg search says why."""
    for r in rows:
        aic = r.get("aic") or {}
        dis, best = aic.get("disagg", {}), aic.get("best", {})
        if "error" not in dis or "min_worker_gpus" not in best:
            continue
        need = best["min_worker_gpus"]
        if 2 * need > r["gpus"]:
            dis["why"] = (
                f"why: AIC's smallest feasible agg worker has {need} GPUs (the weights need "
                f"them); disagg needs a prefill and a decode worker: {2 * need} > {r['gpus']} GPUs"
            )


def link_lines(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        link, aic = r.get("link"), r.get("aic") or {}
        if not link or r.get("plan") is None:
            continue
        out.append(
            f"{r['name']}: AIC system {link['system']} = AIC's h100_sxm with inter_node_bw "
            f"{link['busbw']:g} GB/s (the cluster file's measured all-reduce busbw). AIC reads "
            f"the field per GPU (stock: 50 GB/s per GPU = one 400G NIC each), so a node's "
            f"single 25 GbE link shared by its GPUs is {link['share']:.2f} GB/s per GPU."
        )
        out.append(f"  {'layout':<38} {'stock 50 GB/s':>14} {'measured':>10} {'per-GPU share':>14}")
        for key, who in (("ours", "vfleet's pick"), ("best", "AIC's best agg")):
            row = aic.get(key, {})
            label = aic_label(row) if "tp" in row else who
            cells = [aic.get(f"{key}@stock", {}), row, aic.get(f"{key}@share", {})]
            text = [_fmt(c.get("tok_s")) if "tok_s" in c else "-" for c in cells]
            out.append(f"  {label[:38]:<38} {text[0]:>14} {text[1]:>10} {text[2]:>14}   ({who})")
        out.append(
            "  (AIC tok/s under the same SLOs; AIC's disagg does not price the KV-cache transfer "
            "between prefill and decode workers, which here would cross the 25 GbE link.)"
        )
    return out


def measured_table(result: dict[str, Any]) -> list[str]:
    head = (
        f"{'point':<50} {'layout':<16} {'ISL/OSL':>10} {'load':>12} {'measured':>9} "
        f"{'AIC':>9} {'vfleet':>9} {'AIC err':>8} {'vf err':>7} {'AIC bs/ctx':>10}  note"
    )
    lines = [head, "-" * len(head)]
    both, both_fixed = [], []
    for p in result["scored"]:
        meas, vf, aic = p["measured"], p["vf"], p["aic"]
        aic_tok, vf_tok = p.get("aic_tok_s"), vf.get("tok_s")
        e_aic, e_vf = _err(aic_tok, meas), _err(vf_tok, meas)
        bs_ctx = f"{aic['bs']}/{aic['ctx_tokens']}" if "bs" in aic else "-"
        notes = []
        if "error" in aic:
            notes.append(f"AIC: {aic['error'][:110]}")
        if p.get("all2all"):
            notes.append(f"AIC has no {p['all2all']} all2all model")
        if p.get("rate_bound"):
            notes.append("AIC = offered load (rate < AIC's closed-loop capacity)")
        if "error" in vf:
            notes.append(f"vfleet: {vf['error'][:60]}")
        elif vf.get("skip"):
            notes.append(f"vfleet: {vf['skip'][:60]}")
        if e_aic is not None and e_vf is not None:
            both.append((e_aic, e_vf))
            if not p["burst"]:
                both_fixed.append((e_aic, e_vf))
        lines.append(
            f"{p['id'][:50]:<50} {p['layout'][:16]:<16} {p['lengths']:>10} {p['load']:>12} "
            f"{_fmt(meas):>9} {_fmt(aic_tok):>9} {_fmt(vf_tok):>9} "
            f"{_pct(e_aic):>8} {_pct(e_vf):>7} {bs_ctx:>10}  {'; '.join(notes)}"
        )
    lines.append("")
    for name, pairs in (("all points both model", both), ("fixed concurrency only", both_fixed)):
        if not pairs:
            lines.append(f"median |error|, {name}: no points")
            continue
        aic_med = statistics.median(a for a, _ in pairs)
        vf_med = statistics.median(v for _, v in pairs)
        lines.append(
            f"median |error|, {name} ({len(pairs)}): AIC {aic_med:.0%}, vfleet {vf_med:.0%}"
        )
    return lines


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def details(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        plan, aic = r.get("plan"), r.get("aic") or {}
        if plan is None:
            continue
        p = plan["predicted"]
        out.append(
            f"  {r['name']}: vfleet {r['vfleet_s']:.2f} s, predicts TPOT {p['tpot_ms']:.1f} ms "
            f"TTFT p99 {p['ttft_ms']:.0f} ms at {plan['max_num_seqs']} seqs/rank "
            f"(kv {plan['kv_cache_dtype']}); AIC system {r['system']}"
        )
        for key, what in (("best", "AIC best"), ("ours", "AIC ours"), ("at_bs", "AIC @seqs")):
            row = aic.get(key)
            if not row:
                continue
            if "error" in row:
                out.append(f"    {what:<10} {row['error']} ({row.get('seconds', 0)} s)")
                continue
            out.append(
                f"    {what:<10} {aic_label(row) + ', bs ' + str(row['bs']):<34} "
                f"TTFT {row['ttft']:6.0f} ms  TPOT {row['tpot']:5.1f} ms  "
                f"ctx_tokens {row['ctx_tokens']:>5}  concurrency {row['concurrency']:>5}  "
                f"mem {row['memory']:.0f} GB  kv {row['kvcache']}  ({row['seconds']} s)"
            )
        dis = aic.get("disagg", {})
        if "error" in dis:
            out.append(f"    {'AIC disagg':<10} {dis['error']} ({dis.get('seconds', 0)} s)")
        elif dis:
            out.append(
                f"    {'AIC disagg':<10} {disagg_label(dis):<34} TTFT {dis['ttft']:6.0f} ms  "
                f"TPOT {dis['tpot']:5.1f} ms  concurrency {dis['concurrency']:>5}  "
                f"({dis['seconds']} s)"
            )
        vf_best = r.get("vf_best", {})
        if "tok_s" in vf_best:
            out.append(
                f"    {'vfleet est':<10} of AIC best: TTFT p99 {vf_best['ttft_p99']:.0f} ms, "
                f"TPOT median {vf_best['tpot']:.1f} ms, {vf_best['running']:.0f} running"
            )
        if "error" in aic and len(aic) == 1:
            out.append(f"    AIC: {aic['error']}")
    return out


def print_report(
    rows: list[dict[str, Any]], measured: dict[str, Any] | None, args: argparse.Namespace
) -> None:
    first = next((r for r in rows if r.get("plan")), {})
    print()
    print(
        f"vfleet vs AIConfigurator {AIC_VERSION} (vllm {AIC_VLLM} data); vfleet plans for vLLM "
        f"{args.vllm_version}; ISL {first.get('isl')} OSL {first.get('osl')} "
        f"({'fixed on both sides' if args.fixed_lengths else 'vfleet: preset p99s'}), TTFT "
        f"{first.get('ttft')} ms, TPOT {first.get('tpot')} ms. Output tok/s of the whole cluster."
    )
    print(
        "  vfleet column: vfleet plan's own prediction for its pick; `vfleet estimate` for "
        "AIC's best agg at AIC's concurrency (batch x DP ranks x replicas); n/a: vfleet does "
        "not model disaggregated serving.\n"
        "  AIC column: AIC's score of that layout under the same SLOs, batch per rank picked "
        "by AIC; AIC best agg searches PP 1-8 too; disagg is AIC's own search.\n"
        "  Layouts in vLLM terms: DP without EP shards experts TP over tp x dp (vLLM's "
        "default); AIC has no DCP: DCP layouts are scored without it. KV dtype = vfleet's."
    )
    print()
    for line in scenario_table(rows):
        print(line)
    print()
    for line in link_lines(rows):
        print(line)
    if measured is not None:
        print_measured(measured)
    print()
    print("Details (per-rank batch, AIC time per call):")
    for line in details(rows):
        print(line)


def print_measured(measured: dict[str, Any]) -> None:
    print()
    print(
        "Published measurements (output tok/s of the whole deployment), each scored at "
        f"its measured layout: AIC with its vLLM {AIC_VLLM} data at batch = concurrency / "
        "ranks (burst: all prompts at once, AIC's best batch up to min(prompts/rank, "
        "max-num-seqs, 512), SLOs lifted; a request-rate limit caps AIC at the offered "
        "load); vfleet at the point's own release (vfleet_devtools.perfcases). AIC bs/ctx: "
        "AIC's batch per rank and its chosen prefill chunk (ctx_tokens)."
    )
    for line in measured_table(measured):
        print(line)
    print()
    print(
        f"Not scored by AIC ({len(measured['skipped'])}); AIC {AIC_VERSION}'s systems with "
        f"data: {', '.join(aic_systems())}:"
    )
    for s in measured["skipped"]:
        print(f"  {s['id'][:60]:<60} {s['reason']}")
