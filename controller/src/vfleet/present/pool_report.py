"""The deploy report's section for a disaggregated plan: the two modes the planner compared,
each pool's settings and planned rate, the KV handover, what the load test measured through
the router next to what the plan predicted, and what each pool's own engines counted
(docs/pd-disaggregation.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vfleet.documents.plan import Plan
from vfleet.observe.doctor import Observation, ms
from vfleet.observe.pool_findings import RECOMPUTE_SHARE
from vfleet.present.report import Block, Section, Table, Text


def pools_section(
    plan: Plan,
    loadtests: list[dict[str, Any]],
    measured: Mapping[str, Observation] | None = None,
) -> Section | None:
    """None for a plan that compared no modes (aggregated by request, or planned before
    disaggregation existed). `measured`: each pool's engines read after the load test."""
    split = plan.disaggregation
    if split is None or (split.chosen == "aggregated" and len(split.compared) < 2):
        return None
    blocks: list[Block] = [
        Text([("", "Serving mode: "), ("strong", split.chosen), ("", f" ({split.reason}).")]),
        Table(
            ["mode", "layout", "GPUs", "output tok/s (p10-p90)", "TTFT p99 ms", "TPOT ms", "SLO"],
            [
                [
                    row.mode,
                    row.layout,
                    str(row.gpus),
                    f"{row.tokens_per_s:,.0f} ({row.tokens_per_s_p10:,.0f}-"
                    f"{row.tokens_per_s_p90:,.0f})",
                    f"{row.ttft_ms:,.0f}",
                    f"{row.tpot_ms:.1f}",
                    "meets" if row.meets_slo else "misses",
                ]
                for row in split.compared
            ],
        ),
    ]
    pools = [("prefill", split.prefill), ("decode", split.decode)]
    rows = [
        [
            name,
            pool.layout,
            str(pool.engines),
            str(pool.max_num_seqs),
            str(pool.max_num_batched_tokens),
            f"{pool.kv_tokens_per_engine:,}",
            f"{pool.tokens_per_s_per_engine:,.0f}",
        ]
        for name, pool in pools
        if pool is not None
    ]
    if rows:
        blocks.append(
            Table(
                [
                    "pool",
                    "layout",
                    "engines",
                    "max-num-seqs",
                    "max-num-batched-tokens",
                    "KV tokens/engine",
                    "planned tok/s/engine",
                ],
                rows,
            )
        )
    if split.transfer is not None:
        t = split.transfer
        path = "RDMA" if t.rdma else "TCP, no RDMA: far slower"
        blocks.append(
            Text(
                [
                    (
                        "",
                        f"KV handover: {t.connector} over {t.link} ({path}), "
                        f"{t.bytes_per_request / 2**20:.1f} MiB and {t.ms_per_request:.0f} ms "
                        "per mean request.",
                    )
                ]
            )
        )
    routed = [r for r in loadtests if r.get("endpoint") == "router"]
    chosen = next((row for row in split.compared if row.mode == split.chosen), None)
    if routed and chosen is not None and split.chosen == "disaggregated":
        got = float(routed[-1].get("output_throughput", 0.0))
        blocks.append(
            Text(
                [
                    (
                        "",
                        f"Measured through the router: {got:,.1f} output tok/s; the plan "
                        f"predicted {chosen.tokens_per_s:,.0f} for the whole deployment.",
                    )
                ]
            )
        )
    if measured:
        blocks += measured_blocks(measured)
    return Section("Aggregated or prefill/decode pools", blocks)


def measured_blocks(measured: Mapping[str, Observation]) -> list[Block]:
    """Each pool's own counters (since its engines started, the load test included) and
    whether the decode pool was handed the prompts' KV or computed them itself."""
    rows = [
        [
            name,
            str(obs.engines),
            f"{obs.requests_done:,.0f}",
            f"{obs.prompt_local:,.0f}",
            f"{obs.prompt_transferred:,.0f}",
            ms(obs.ttft_p50),
            ms(obs.itl_p50),
            f"{obs.preemptions:,.0f}",
            f"{obs.kv_transfer_failures + obs.kv_expired:,.0f}",
        ]
        for name, obs in sorted(measured.items(), key=lambda item: item[0] != "prefill")
    ]
    blocks: list[Block] = [
        Table(
            [
                "pool (measured)",
                "engines",
                "requests",
                "prompt tokens computed",
                "prompt tokens received",
                "TTFT p50",
                "ITL p50",
                "preemptions",
                "KV transfers failed or expired",
            ],
            rows,
        )
    ]
    decode = measured.get("decode")
    if decode is not None:
        prompts = decode.prompt_local + decode.prompt_transferred
        if prompts > 0:
            share = decode.prompt_local / prompts
            verdict = (
                "the KV handover works"
                if share <= RECOMPUTE_SHARE
                else "the decode engines are recomputing prompts: run `vfleet doctor "
                "--endpoints` on this deployment's endpoints.json"
            )
            blocks.append(
                Text(
                    [
                        (
                            "",
                            f"The decode pool computed {decode.prompt_local:,.0f} of its "
                            f"{prompts:,.0f} prompt tokens ({share:.1%}) and received the rest "
                            f"from the prefill pool: {verdict}.",
                        )
                    ]
                )
            )
    return blocks
