"""What doctor does with inputs it cannot trust: broken metric values, a server that is not
vLLM among several, logs with nothing in them, hand-edited plans and endpoints files."""

from __future__ import annotations

import json

import pytest

from support.cli_run import vfleet
from support.paths import REPO
from vfleet.cli import main as cli
from vfleet.cli.doctor_command import config_from_plan
from vfleet.documents.plan import load_plan
from vfleet.errors import UserError
from vfleet.observe import scrape
from vfleet.observe.doctor import observe, report_text
from vfleet.observe.findings import EngineConfig, config_from_log
from vfleet.observe.metrics import parse

CLUSTER = REPO / "examples" / "clusters" / "1x8-h100.yaml"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
GOOD = 'vllm:num_requests_running{engine="0"} 3\nvllm:num_requests_waiting{engine="0"} 0\n'


@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-Inf", "-2"])
def test_a_non_finite_or_negative_value_drops_the_series_with_a_note(bad):
    snap = parse([GOOD + f'vllm:num_requests_waiting{{engine="1"}} {bad}\n'])
    assert "waiting" not in snap.values  # the whole series, not just the bad sample
    assert snap.values["running"] == 3
    assert snap.notes == [
        f"vllm:num_requests_waiting ignored: {float(bad):g} is not a finite, non-negative "
        "measurement"
    ]
    text = report_text(observe([(0.0, snap)]), EngineConfig(), [], ["http://a:1"])
    assert "note: vllm:num_requests_waiting ignored" in text


def test_a_histogram_with_one_bad_bucket_is_left_out_whole():
    text = GOOD + (
        'vllm:inter_token_latency_seconds_bucket{le="0.01"} 5\n'
        'vllm:inter_token_latency_seconds_bucket{le="0.5"} NaN\n'
        'vllm:inter_token_latency_seconds_bucket{le="+Inf"} 9\n'
        "vllm:inter_token_latency_seconds_count 9\n"
    )
    snap = parse([text])
    assert "itl" not in snap.histograms and snap.notes


def test_buckets_that_shrink_or_bounds_that_are_not_numbers_are_left_out():
    shrinking = GOOD + (
        'vllm:time_to_first_token_seconds_bucket{le="0.1"} 9\n'
        'vllm:time_to_first_token_seconds_bucket{le="+Inf"} 4\n'
    )
    assert "ttft" not in parse([shrinking]).histograms
    bad_le = GOOD + 'vllm:time_to_first_token_seconds_bucket{le="soon"} 4\n'
    snap = parse([bad_le])  # float("soon") used to raise out of the parser
    assert "ttft" not in snap.histograms and "le='soon'" in snap.notes[0]


def test_a_cache_config_that_is_not_a_count_gives_no_kv_cap():
    text = GOOD + 'vllm:cache_config_info{block_size="16",num_gpu_blocks="lots"} 1\n'
    obs = observe([(0.0, parse([text]))])
    assert obs.num_gpu_blocks is None and obs.block_size == 16
    assert any("num_gpu_blocks='lots' ignored" in n for n in obs.notes)


def test_an_endpoint_that_is_not_vllm_among_several_is_named():
    with pytest.raises(UserError, match=r"^http://b:9100/metrics has no vllm: series"):
        parse([GOOD, "node_cpu_seconds_total 5\n"], ["http://a:8000", "http://b:9100"])


def test_log_lines_with_wrong_types_are_not_taken_as_config():
    log = (
        "non-default args: {1, 2}\n"
        "non-default args: {'max_num_seqs': 'many', 'gpu_memory_utilization': 7, "
        "'enable_chunked_prefill': 1, 'max_num_batched_tokens': 4096}\n"
    )
    cfg = config_from_log(log)
    assert cfg.max_num_seqs is None and cfg.gpu_memory_utilization is None
    assert cfg.enable_chunked_prefill is None and cfg.max_num_batched_tokens == 4096


def test_a_plan_with_a_wrong_type_is_one_line_naming_the_field(tmp_path):
    plan, log = tmp_path / "p.json", tmp_path / "empty.log"
    log.write_text("")
    made = vfleet("plan", "--cluster", str(CLUSTER), "--model", MODEL, "--out", str(plan))
    assert made.returncode == 0, made.stderr
    good = json.loads(plan.read_text())
    assert config_from_plan(load_plan(plan)).max_num_seqs == good["max_num_seqs"]
    for doc, needle in (
        ({**good, "max_num_seqs": "8"}, "max_num_seqs"),
        ([1], "not a vfleet plan"),
    ):
        plan.write_text(json.dumps(doc))
        result = vfleet("doctor", "--plan", str(plan), "--log", str(log))
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert str(plan) in result.stderr and needle in result.stderr


def test_logs_without_evidence_never_say_healthy(tmp_path, capsys):
    log = tmp_path / "empty.log"
    log.write_text("")
    assert cli.main(["doctor", "--log", str(log)]) == 0
    out = capsys.readouterr().out
    assert "No evidence" in out and "Healthy" not in out
    assert cli.main(["doctor", "--log", str(log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "no_evidence"


def test_endpoints_file_is_read_and_checked(tmp_path, monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(scrape, "fetch_metrics", lambda url: seen.append(url) or GOOD)
    doc = {
        "model": "m",
        "endpoints": [
            {
                "engine": "engine-0",
                "mode": "single",
                "host": "gpu-a",
                "address": "10.0.0.1",
                "port": 8000,
                "url": "http://10.0.0.1:8000/v1",
                "health": "http://10.0.0.1:8000/health",
                "model": "m",
                "hosts": ["gpu-a"],
            }
        ],
    }
    path = tmp_path / "endpoints.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["doctor", "--endpoints", str(path), "--json"]) == 0
    assert seen == ["http://10.0.0.1:8000"]
    assert json.loads(capsys.readouterr().out)["verdict"] == "healthy"
    doc["endpoints"][0]["url"] = "http://$(id):8000/v1"
    path.write_text(json.dumps(doc))
    assert cli.main(["doctor", "--endpoints", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "endpoints[0].url: must be an IP address" in err


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--endpoint", "10.0.0.1:8000"], "is not a URL"),
        (["--endpoint", "http://$(id):8000"], "the host must be an IP address"),
        (["--journal", "-x"], "must be a systemd unit name"),
        (["--watch", "nan"], "must be a finite number"),
        (["--watch", "1e9"], "must be in [0, 3600]"),
        (["--max-num-seqs", "0"], "must be a whole number from 1"),
    ],
)
def test_doctor_flags_are_refused_in_one_line(argv, says, capsys):
    assert cli.main(["doctor", *[f"{argv[0]}={argv[1]}"]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err
