"""How a published run's request lengths become the replay's: the asked lengths, unless the
published totals show requests that stopped at end-of-sequence."""

from __future__ import annotations

from typing import Any

import pytest

from vfleet_devtools.perfcases import load_cases, published_lengths


def _random_run(output_tok_s: float, req_s: float | None) -> dict[str, Any]:
    results: dict[str, Any] = {"output_tokens_per_s": output_tok_s}
    if req_s is not None:
        results["request_throughput"] = req_s
    return {
        "workload": {"dataset": "random", "input_len": 4000, "output_len": 200},
        "results": results,
    }


@pytest.mark.parametrize(
    "output_tok_s, req_s, want",
    [
        (1135.29, 8.34, 136),  # gpt-oss-120b TP2, 4k prompts: 68,046 tokens for 500 requests
        (2000.0, 10.0, 200),  # as asked
        (1960.0, 10.0, 200),  # 2% short: rounding in the published figures, not EOS
        (2100.0, 10.0, 200),  # never more than max_tokens
        (1135.29, None, 200),  # no request rate published: nothing to go on
    ],
)
def test_a_random_run_is_replayed_with_the_output_it_generated(output_tok_s, req_s, want):
    assert published_lengths(_random_run(output_tok_s, req_s)) == ("random", 4000, want)


def test_the_development_set_replays_the_gpt_oss_4k_runs_with_their_generated_length():
    asked = {c.id: c.request.output_len for c in load_cases() if c.request is not None}
    assert asked["gpustack-gpt-oss-120b-vllm-tp2-dp1-random_4k_input"] == 136
    assert asked["gpustack-deepseek-r1-vllm-tp8-dp1-random_4k_input"] == 200
