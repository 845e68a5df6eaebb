"""The ledger (vfleet.feedback.ledger) on a deploy's report step: the plan's KV and the
estimator's figures at the load test's own settings, next to a `vllm bench serve` result
and a real vLLM /metrics page as the load test saves them; one line per engine and deploy,
appended; a stand-in's entries say they are no check of the model; a missing /metrics page
is a note, not a failed deploy."""

from __future__ import annotations

import json

from support.bundles import deploy_context
from support.ledger import METRICS, RESULT, SERVED, deploy_report
from vfleet.deploy import flow
from vfleet.feedback import ledger
from vfleet.health import probed as health_probed


def test_each_deploy_adds_predicted_and_measured_per_engine(tmp_path):
    ctx = deploy_context(tmp_path, {})
    entries, report = deploy_report(ctx, "with-page")
    (entry,) = entries
    plan = json.loads((ctx.artifacts / "plan.json").read_text())
    assert entry["schema"] == ledger.SCHEMA and entry["comparable"] is True
    assert entry["predicted"]["kv_tokens"] == plan["kv_tokens_per_engine"]
    assert entry["predicted"]["output_tokens_per_s"] > 0
    assert entry["predicted"]["tpot_ms_median"] > 0
    # Measured: that page's cache_config_info (4,574 blocks of 16) and the bench result.
    got = entry["measured"]
    assert (got["kv_blocks"], got["block_size"], got["kv_tokens"]) == (4574, 16, 4574 * 16)
    assert got["output_tokens_per_s"] == 1234.5 and got["completed"] == 40
    assert "Predicted and measured" in report and "1,234.5" in report
    assert (ctx.artifacts / "report" / "ledger.png").read_bytes()[:4] == b"\x89PNG"
    # A deploy that finds the same run (the role keeps a run id's results) adds nothing;
    # a new run is appended and the first line stays as it was.
    same, _ = deploy_report(ctx, "with-page")
    assert same == [entry]
    again, _ = deploy_report(ctx, "with-page", date="20261201-010000")
    assert len(again) == 2 and again[0] == entry and again[1]["measured_at"] == "20261201-010000"


def test_the_prediction_is_made_at_the_load_tests_settings(tmp_path):
    ctx = deploy_context(tmp_path, {})
    (entry,) = deploy_report(ctx, "with-page")[0]
    busier = dict(RESULT, max_concurrency=32, num_prompts=160, completed=160)
    busier.update(total_input_tokens=160 * 512, total_output_tokens=160 * 128)
    probed = health_probed.probed_cluster(ctx, "deploy", allow_partial=False)
    planned = flow.plan(ctx, probed.cluster)
    more = ledger.predicted(planned, probed.cluster, busier)
    assert more["output_tokens_per_s"] > entry["predicted"]["output_tokens_per_s"]


def test_a_stand_in_is_no_check_of_the_model(tmp_path):
    ctx = deploy_context(tmp_path, {}, env="local")  # CPU engines standing in for the planned GPUs
    (entry,), report = deploy_report(ctx, "with-page")
    assert entry["comparable"] is False and "standing in" in entry["why_not"]
    assert "Not a check of the model" in report
    # The report says what is real at the top, and plans a real model on the same GPUs.
    assert "What is real here" in report.split("## ")[0]
    assert "## The same cluster with a real model" in report
    assert "meta-llama/Llama-3.1-8B-Instruct" in report.split("## The same cluster")[1]


def test_a_missing_metrics_page_is_a_note(tmp_path):
    ctx = deploy_context(tmp_path, {})
    (entry,), _ = deploy_report(ctx, "no-page")  # the load test could not read /metrics
    assert entry["measured"]["kv_blocks"] is None and entry["measured"]["kv_tokens"] is None
    assert entry["notes"] == [f"no /metrics page recorded ({entry['engine']}.prom)"]
    assert entry["measured"]["output_tokens_per_s"] == 1234.5


def test_settings_the_estimator_refuses_are_a_note(tmp_path):
    ctx = deploy_context(tmp_path, {"max_model_len": 1024})
    probed = health_probed.probed_cluster(ctx, "deploy", allow_partial=False)
    planned = flow.plan(ctx, probed.cluster)
    too_long = dict(RESULT, total_input_tokens=40 * 4000)  # 4,000-token prompts, 1,024 allowed
    want = ledger.predicted(planned, probed.cluster, too_long)
    assert "output_tokens_per_s" not in want and "exceeds max-model-len 1024" in want["note"]
    assert want["kv_tokens"] == planned.plan.kv_tokens_per_engine


def _page_with_preemptions(count: float) -> str:
    """The real page with its preemption counter at `count` (as after a busier run)."""
    text = METRICS.read_text()
    old = f'vllm:num_preemptions_total{{model_name="{SERVED}"}} 0.0'
    assert old in text
    return text.replace(old, f'vllm:num_preemptions_total{{model_name="{SERVED}"}} {count}')


def test_a_sweep_adds_a_line_per_level_with_the_preemptions_each_level_added(tmp_path):
    ctx = deploy_context(tmp_path, {})
    probed = health_probed.probed_cluster(ctx, "deploy", allow_partial=False)
    result = flow.plan(ctx, probed.cluster)
    rendered = flow.render(ctx, result.plan, probed.cluster)
    endpoints = [{**rendered.endpoints[0], "model": SERVED}]
    engine = endpoints[0]["engine"]
    run = ctx.artifacts / "report" / "loadtest" / "deploy"
    run.mkdir(parents=True)
    (run / f"{engine}.json").write_text(json.dumps(RESULT))
    (run / f"{engine}.prom").write_text(_page_with_preemptions(2))
    # Levels 4, 16 and 64, the counter after each: 2 (before), 2, 9, 40.
    for level, counter, tok_s in ((64, 40, 2100.0), (4, 2, 700.0), (16, 9, 1800.0)):
        done = level * 3
        (run / f"{engine}.sweep-c{level}.json").write_text(
            json.dumps(
                dict(
                    RESULT,
                    max_concurrency=level,
                    num_prompts=done,
                    completed=done,
                    total_input_tokens=done * 512,
                    total_output_tokens=done * 128,
                    output_throughput=tok_s,
                    p99_tpot_ms=10.0 + level,
                )
            )
        )
        (run / f"{engine}.sweep-c{level}.prom").write_text(_page_with_preemptions(counter))
    flow.write_report(ctx, result, endpoints, probed.cluster)
    lines = [json.loads(x) for x in (ctx.artifacts / "ledger.jsonl").read_text().splitlines()]
    assert [x["sweep_level"] for x in lines] == [None, 4, 16, 64]
    assert [x["measured"]["preemptions"] for x in lines] == [2, 0, 7, 31]
    assert [x["operating_point"]["concurrency"] for x in lines] == [8, 4, 16, 64]
    predicted = [x["predicted"]["output_tokens_per_s"] for x in lines[1:]]
    assert predicted == sorted(predicted)  # each level predicted at its own concurrency
    report = (ctx.artifacts / "report" / "report.md").read_text()
    sweep = report.split("## Concurrency sweep")[1].split("## ")[0]
    assert f"max-num-seqs {result.plan.max_num_seqs}" in sweep
    assert f"| {engine} | 64 | 2,100.0 |" in sweep
    # The main run's table has the main run alone.
    ledger_table = report.split("## Predicted and measured")[1].split("## ")[0]
    assert "2,100.0" not in ledger_table and "1,234.5" in ledger_table
    assert (ctx.artifacts / "report" / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    # The load test table is the main runs'.
    assert [r["endpoint"] for r in flow.loadtest_results(ctx.artifacts / "report")] == [engine]
