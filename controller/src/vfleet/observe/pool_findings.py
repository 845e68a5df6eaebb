"""What `vfleet doctor` says of a disaggregated deployment beyond each pool's own findings:
whether the KV handover between the pools works, and which pool holds the other back
(docs/pd-disaggregation.md)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from vfleet.observe.doctor import Observation, ms, numbered
from vfleet.observe.doctor import report_json as report_json_one
from vfleet.observe.doctor import report_text as report_text_one
from vfleet.observe.findings import Diagnosis, EngineConfig

# Decode engines that compute more than this share of their prompts are not being handed the
# KV (a few tokens are normal: the last block may be recomputed).
RECOMPUTE_SHARE = 0.05
# A pool with requests waiting in at least this share of the samples is the bottleneck.
BACKLOG_SHARE = 0.5


def pool_diagnoses(prefill: Observation, decode: Observation) -> list[Diagnosis]:
    """The handover first (a broken one makes every other number meaningless), then the
    balance between the pools."""
    found = _handover(prefill, decode)
    prefill_backlog = prefill.waiting_share >= BACKLOG_SHARE and prefill.waiting > 0
    decode_backlog = (decode.waiting_share >= BACKLOG_SHARE and decode.waiting > 0) or (
        (decode.preemption_rate or 0) > 0
    )
    if prefill_backlog and not decode_backlog:
        found.append(
            Diagnosis(
                "prefill_starves_decode",
                "The prefill pool is the bottleneck: decode engines wait for prompts",
                [
                    f"prefill: requests waiting in {prefill.waiting_share:.0%} of samples "
                    f"(peak {prefill.waiting:.0f}), queue p99 {ms(prefill.queue_p99)}",
                    f"decode: {decode.running / max(decode.engines, 1):.0f} running per "
                    f"engine, nothing waiting, KV usage {decode.kv_usage:.0%}",
                ],
                "give the prefill pool more GPUs (re-plan with `vfleet plan --mode "
                "disaggregated` and the measured prompt lengths: it sizes P:D), or raise the "
                "prefill engines' --max-num-batched-tokens",
            )
        )
    elif decode_backlog and not prefill_backlog:
        preempted = (
            f", {decode.preemption_rate:.2f} preemptions/s" if decode.preemption_rate else ""
        )
        found.append(
            Diagnosis(
                "decode_starves_prefill",
                "The decode pool is the bottleneck: prefilled requests wait for decode slots",
                [
                    f"decode: requests waiting in {decode.waiting_share:.0%} of samples "
                    f"(peak {decode.waiting:.0f}), KV usage {decode.kv_usage:.0%}{preempted}",
                    f"prefill: nothing queued in {1 - prefill.waiting_share:.0%} of samples",
                ],
                "give the decode pool more GPUs (re-plan with `vfleet plan --mode "
                "disaggregated`), or raise the decode engines' --max-num-seqs up to their KV "
                "cap",
            )
        )
    return found


def _handover(prefill: Observation, decode: Observation) -> list[Diagnosis]:
    found = []
    failed = prefill.kv_transfer_failures + decode.kv_transfer_failures
    if failed > 0 or prefill.kv_expired > 0:
        evidence = []
        if failed:
            evidence.append(f"{failed:.0f} NIXL transfers failed (vllm:nixl_num_failed_transfers)")
        if prefill.kv_expired:
            evidence.append(
                f"{prefill.kv_expired:.0f} requests' KV expired on the prefill engines before "
                "a decode engine read it (vllm:nixl_num_kv_expired_reqs)"
            )
        found.append(
            Diagnosis(
                "kv_transfer_failing",
                "The KV handover between the pools is failing",
                evidence,
                "check the NIXL path: the side-channel port blocks (VLLM_NIXL_SIDE_CHANNEL_PORT) "
                "open between the pools' hosts, and UCX_TLS / UCX_NET_DEVICES naming the RDMA "
                "devices (over TCP a transfer can outlast the KV lease)",
                [
                    "after a prefill engine restarts, restart its decode engines: they keep "
                    "stale connections to it (vllm#49238); `make deploy` does this itself"
                ],
            )
        )
    served = decode.prompt_local + decode.prompt_transferred
    if served > 0 and decode.prompt_local / served > RECOMPUTE_SHARE:
        found.append(
            Diagnosis(
                "decode_recomputes",
                "Decode engines compute prompts instead of receiving their KV",
                [
                    f"{decode.prompt_local / served:.0%} of the decode pool's prompt tokens "
                    f"were computed there ({decode.prompt_local:.0f} of {served:.0f}, "
                    "vllm:prompt_tokens_by_source)"
                ],
                "send requests through the P/D router (`router` in endpoints.json), never to a "
                "decode engine directly; then look for failed transfers",
                [
                    "from vLLM 0.13 vfleet renders kv_load_failure_policy: fail, so a failed "
                    "pull fails the request instead of recomputing it"
                ],
            )
        )
    return found


def report_json(
    observed: dict[str, Observation],
    configs: dict[str, EngineConfig],
    per_pool: dict[str, list[Diagnosis]],
    between: list[Diagnosis],
) -> dict[str, Any]:
    """Each pool's report as `vfleet doctor --json` gives one, and the findings between them."""
    problems = bool(between) or any(per_pool.values())
    return {
        "verdict": "problems" if problems else "healthy",
        "pools": {
            name: report_json_one(obs, configs[name], per_pool[name])
            for name, obs in observed.items()
        },
        "between_pools": [asdict(d) for d in between],
    }


def report_text(
    observed: dict[str, Observation],
    configs: dict[str, EngineConfig],
    per_pool: dict[str, list[Diagnosis]],
    between: list[Diagnosis],
    urls: dict[str, list[str]],
) -> str:
    """Each pool's report, then the handover and the balance between them."""
    parts = [
        f"== the {name} pool ==\n" + report_text_one(obs, configs[name], per_pool[name], urls[name])
        for name, obs in observed.items()
    ]
    lines = ["== between the pools =="]
    if not between:
        lines.append(
            "  The KV handover works (no failed or expired transfers, decode engines computed "
            "no prompts) and neither pool holds the other back."
        )
    lines += numbered(between)
    return "\n\n".join([*parts, "\n".join(lines)])
