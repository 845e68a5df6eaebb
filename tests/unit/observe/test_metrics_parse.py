"""`vfleet.observe.metrics.parse` on V1-style text as prometheus_client reads it: two models in
one scrape, text the parser refuses, values that are no measurement, histogram families, and
`vfleet doctor --served-model-name` passing the choice through."""

from __future__ import annotations

import json

import pytest

from vfleet.cli import main as cli
from vfleet.errors import UserError
from vfleet.observe import scrape
from vfleet.observe.metrics import parse

# One server, two served models (as with two LoRA-free model names on one port): each
# model's series carries its model_name; process and cache-config series carry none.
TWO = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} 7.0
vllm:num_requests_running{engine="0",model_name="qwen"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 4.0
vllm:num_requests_waiting{engine="0",model_name="qwen"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.75
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.25
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="llama"} 12.0
vllm:num_preemptions_total{engine="0",model_name="qwen"} 1.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="5000"} 1.0
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.0e+09
"""

HISTOGRAM = """# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} 6.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 8.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 3.2
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 8.0
vllm:time_to_first_token_seconds_created{engine="0",model_name="m"} 1.7e+09
"""


def test_each_model_read_alone_gives_its_own_numbers():
    llama, qwen = parse([TWO], model_name="llama"), parse([TWO], model_name="qwen")
    assert llama.values == dict(running=7.0, waiting=4.0, kv_usage=0.75, preemptions=12.0)
    assert qwen.values == dict(running=2.0, waiting=0.0, kv_usage=0.25, preemptions=1.0)
    for snap in (llama, qwen):  # series without model_name count for either model
        assert snap.cache_config["num_gpu_blocks"] == "5000"
        assert "process_resident_memory_bytes" in snap.metric_names
        assert snap.engines == 1


def test_two_models_without_a_filter_are_refused_listing_both():
    with pytest.raises(UserError) as refused:
        parse([TWO], ["http://10.0.0.1:8000"])
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("http://10.0.0.1:8000/metrics serves 2 models ('llama', 'qwen')")
    assert "--served-model-name" in message


def test_a_model_the_endpoint_does_not_serve_is_named():
    with pytest.raises(UserError, match=r"^http://a:1/metrics serves no model named 'mistral'"):
        parse([TWO], ["http://a:1"], model_name="mistral")


def test_series_without_a_model_label_are_read_under_any_filter():
    text = "vllm:num_requests_running 3\nvllm:num_requests_waiting 1\n"
    assert parse([text], model_name="whatever").values == dict(running=3.0, waiting=1.0)


@pytest.mark.parametrize(
    "line",
    [
        'vllm:num_requests_running{engine="0" 3',  # unclosed labels
        "vllm:num_requests_running{engine=0} 3",  # unquoted label value
        "vllm:num_requests_running 1.2.3",  # not a number
        '{engine="0"} 3',  # no metric name
        "}\\}{, =+a}_a{.-EIa",  # the parser's own IndexError
    ],
)
def test_text_the_parser_refuses_is_one_line_naming_endpoint_and_line(line):
    text = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n" + line + "\n"
    with pytest.raises(UserError) as refused:
        parse([text], ["http://10.0.0.1:8000"])
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"http://10.0.0.1:8000/metrics: line 3 {line!r} is not Prometheus")


def test_a_bad_type_comment_is_refused_too():
    text = "vllm:num_requests_running 1\n# TYPE vllm:num_requests_waiting\n"
    with pytest.raises(UserError, match=r"^the endpoint/metrics: line 2 '# TYPE vllm:num_"):
        parse([text])


@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-1"])
def test_a_bad_value_of_the_served_model_drops_its_series_with_a_note(bad):
    text = TWO.replace('model_name="llama"} 4.0', f'model_name="llama"}} {bad}')
    llama = parse([text], model_name="llama")
    assert "waiting" not in llama.values and llama.values["running"] == 7.0
    assert llama.notes == [
        f"vllm:num_requests_waiting ignored: {float(bad):g} is not a finite, non-negative "
        "measurement"
    ]
    # Another model's broken series is not the served model's problem.
    qwen = parse([text], model_name="qwen")
    assert qwen.values["waiting"] == 0.0 and qwen.notes == []


def test_histogram_family_buckets_sum_and_count_are_read():
    ttft = parse([HISTOGRAM]).histograms["ttft"]
    assert ttft.buckets == [(0.1, 2.0), (0.5, 6.0), (float("inf"), 8.0)]
    assert (ttft.count, ttft.total) == (8.0, 3.2)
    assert ttft.quantile(0.5) == pytest.approx(0.1 + 0.4 * (4 - 2) / 4)  # rank 4 of 8
    assert ttft.mean == pytest.approx(0.4)


def test_histograms_of_two_engines_merge_bucket_by_bucket():
    second = HISTOGRAM.replace('engine="0"', 'engine="1"').split("\n", 2)[2]  # no # lines
    ttft = parse([HISTOGRAM + second]).histograms["ttft"]
    assert ttft.buckets == [(0.1, 4.0), (0.5, 12.0), (float("inf"), 16.0)]
    assert (ttft.count, ttft.total) == (16.0, 6.4)


def test_a_histogram_family_whose_buckets_shrink_is_dropped_with_a_note():
    text = HISTOGRAM.replace('le="0.5",model_name="m"} 6.0', 'le="0.5",model_name="m"} 1.0')
    snap = parse([text])
    assert "ttft" not in snap.histograms
    assert snap.notes == [
        "vllm:time_to_first_token_seconds ignored: buckets that are not cumulative is not a "
        "finite, non-negative measurement"
    ]


def test_an_old_counter_without_total_still_reads():
    # prometheus_client names this counter's sample vllm:num_preemptions_total.
    text = "# TYPE vllm:num_preemptions counter\nvllm:num_preemptions 4\n"
    assert parse([text]).values == {"preemptions": 4.0}


def _endpoints(tmp_path, *models):
    doc = {
        "endpoints": [
            {
                "engine": f"engine-{i}",
                "mode": "single",
                "host": "gpu-a",
                "port": 8000 + i,
                "url": f"http://10.0.0.1:{8000 + i}/v1",
                "health": f"http://10.0.0.1:{8000 + i}/health",
                "model": model,
                "hosts": ["gpu-a"],
            }
            for i, model in enumerate(models)
        ]
    }
    path = tmp_path / "endpoints.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _running(capsys) -> float:
    return json.loads(capsys.readouterr().out)["observation"]["running"]


def test_doctor_reads_the_model_endpoints_json_names_or_the_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(scrape, "fetch_metrics", lambda url: TWO)
    assert cli.main(["doctor", "--endpoints", _endpoints(tmp_path, "qwen"), "--json"]) == 0
    assert _running(capsys) == 2.0
    argv = ["doctor", "--endpoint", "http://10.0.0.1:8000", "--json"]
    assert cli.main([*argv, "--served-model-name", "llama"]) == 0
    assert _running(capsys) == 7.0
    assert cli.main(argv) == 2  # two models and no choice
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "serves 2 models ('llama', 'qwen')" in err


def test_doctor_refuses_an_endpoints_json_of_several_models(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(scrape, "fetch_metrics", lambda url: TWO)
    path = _endpoints(tmp_path, "llama", "qwen")
    assert cli.main(["doctor", "--endpoints", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "serves 2 models ('llama', 'qwen')" in err
    assert cli.main(["doctor", "--endpoints", path, "--served-model-name", "llama", "--json"]) == 0
    assert _running(capsys) == 14.0  # both engines answer with TWO: llama's 7 each
    assert cli.main(["doctor", "--endpoints", path, "--served-model-name", " "]) == 2
    assert "--served-model-name is empty" in capsys.readouterr().err
