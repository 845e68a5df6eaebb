"""`--layout`'s grammar and the estimate/budget/plan options checked against the model and
the release: every refusal is exit 2 with one line, and the replay's work caps bound how
long the worst accepted estimate runs (docs/estimate.md, "Layouts")."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.cli_run import Result, vfleet
from support.hostile import LOADER_SETTINGS, assert_one_line
from support.paths import REPO
from vfleet.cli.estimate_command import MAX_REPLAY_STEPS, MAX_TIMED_STEPS
from vfleet.errors import UserError
from vfleet.perf.simulate import Client, EngineLimits, replay
from vfleet.plan.candidate import Candidate
from vfleet.plan.search import parse_layout

ONE_NODE = str(REPO / "examples/clusters/1x8-h200.yaml")
TWO_NODES = str(REPO / "examples/clusters/2x8-h200-ib.yaml")
H100X4 = str(REPO / "examples/clusters/1x4-h100.yaml")
MOE, DENSE = "deepseek-ai/DeepSeek-R1", "meta-llama/Llama-3.1-8B-Instruct"
GQA = "meta-llama/Llama-3.1-70B-Instruct"
FP8_CHECKPOINT = "Qwen/Qwen3-235B-A22B-FP8"
SHORT = ["--input-len", "128", "--output-len", "16", "--concurrency", "4"]


def estimate(*args: str, model: str = MOE, cluster: str = ONE_NODE) -> Result:
    return vfleet("estimate", "--cluster", cluster, "--model", model, *SHORT, *args)


def refused(result: Result, says: str) -> None:
    assert result.returncode == 2, (result.args, result.stdout, result.stderr)
    line = result.stderr.rstrip("\n")
    assert_one_line(line)
    assert line.startswith("vfleet: error: "), line
    assert says in line, line


@pytest.mark.parametrize(
    "layout, says",
    [
        ("TP²", "'TP²' is not a layout part"),
        ("TP" + "9" * 5000, "is not a layout part"),
        ("", "is empty"),
        ("   ", "is empty"),
        ("TP8 TP4", "gives TP twice"),
        ("TP8 EP EP", "gives EP twice"),
        ("TP1 DP8 DP8 EP", "gives DP twice"),
        ("TP８", "is not a layout part"),  # a full-width digit, which int() would take
        ("TP٨", "is not a layout part"),  # an Arabic-Indic digit
        ("TP8,PP2", "is not a layout part"),
        ("TP8\tPP2", "is not a layout part"),
        ("TP8\n", "is not a layout part"),
        ("tp8", "is not a layout part"),
        ("TP", "is not a layout part"),
        ("TP0", "is not a layout part"),
        ("TP08", "is not a layout part"),
        ("TP2048", "is not a layout part"),
        ("TP-8", "is not a layout part"),
        ("XP8", "is not a layout part"),
        ("EP8", "is not a layout part"),
    ],
)
def test_a_bad_layout_is_one_line_naming_the_grammar(layout, says):
    result = estimate("--layout", layout)
    refused(result, says)
    assert "write it like 'TP8 PP2' or 'TP1 DP8 EP'" in result.stderr
    assert len(result.stderr) < 600  # a 5,000-digit layout is cut short, not echoed


@pytest.mark.parametrize(
    "layout, cluster, label",
    [
        ("TP8", ONE_NODE, "TP8"),
        ("TP1 DP8 EP", ONE_NODE, "TP1 DP8 EP"),
        ("EP DP8 TP1", ONE_NODE, "TP1 DP8 EP"),
        (" TP8 ", ONE_NODE, "TP8"),
        ("TP8  EP", ONE_NODE, "TP8 EP"),
        ("TP8 PP2", TWO_NODES, "TP8 PP2"),
        ("TP8 DCP2", ONE_NODE, "TP8 DCP2"),
    ],
)
def test_a_good_layout_still_estimates(layout, cluster, label):
    result = estimate("--layout", layout, "--json", cluster=cluster)
    assert result.returncode == 0, result.stderr
    assert f'"layout": "{label}"' in result.stdout


@LOADER_SETTINGS
@given(st.text(alphabet=st.sampled_from(list("TPDCE0123456789 ,\t²８")), max_size=20))
def test_any_text_parses_or_is_refused_as_user_error(text):
    try:
        c = parse_layout(text)
    except UserError as exc:
        assert_one_line(str(exc))
        return
    assert parse_layout(c.label) == c  # what vfleet prints reads back as the same layout
    sizes = (c.tp, c.pp, c.dp, c.dcp)
    assert min(sizes) >= 1 and max(sizes) <= 1024


@pytest.mark.parametrize(
    "c", [Candidate(8, 1, 1, False, 1), Candidate(1, 2, 8, True, 1), Candidate(8, 3, 2, True, 4)]
)
def test_every_label_reads_back(c):
    assert parse_layout(c.label) == c


@pytest.mark.parametrize(
    "model, layout, extra, says",
    [
        (DENSE, "TP8 EP", [], "has no experts: drop EP"),
        (DENSE, "TP1 DP8 EP", [], "has no experts"),
        (GQA, "TP8 DCP3", [], "DCP3 does not divide TP8"),
        (MOE, "TP8 DCP2", ["--vllm-version", "0.9.2"], "has no --decode-context-parallel-size"),
        (MOE, "TP8 DCP2", ["--vllm-version", "0.6.0"], "has no --decode-context-parallel-size"),
        (GQA, "TP8 DCP2", ["--vllm-version", "0.10.2"], "GQA attention needs vLLM 0.11.1"),
        (GQA, "TP8 DCP16", [], "does not divide TP8"),
    ],
)
def test_a_layout_the_model_or_release_cannot_run_is_refused(model, layout, extra, says):
    refused(estimate("--layout", layout, *extra, model=model), says)


def test_plan_refuses_ep_on_a_dense_model_and_a_bad_layout():
    plan = ["plan", "--cluster", ONE_NODE, "--model", DENSE]
    refused(vfleet(*plan, "--layout", "TP8 EP"), "has no experts")
    refused(vfleet(*plan, "--layout", "TP8 TP4"), "gives TP twice")
    refused(vfleet(*plan, "--layout", ""), "is empty")


@pytest.mark.parametrize(
    "model, extra, says",
    [
        (MOE, ["--all2all-backend", "garbage"], "is not a backend of vLLM 0.33.0: use one of"),
        (MOE, ["--all2all-backend", "DeepEP_Low_Latency"], "is not a backend"),
        (MOE, ["--all2all-backend", "naive", "--vllm-version", "0.10.2"], "has no --all2all"),
        (DENSE, ["--quantization", "gptq"], "is unquantized: use fp8 or bitsandbytes"),
        (DENSE, ["--quantization", "awq"], "is unquantized"),
        (DENSE, ["--quantization", "fp8\n"], "is not a method name"),
        (DENSE, ["--quantization", "nonsense"], "unknown quantization"),
        (FP8_CHECKPOINT, ["--quantization", "gptq"], "quantized as fp8"),
        (FP8_CHECKPOINT, ["--quantization", "none"], "quantized as fp8"),
        (MOE, ["--vllm-version", "0.11.0\n"], "'0.11.0\\n' is not a version number"),
        (MOE, ["--vllm-version", " 0.11.0"], "is not a version number"),
        (MOE, ["--vllm-version", "0.１1.0"], "is not a version number"),
        (MOE, ["--vllm-version", "9" * 5000], "is not a version number"),
    ],
)
def test_an_option_the_checkpoint_or_release_does_not_take_is_refused(model, extra, says):
    layout = "TP8" if model != FP8_CHECKPOINT else "TP4"
    refused(estimate("--layout", layout, *extra, model=model), says)


@pytest.mark.parametrize(
    "model, extra",
    [
        (MOE, ["--all2all-backend", "deepep_low_latency"]),
        (MOE, ["--all2all-backend", "allgather_reducescatter", "--vllm-version", "0.11.1"]),
        (DENSE, ["--quantization", "fp8"]),
        (FP8_CHECKPOINT, ["--quantization", "fp8"]),
        ("deepseek-ai/DeepSeek-V4-Flash", ["--quantization", "fp8"]),  # its quant_method
        ("openai/gpt-oss-120b", ["--quantization", "mxfp4"]),
        (MOE, ["--vllm-version", "0.8.5.post1"]),
        (MOE, ["--vllm-version", "v0.10.1.1"]),
    ],
)
def test_an_option_that_matches_still_estimates(model, extra):
    layout = "TP8" if model != FP8_CHECKPOINT else "TP4"
    result = estimate("--layout", layout, *extra, model=model)
    assert result.returncode == 0, result.stderr


def test_budget_and_plan_refuse_a_version_with_a_newline():
    budget = ["budget", "--model", DENSE, "--gpu", "H100-SXM-80GB"]
    refused(vfleet(*budget, "--vllm-version", "0.11.0\n"), "is not a version number")
    plan = ["plan", "--cluster", ONE_NODE, "--model", DENSE, "--vllm-version", "0.11.0\n"]
    refused(vfleet(*plan), "is not a version number")


def test_budget_refuses_a_mean_context_past_max_model_len():
    budget = ["budget", "--model", DENSE, "--gpu", "H100-SXM-80GB"]
    refused(
        vfleet(*budget, "--max-model-len", "1024", "--mean-context-len", "999999"),
        "--mean-context-len 999999 is above --max-model-len 1024",
    )
    refused(vfleet(*budget, "--mean-context-len", "999999"), "context window of 131072")
    refused(vfleet(*budget, "--quantization", "gptq"), "is unquantized")
    refused(vfleet(*budget, "--enable-expert-parallel"), "has no experts")
    ok = vfleet(*budget, "--max-model-len", "1024", "--mean-context-len", "1024")
    assert ok.returncode == 0, ok.stderr


def run_timed(*args: str, model: str = DENSE, cluster: str = ONE_NODE) -> tuple[Result, float]:
    start = time.perf_counter()
    result = vfleet("estimate", "--cluster", cluster, "--model", model, *args)
    return result, time.perf_counter() - start


# One engine (TP8 on 8 GPUs), one request at a time: every output token is a step of its own.
ALONE = ["--layout", "TP8", "--input-len", "128", "--concurrency", "1", "--num-prompts", "1000"]


def test_steps_past_the_cap_are_refused_before_the_replay():
    # 1,000 prompts x (1,000 decode steps + 1 prefill chunk) is 1,001,000 steps.
    result, took = run_timed(*ALONE, "--output-len", "1000")
    refused(result, f"more than the {MAX_REPLAY_STEPS:,} an estimate takes")
    assert "1,001,000 scheduler steps" in result.stderr
    assert took < 2
    # At a request rate each output token may be a step: 800 prompts over 8 DP engines.
    rated = ["--layout", "TP1 DP8 EP", "--input-len", "128", "--output-len", "1000"]
    rated += ["--concurrency", "8", "--num-prompts", "800", "--request-rate", "0.001"]
    result, took = run_timed(*rated, model=MOE)
    refused(result, f"more than the {MAX_TIMED_STEPS:,} an estimate takes")
    assert "100,100 scheduler steps" in result.stderr and took < 2


def test_a_kv_cache_that_holds_one_request_counts_one_decoding_at_a_time():
    args = ["--layout", "TP4", "--input-len", "10000", "--output-len", "1000"]
    args += ["--concurrency", "1000", "--num-prompts", "10000", "--max-model-len", "12000"]
    result, took = run_timed(*args, "--gpu-memory-utilization", "0.5", model=GQA, cluster=H100X4)
    refused(result, "(decoding 1 at once)")
    assert took < 2


def test_the_largest_accepted_replay_finishes_in_seconds():
    # 1,000 x (999 + 1) = 1,000,000 steps: exactly the cap.
    result, took = run_timed(*ALONE, "--output-len", "999")
    assert result.returncode == 0, result.stderr
    assert took < 15, f"{took:.1f} s at the step cap"


def test_the_largest_accepted_timed_replay_finishes_in_seconds():
    # 100 prompts per DP engine x (999 + 1) = 100,000 steps, each costed as it runs.
    rated = ["--layout", "TP1 DP8 EP", "--input-len", "128", "--output-len", "999"]
    rated += ["--concurrency", "8", "--num-prompts", "800", "--request-rate", "0.001"]
    result, took = run_timed(*rated, model=MOE)
    assert result.returncode == 0, result.stderr
    assert took < 15, f"{took:.1f} s at the timed step cap"


def test_preempting_thousands_of_running_requests_stays_linear():
    # 8,000 requests admitted at once overflow the cache as they decode: thousands of
    # preemptions, each of which once rescanned every running request (quadratic).
    limits = EngineLimits(
        max_num_seqs=8000, max_num_batched_tokens=800_000, kv_tokens=400_000, block_size=16
    )
    start = time.perf_counter()
    traj = replay(np.full(8000, 64), np.full(8000, 200), limits, Client(None))
    took = time.perf_counter() - start
    assert traj.preemptions > 5_000
    assert (traj.finish_step >= 0).all()
    assert took < 5, f"{took:.1f} s for {traj.preemptions} preemptions"


def test_naming_a_quantized_checkpoint_s_own_method_changes_nothing():
    budget = ["budget", "--model", "deepseek-ai/DeepSeek-V4-Flash", "--gpu", "H200-SXM-141GB"]
    budget += ["--tp", "8", "--json"]
    plain, named = vfleet(*budget), vfleet(*budget, "--quantization", "fp8")
    assert plain.returncode == named.returncode == 0, named.stderr
    assert json.loads(plain.stdout)["weights_gib"] == json.loads(named.stdout)["weights_gib"]
