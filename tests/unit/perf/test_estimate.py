"""The throughput estimator: scheduler replay invariants, the step cost model's physics,
`vfleet estimate`, and its accuracy on the measured development set."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from support.paths import REPO
from vfleet.catalog.models import load_model
from vfleet.catalog.releases import traits
from vfleet.perf import model as perf
from vfleet.perf.simulate import Client, EngineLimits, replay
from vfleet.plan.estimate import EstimateRequest, estimate, request_lengths
from vfleet.plan.search import parse_layout
from vfleet.topology.cluster import cluster_from_dict

H200 = {
    "nodes": 1,
    "gpus_per_node": 8,
    "gpu": "H200-SXM-141GB",
    "intra_node": {"link": "nvswitch", "busbw_GBps": 450},
}


def _request(layout: str, **kw) -> EstimateRequest:
    base = dict(
        spec=load_model("deepseek-ai/DeepSeek-R1"),
        cluster=cluster_from_dict(H200),
        layout=parse_layout(layout),
        traits=traits("0.11.0"),
        input_len=1024,
        output_len=256,
        concurrency=64,
        num_prompts=256,
    )
    base.update(kw)
    return EstimateRequest(**base)


def test_closed_loop_replay_keeps_the_limits_and_finishes_every_request():
    limits = EngineLimits(
        max_num_seqs=16, max_num_batched_tokens=512, kv_tokens=8000, block_size=16
    )
    n = 200
    traj = replay(np.full(n, 300), np.full(n, 50), limits, Client(concurrency=24))
    assert (traj.finish_step >= 0).all() and (traj.first_step >= 0).all()
    assert traj.running.max() <= 16
    assert (traj.decode + traj.prefill).max() <= 512
    # Every prompt token is computed once (no preemption at this size) and every output made.
    assert traj.prefill.sum() == 300 * n and traj.preemptions == 0
    assert (traj.first_step <= traj.finish_step).all()


def test_a_kv_cache_too_small_for_the_batch_preempts_instead_of_overflowing():
    limits = EngineLimits(
        max_num_seqs=64, max_num_batched_tokens=2048, kv_tokens=3000, block_size=16
    )
    traj = replay(np.full(64, 200), np.full(64, 200), limits, Client(concurrency=None))
    assert traj.preemptions > 0
    assert (traj.finish_step >= 0).all()
    # Recomputed prompts show up as extra prefill work.
    assert traj.prefill.sum() > 200 * 64


def test_v0_scheduler_runs_prefill_and_decode_in_separate_steps():
    limits = EngineLimits(
        max_num_seqs=8,
        max_num_batched_tokens=4096,
        kv_tokens=100000,
        block_size=16,
        chunked_prefill=False,
    )
    traj = replay(np.full(32, 500), np.full(32, 20), limits, Client(None), v0_scheduler=True)
    assert not ((traj.prefill > 0) & (traj.decode > 0)).any()


def test_sharegpt_lengths_have_the_asked_means_and_its_limits():
    prompts, outputs = request_lengths("sharegpt", 1000, 217, 197)
    assert abs(prompts.mean() - 217) < 5 and abs(outputs.mean() - 197) < 8
    assert prompts.max() <= 1024 and (prompts + outputs).max() <= 2048 and outputs.min() >= 4
    assert np.median(outputs) < outputs.mean()  # the long tail ShareGPT is known for


def test_small_messages_on_slow_links_cost_their_latency():
    ethernet = perf.Link("ethernet", 2.9)
    nvlink = perf.Link("nvlink", 450)
    # A 640-byte PP send: latency-bound (tens of microseconds), not a bandwidth penalty.
    assert ethernet.collective_s(640.0, 2, factor=1.0) < 1e-4
    assert nvlink.collective_s(640.0, 2, factor=1.0) < ethernet.collective_s(640.0, 2, factor=1.0)
    # A large message is bandwidth-bound on both, 150x apart.
    ratio = ethernet.collective_s(1e9, 8) / nvlink.collective_s(1e9, 8)
    assert 100 < ratio < 200


def test_more_concurrency_raises_throughput_and_tpot_until_the_batch_saturates():
    low = estimate(_request("TP1 DP8 EP", concurrency=8, num_prompts=64))
    high = estimate(_request("TP1 DP8 EP", concurrency=256, num_prompts=1024))
    assert high.output_tokens_per_s > 3 * low.output_tokens_per_s
    assert high.tpot_ms["median"] > low.tpot_ms["median"]
    assert low.running_seqs <= 1.01  # 8 requests over 8 DP ranks


def test_estimate_evaluates_a_layout_plan_would_refuse_and_says_why(tmp_path):
    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        "nodes: 2\ngpus_per_node: 8\ngpu: H20-96GB\n"
        "intra_node: {link: nvswitch, busbw_GBps: 450}\n"
        "inter_node: {fabric: ethernet, busbw_GBps: 2.9}\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "vfleet.cli",
            "estimate",
            "--cluster",
            str(cluster),
            "--model",
            "deepseek-ai/DeepSeek-R1",
            "--layout",
            "TP16",
            "--input-len",
            "3000",
            "--output-len",
            "150",
            "--concurrency",
            "8",
            "--vllm-version",
            "0.9.0",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    for key in (
        "output_tokens_per_s",
        "output_tokens_per_s_per_gpu",
        "request_throughput",
        "ttft_ms",
        "tpot_ms",
        "running_seqs",
        "step_breakdown_ms",
    ):
        assert key in doc
    assert set(doc["ttft_ms"]) >= {"median", "p99"} and set(doc["tpot_ms"]) >= {"median", "p99"}
    # Every estimate carries its p10-p90 band; latency bands run the other way round.
    tok, tpot = doc["output_tokens_per_s"], doc["tpot_median_ms"]
    assert tok["p10"] < tok["median"] < tok["p90"], tok
    assert tpot["p10"] < tpot["median"] == doc["tpot_ms"]["median"] < tpot["p90"], tpot
    # The layout spans two nodes, so its band is the multi-node one.
    assert doc["interval"]["regime"] == "multi-node" and doc["interval"]["held_out_runs"] > 0
    assert "never crosses slow links" in doc["plan_would_reject"]
    # Over Ethernet the TP all-reduces dominate the step.
    parts = doc["step_breakdown_ms"]
    assert parts["tp_comm"] > parts["linear"]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--layout", "TP3X"], "write it like"),
        (["--layout", "TP8", "--input-len", "0"], "--input-len: must be a token count from 1"),
        (["--layout", "TP8", "--request-rate", "nan"], "--request-rate: must be a finite number"),
        (["--layout", "TP16"], "needs 16 GPUs"),
        (["--layout", "TP1"], "does not fit"),
    ],
)
def test_bad_estimate_input_exits_2_with_one_line(argv, says, tmp_path):
    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        "nodes: 1\ngpus_per_node: 8\ngpu: H200-SXM-141GB\n"
        "intra_node: {link: nvswitch, busbw_GBps: 450}\n"
    )
    args = [
        "--cluster",
        str(cluster),
        "--model",
        "deepseek-ai/DeepSeek-R1",
        "--input-len",
        "128",
        "--output-len",
        "16",
        "--concurrency",
        "4",
        *argv,
    ]
    out = subprocess.run(
        [sys.executable, "-m", "vfleet.cli.main", "estimate", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2, out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], out.stderr


def test_the_bundled_fit_meets_its_targets_on_the_development_set():
    """The fitted parameters in data/perf_fit.json, scored the way bench/perf_accuracy.py
    scores them: median |output tok/s error| <= 20% and >= 85% of same-group pairs whose
    measured gap exceeds 5% in the right order."""
    from vfleet.calibrate.fitting import predict_all
    from vfleet.perf.fit import default_fit
    from vfleet_devtools.perfcases import load_cases
    from vfleet_devtools.perfscore import prepare_all, stats

    scored, _ = prepare_all(load_cases())
    predict_all(scored, default_fit())
    st = stats(scored)
    assert st["points"] >= 80
    assert st["median_abs_error"] <= 0.20, st
    assert st["pairs_right"] >= 0.85, st


@pytest.mark.parametrize(
    "cluster, model",
    [
        ("1x8-h200.yaml", "deepseek-ai/DeepSeek-V3"),
        ("1x8-h100.yaml", "meta-llama/Llama-3.1-70B-Instruct"),
        ("2x8-h100-25gbe.yaml", "deepseek-ai/DeepSeek-V3"),
    ],
)
def test_plan_and_estimate_agree_on_the_plans_own_operating_point(cluster, model):
    """The planner's steady state and the full scheduler replay price the same engine with
    the same step model: at the plan's knobs and the workload's concurrency they agree."""
    from vfleet.plan.search import PlanInputs, plan
    from vfleet.plan.workload import PRESETS
    from vfleet.probe.load import load_cluster

    spec, work = load_model(model), PRESETS["chat"]
    clus = load_cluster(REPO / "examples" / "clusters" / cluster)
    winner = plan(PlanInputs(spec=spec, cluster=clus, workload=work, traits=traits(None)))[0]
    est = estimate(
        EstimateRequest(
            spec=spec,
            cluster=clus,
            layout=winner.candidate,
            traits=traits(None),
            input_len=work.input_mean,
            output_len=work.output_mean,
            concurrency=work.concurrency,
            num_prompts=4 * work.concurrency,
            replicas=winner.replicas,
            kv_cache_dtype=winner.budget.kv_cache_dtype,
            max_num_seqs=winner.max_num_seqs,
            max_num_batched_tokens=winner.max_num_batched_tokens,
            max_model_len=winner.budget.max_model_len,
        )
    )
    assert est.output_tokens_per_s == pytest.approx(winner.tokens_per_s, rel=0.15)
    assert est.tpot_ms["median"] == pytest.approx(winner.prediction.tpot_s * 1e3, rel=0.15)


def test_v4_sparse_prefill_attends_the_top_k_and_pays_the_indexer_for_every_pair():
    """DeepSeek-V4 has no measured sparse module: its prompts are priced from FLOPs."""
    spec = load_model("deepseek-ai/DeepSeek-V4-Flash")
    assert spec.index_n_heads and spec.is_dsv4
    topk = spec.index_topk or perf.SPARSE_TOPK_TOKENS
    heads = spec.num_attention_heads / 8
    per_token = [
        perf._prefill_attention_flops(spec, heads, 1.0, float(ctx))
        for ctx in (topk // 2, 2 * topk, 16 * topk)
    ]
    # Attention grows with the context up to the indexer's top-k, then stays flat...
    assert per_token[0] < per_token[1] == per_token[2]
    # ...while the indexer scores every earlier token, so it keeps growing.
    scores = [float(perf._indexer_flops(spec, float(ctx))) for ctx in (4096, 32768)]
    assert scores[1] == 8 * scores[0] > 0
    assert float(perf._indexer_flops(load_model("deepseek-ai/DeepSeek-R1"), 4096.0)) == 0.0


# DeepSeek-V3.2's sparse attention module minus DeepSeek-V3's dense MLA module, per layer,
# one prompt, 16 query heads per GPU (TP8), bf16, on an H200: NVIDIA AIConfigurator 0.12.0's
# tables for vLLM 0.24.0 (sparse_attention/dsa_context_module_perf and
# mla/mla_context_module_perf), in ms by prompt length.
MEASURED_SPARSE_EXTRA_MS = {2048: 1.11, 8192: 5.07, 32768: 23.16}


@pytest.mark.parametrize("prompt", sorted(MEASURED_SPARSE_EXTRA_MS))
def test_a_v32_prompt_costs_r1s_plus_what_the_measured_sparse_module_adds(prompt):
    """The two models share everything but the attention module, so one prompt's TTFT
    differs by what the sparse module adds per layer, times their 61 layers."""
    ttft = {}
    for name in ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3.2"):
        spec = load_model(name)
        assert spec.num_layers == 61
        req = _request(
            "TP8", spec=spec, traits=traits("0.24.0"), input_len=prompt, output_len=2,
            concurrency=1, num_prompts=1,
        )  # fmt: skip
        ttft[name] = estimate(req).ttft_ms["median"]
    extra = ttft["deepseek-ai/DeepSeek-V3.2"] - ttft["deepseek-ai/DeepSeek-R1"]
    assert extra == pytest.approx(61 * MEASURED_SPARSE_EXTRA_MS[prompt], rel=0.15)


def test_sliding_window_layers_see_only_their_window_in_prefill():
    spec = load_model("openai/gpt-oss-120b")
    assert spec.sliding_window and spec.sliding_layers
    dense = load_model("meta-llama/Llama-3.1-8B-Instruct")
    for model in (spec, dense):
        short = perf._prefill_attention_flops(model, 8.0, 1.0, 64.0)
        long = perf._prefill_attention_flops(model, 8.0, 1.0, 32768.0)
        ratio = long / short
        if model is dense:
            assert ratio == pytest.approx(32768 / 64)
        else:  # half the layers stop at the window: about half the full growth
            assert 0.4 * 32768 / 64 < ratio < 0.6 * 32768 / 64


def test_the_replay_fits_more_long_requests_of_a_hybrid_model_than_its_token_figure_says():
    from vfleet.plan.estimate import prepare

    def limits(model: str, gpus: int) -> tuple[int, int]:
        req = _request(
            "TP1",
            spec=load_model(model),
            cluster=cluster_from_dict({**H200, "gpus_per_node": gpus}),
            input_len=32000,
            output_len=100,
            concurrency=None,
            num_prompts=8,
        )
        prep = prepare(req)
        return prep.limits.kv_tokens, prep.budget.kv_tokens

    replayed, per_group = limits("openai/gpt-oss-120b", 1)
    # Half of gpt-oss's layers keep a 128-token window (plus the chunk in flight, as vLLM
    # reserves it): the shared pool holds far more long requests than the per-group count
    # says, though less than twice as many.
    assert 1.4 * per_group < replayed < 2 * per_group
    replayed, per_group = limits("meta-llama/Llama-3.1-8B-Instruct", 1)
    assert replayed == per_group  # full attention everywhere: the figure is the capacity


def test_a_preempted_long_prompt_waits_for_room_instead_of_being_recomputed_chunk_by_chunk():
    """100 prompts of 32,000 tokens at once on a cache that holds six of them, in chunks of
    16,384: a prompt whose next chunk no longer fits is preempted once, then waits until the
    KV it held plus its next chunk fits again (its blocks stay in the prefix cache), as vLLM
    does; it is not readmitted, preempted and recomputed step after step."""
    n = 100
    limits = EngineLimits(
        max_num_seqs=1024, max_num_batched_tokens=16384, kv_tokens=219_120, block_size=16
    )
    traj = replay(np.full(n, 32_000), np.full(n, 100), limits, Client(None))
    assert traj.preemptions <= n // 2, traj.preemptions
    prompt_tokens = float(np.sum(traj.prefill))
    assert prompt_tokens < 1.5 * n * 32_000, prompt_tokens


@pytest.mark.parametrize(
    "model, version, asked, chunked",
    [
        ("deepseek-ai/DeepSeek-R1", "0.7.3", True, False),  # MLA on 0.7.1-0.7.x: forced off
        ("deepseek-ai/DeepSeek-R1", "0.7.0", None, True),  # before the rule: >32K context
        ("deepseek-ai/DeepSeek-R1", "0.8.0", None, True),  # V1 chunks MLA prompts
        ("meta-llama/Llama-3.1-70B-Instruct", "0.7.3", None, True),  # not MLA, 128K context
    ],
)
def test_mla_prompts_are_prefilled_whole_where_the_release_forces_chunking_off(
    model, version, asked, chunked
):
    from vfleet.plan.estimate import budget_for, scheduler_limits

    req = _request(
        "TP8", spec=load_model(model), traits=traits(version), enable_chunked_prefill=asked
    )
    budget = budget_for(req)
    limits = scheduler_limits(req, budget)
    assert limits.chunked_prefill is chunked
    if not chunked:
        # A step takes whole prompts: its token budget reaches the context length.
        assert limits.max_num_batched_tokens >= budget.max_model_len


def test_whole_prompt_waves_make_a_closed_loop_wait_for_its_whole_wave():
    # vLLM 0.7.x with MLA: all c prompts of a wave are prefilled together, so the first
    # token waits for the wave, and TTFT grows with the concurrency (as dstack's DeepSeek-R1
    # sweep on H200 measured: 1.0 s at 4, 14.4 s at 64).
    from vfleet.perf.fit import default_fit
    from vfleet.plan.estimate import finish, prepare

    ttft = {}
    for c in (4, 16):
        req = _request(
            "TP8",
            traits=traits("0.7.3"),
            input_len=3200,
            output_len=200,
            concurrency=c,
            num_prompts=4 * c,
        )
        ttft[c] = finish(prepare(req), default_fit()).ttft_ms["median"]
    assert ttft[16] > 3 * ttft[4], ttft
