"""`vfleet.observe.metrics.parse` on /metrics text recorded from real vLLM servers of old releases.

The dumps (tests/data/metrics, sources and versions in its README) all come from the V0 engine,
so every signal must be read from the old names: KV usage from `vllm:gpu_cache_usage_perc`,
inter-token latency from `vllm:time_per_output_token_seconds`. Expected quantiles are worked by
hand from each dump's cumulative buckets (Prometheus rule: linear inside the bucket).
"""

from __future__ import annotations

import pytest

from support.paths import DATA
from vfleet.errors import UserError
from vfleet.observe.metrics import parse

DATA = DATA / "metrics"
DATADOG = "v0-0.5.0-datadog-opt-125m.prom"  # vLLM ~0.5.0, facebook/opt-125m, 1 request
KUBEAI = "v0-0.5.4-kubeai-llama31-8b-fp8.prom"  # vLLM ~0.5.4, Llama-3.1-8B FP8, 6 requests
AIBRIX = "v0-0.7.0-aibrix-qwen25-coder-1.5b.prom"  # vLLM ~0.7.0, cut short by its author
FIXTURES = (DATADOG, KUBEAI, AIBRIX)
SERVED = {  # the model_name each server labels its series with
    DATADOG: "facebook/opt-125m",
    KUBEAI: "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8",
    AIBRIX: "Qwen/Qwen2.5-Coder-1.5B-Instruct",
}


def text(name: str) -> str:
    return (DATA / name).read_text()


def snap(*names: str):
    """The dumps read as doctor reads them from endpoints.json: for the first one's model."""
    return parse([text(name) for name in names], model_name=SERVED[names[0]])


def test_every_dump_on_disk_is_covered_here_and_in_the_readme():
    on_disk = {path.name for path in DATA.glob("*.prom")}
    assert on_disk == set(FIXTURES)
    readme = (DATA / "README.md").read_text()
    assert all(name in readme for name in on_disk)


@pytest.mark.parametrize("name", FIXTURES)
def test_v0_dumps_carry_only_the_old_names(name):
    names = snap(name).metric_names
    assert {
        "vllm:gpu_cache_usage_perc",
        "vllm:cpu_cache_usage_perc",
        "vllm:num_requests_swapped",
        "vllm:num_preemptions_total",
    } <= names
    assert "vllm:kv_cache_usage_perc" not in names
    assert not any(n.startswith("vllm:inter_token_latency_seconds") for n in names)
    assert 'engine="' not in text(name)  # V0 has no per-engine label


@pytest.mark.parametrize(
    "name, expected, blocks",
    [
        (
            DATADOG,
            dict(
                running=0.0,
                waiting=0.0,
                kv_usage=0.0,
                preemptions=0.0,
                prompt_tokens=5.0,
                generation_tokens=7.0,
                requests_done=1.0,
            ),
            "7281",
        ),
        (
            # waiting: 2.0 for the served model; the 3.0 on a second model_name series
            # ("other/OTHER") that KubeAI added to the recording is another model's.
            KUBEAI,
            dict(
                running=3.0,
                waiting=2.0,
                kv_usage=0.0026235242675994863,
                preemptions=0.0,
                prompt_tokens=90.0,
                generation_tokens=2546.0,
                requests_done=6.0,
            ),
            "4574",
        ),
        (
            AIBRIX,
            dict(
                running=0.0,
                waiting=0.0,
                kv_usage=0.0,
                preemptions=0.0,
                prompt_tokens=148.0,
                generation_tokens=955.0,
                requests_done=4.0,
            ),
            "81767",
        ),
    ],
)
def test_values_are_the_ones_the_dump_shows(name, expected, blocks):
    found = snap(name)
    assert found.values == expected
    assert found.engines == 1
    assert found.cache_config["num_gpu_blocks"] == blocks
    assert found.cache_config["block_size"] == "16"


def test_kv_usage_comes_from_the_old_gpu_cache_name():
    # The only non-zero KV gauge among the dumps: 0.0026235242675994863 of 4,574 blocks.
    found = snap(KUBEAI)
    assert "vllm:kv_cache_usage_perc" not in found.metric_names
    assert found.values["kv_usage"] == 0.0026235242675994863


def test_itl_is_read_from_time_per_output_token_and_worked_by_hand():
    itl = snap(DATADOG).histograms["itl"]
    assert (itl.count, itl.total) == (6.0, 0.19016313552856445)
    # All 6 samples sit in (0.025, 0.05]: p50 is rank 3 of 6 -> 0.025 + 0.025 * 3/6.
    assert itl.quantile(0.5) == pytest.approx(0.0375)
    assert itl.quantile(0.9) == pytest.approx(0.025 + 0.025 * 5.4 / 6)
    assert itl.mean == pytest.approx(0.19016313552856445 / 6)


def test_ttft_and_itl_quantiles_on_the_loaded_dump():
    found = snap(KUBEAI)
    ttft, itl = found.histograms["ttft"], found.histograms["itl"]
    # TTFT cumulative: <=0.04: 1, <=0.06: 6, <=0.08: 9 (count 9).
    assert ttft.count == 9.0
    assert ttft.quantile(0.5) == pytest.approx(0.04 + 0.02 * (4.5 - 1) / 5)  # 0.054
    assert ttft.quantile(0.9) == pytest.approx(0.06 + 0.02 * (8.1 - 6) / 3)  # 0.074
    # TPOT cumulative: <=0.025: 0, <=0.05: 2519, <=0.1: 2537 (count 2537).
    assert itl.count == 2537.0
    assert itl.quantile(0.5) == pytest.approx(0.025 + 0.025 * 1268.5 / 2519)
    assert itl.quantile(0.999) == pytest.approx(0.075 + 0.025 * (2534.463 - 2519) / 18)
    assert itl.mean == pytest.approx(98.35070300102234 / 2537)


def test_prompt_length_histogram():
    assert snap(DATADOG).histograms["prompt_len"].quantile(0.5) == pytest.approx(3.5)
    prompt_len = snap(KUBEAI).histograms["prompt_len"]
    assert prompt_len.quantile(0.5) == pytest.approx(7.5)  # all 6 in (5, 10]
    assert prompt_len.mean == pytest.approx(10.0)  # 60 tokens / 6 requests


@pytest.mark.parametrize("name", [DATADOG, KUBEAI])
def test_these_releases_export_no_queue_time_histogram(name):
    found = snap(name)
    assert "queue" not in found.histograms
    assert not any("queue" in n for n in found.metric_names)


def test_truncated_dump_has_no_complete_histogram():
    # The AIBrix docs cut the dump inside vllm:iteration_tokens_total; parse must not invent
    # latency histograms from it.
    assert snap(AIBRIX).histograms == {}


def test_two_endpoints_add_up_and_merge_bucket_by_bucket():
    # Two endpoints of one served model: opt-125m's dump relabelled as the KubeAI model.
    same = text(DATADOG).replace(SERVED[DATADOG], SERVED[KUBEAI])
    found = parse([same, text(KUBEAI)], model_name=SERVED[KUBEAI])
    assert found.engines == 2
    assert found.values == dict(
        running=3.0,
        waiting=2.0,
        kv_usage=pytest.approx(0.0026235242675994863 / 2),  # usage is averaged
        preemptions=0.0,
        prompt_tokens=95.0,
        generation_tokens=2553.0,
        requests_done=7.0,
    )
    ttft = found.histograms["ttft"]
    # Merged TTFT: <=0.04: 1, <=0.06: 6, <=0.08: 9, <=0.25: 9, <=0.5: 10 (count 10).
    assert ttft.count == 10.0
    assert ttft.quantile(0.5) == pytest.approx(0.04 + 0.02 * 4 / 5)  # 0.056
    assert ttft.quantile(0.95) == pytest.approx(0.25 + 0.25 * 0.5)  # 0.375, opt-125m's one
    itl = found.histograms["itl"]
    assert itl.count == 2543.0
    assert itl.quantile(0.5) == pytest.approx(0.025 + 0.025 * 1271.5 / 2525)


def test_the_added_second_model_is_refused_without_a_filter_and_left_out_with_one():
    with pytest.raises(UserError) as refused:
        parse([text(KUBEAI)], ["http://k:8000"])
    message = str(refused.value)
    assert "\n" not in message and message.startswith("http://k:8000/metrics serves 2 models")
    assert f"{SERVED[KUBEAI]!r}, 'other/OTHER'" in message and "--served-model-name" in message
    assert parse([text(KUBEAI)], model_name="other/OTHER").values == {"waiting": 3.0}
    # One model per dump: read without a filter, they give what the filtered read gives.
    for name in (DATADOG, AIBRIX):
        assert parse([text(name)]).values == snap(name).values


def test_endpoints_of_different_models_are_not_merged():
    with pytest.raises(UserError, match=r"^the endpoints' /metrics serve 3 models"):
        parse([text(DATADOG), text(KUBEAI)], ["http://a:1", "http://k:1"])
    with pytest.raises(
        UserError, match=r"^http://k:1/metrics serves no model named 'facebook/opt-125m'"
    ):
        parse([text(DATADOG), text(KUBEAI)], ["http://a:1", "http://k:1"], SERVED[DATADOG])
