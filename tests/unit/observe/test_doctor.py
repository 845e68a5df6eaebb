"""`vfleet doctor` reasoning on recorded-style inputs (the engine tests drive a real server)."""

from vfleet.observe.doctor import metric_diagnoses, observe
from vfleet.observe.findings import EngineConfig, config_from_log
from vfleet.observe.metrics import parse
from vfleet.observe.startup import log_diagnoses

BASE = """
vllm:num_requests_running{{engine="0",model_name="m"}} {running}
vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}
vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {usage}
vllm:num_preemptions_total{{engine="0",model_name="m"}} {preempt}
vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} 100
vllm:prompt_tokens_total{{engine="0",model_name="m"}} 102400
vllm:generation_tokens_total{{engine="0",model_name="m"}} 25600
vllm:cache_config_info{{block_size="16",engine="0",num_gpu_blocks="10000"}} 1.0
vllm:inter_token_latency_seconds_bucket{{engine="0",le="0.01",model_name="m"}} {itl_fast}
vllm:inter_token_latency_seconds_bucket{{engine="0",le="0.5",model_name="m"}} 1000
vllm:inter_token_latency_seconds_bucket{{engine="0",le="+Inf",model_name="m"}} 1000
vllm:inter_token_latency_seconds_count{{engine="0",model_name="m"}} 1000
"""


def snap(running=10, waiting=0, usage=0.5, preempt=0, itl_fast=1000):
    return parse(
        [
            BASE.format(
                running=running, waiting=waiting, usage=usage, preempt=preempt, itl_fast=itl_fast
            )
        ]
    )


def ids(found):
    return [d.id for d in found]


def test_kv_pressure_names_the_kv_cap_from_the_engines_own_blocks():
    obs = observe(
        [
            (0.0, snap(running=200, usage=0.99, preempt=0)),
            (10.0, snap(running=200, usage=0.99, preempt=50)),
        ]
    )
    found = metric_diagnoses(obs, EngineConfig(max_num_seqs=256))
    assert ids(found) == ["kv_pressure"]
    # 160,000 KV tokens / (1,024 prompt + 128 half-output) tokens x 0.9 = 125 sequences
    assert "lower --max-num-seqs from 256 to 125" in found[0].first_knob
    assert "5.00/s" in found[0].evidence[0]


def test_queueing_with_room_in_kv_raises_max_num_seqs_to_the_cap():
    obs = observe(
        [
            (0.0, snap(running=64, waiting=30, usage=0.4)),
            (5.0, snap(running=64, waiting=25, usage=0.4)),
        ]
    )
    found = metric_diagnoses(obs, EngineConfig(max_num_seqs=64))
    assert ids(found) == ["queueing"]
    assert "raise --max-num-seqs from 64 to 125" in found[0].first_knob


def test_queueing_at_the_kv_cap_adds_replicas():
    obs = observe([(0.0, snap(running=125, waiting=30, usage=0.85))])
    found = metric_diagnoses(obs, EngineConfig(max_num_seqs=125))
    assert ids(found) == ["queueing"] and "add replicas" in found[0].first_knob


def test_prefill_interference_with_chunked_prefill_off():
    obs = observe([(0.0, snap(itl_fast=900))])  # 10% of steps at 10-500 ms
    found = metric_diagnoses(obs, EngineConfig(max_num_seqs=256, enable_chunked_prefill=False))
    assert "prefill_interference" in ids(found)
    knob = next(d for d in found if d.id == "prefill_interference").first_knob
    assert "--enable-chunked-prefill" in knob


def test_prefill_interference_with_chunking_on_halves_the_chunk():
    obs = observe([(0.0, snap(itl_fast=900))])
    found = metric_diagnoses(
        obs,
        EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192, enable_chunked_prefill=True),
    )
    knob = next(d for d in found if d.id == "prefill_interference").first_knob
    assert "from 8192 to 4096" in knob


def test_under_use():
    obs = observe([(0.0, snap(running=3, usage=0.02))])
    assert ids(metric_diagnoses(obs, EngineConfig(max_num_seqs=256))) == ["under_use"]


def test_healthy_server_gets_no_diagnosis():
    obs = observe([(0.0, snap(running=200, usage=0.7))])
    assert metric_diagnoses(obs, EngineConfig(max_num_seqs=256)) == []


def test_start_up_failures_from_the_log():
    log = (
        "ValueError: Free memory on device cuda:0 (60.12/79.19 GiB) on startup is less than "
        "desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization\n"
        "ValueError: The model's max seq len (131072) is larger than the maximum number of "
        "tokens that can be stored in KV cache (81536). Try increasing\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    found = log_diagnoses(
        log, EngineConfig(max_num_batched_tokens=16384, gpu_memory_utilization=0.95)
    )
    knobs = " | ".join(d.first_knob for d in found)
    assert "from 0.9 to 0.75" in knobs  # 60.12 / 79.19 - 0.01
    assert "--max-model-len from 131072 to at most 81536" in knobs
    assert "--max-num-batched-tokens from 16384 to 8192" in knobs


def test_engine_config_from_the_non_default_args_line():
    log = (
        "INFO 11-30 12:00:00 [utils.py:233] non-default args: {'model': '/m', "
        "'max_num_seqs': 8, 'max_num_batched_tokens': 16384, "
        "'enable_chunked_prefill': False}\n"
    )
    cfg = config_from_log(log)
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.enable_chunked_prefill) == (
        8,
        16384,
        False,
    )
