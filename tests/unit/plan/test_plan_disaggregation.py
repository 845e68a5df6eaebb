"""Aggregated or prefill/decode pools: the planner's comparison, the plan's pools, and the
per-release launch facts a disaggregated engine is rendered with."""

from __future__ import annotations

import json

import pytest

from support.cli_run import vfleet
from support.paths import REPO
from vfleet.catalog.models import load_model
from vfleet.catalog.releases import traits
from vfleet.documents.plan import Plan, parse_plan
from vfleet.errors import UserError
from vfleet.inputs.files import Document
from vfleet.plan.make import PlanRequest, PlanResult, make_plan
from vfleet.plan.workload import PRESETS, Workload, workload_from_dict
from vfleet.probe.load import load_cluster
from vfleet.render import kv_transfer
from vfleet.render.kv_transfer import SideChannel

CLUSTERS = REPO / "examples" / "clusters"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
# Long prompts and a tight TPOT: aggregated steps carry prompt chunks, so it must shrink
# its batch; a decode pool never sees a chunk.
TIGHT = {
    "input_len": {"mean": 8192, "p99": 8192},
    "output_len": {"mean": 256, "p99": 512},
    "concurrency": 64,
    "slo": {"ttft_p99_ms": 3000, "tpot_p99_ms": 5},
}


def _plan(
    cluster: str, model: str, workload: Workload, mode: str | None = None, version: str = ""
) -> PlanResult:
    c = load_cluster(CLUSTERS / cluster)
    return make_plan(
        PlanRequest(
            spec=load_model(model),
            cluster=c,
            workload=workload,
            traits=traits(version or None),
            mode=mode,  # type: ignore[arg-type]
        )
    )


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.9.2", {"kv_connector", "kv_role"}),
        ("0.12.0", {"kv_connector", "kv_role"}),
        ("0.13.0", {"kv_connector", "kv_role", "kv_load_failure_policy"}),
        (
            "0.22.0",
            {"kv_connector", "kv_role", "kv_load_failure_policy", "kv_connector_extra_config"},
        ),
        (
            "0.33.0",
            {"kv_connector", "kv_role", "kv_load_failure_policy", "kv_connector_extra_config"},
        ),
    ],
)
def test_each_release_gets_only_its_own_fields(version, expected):
    for role, kv_role in (("prefill", "kv_producer"), ("decode", "kv_consumer")):
        config = json.loads(kv_transfer.kv_transfer_json(version, role))
        assert set(config) == expected
        assert config["kv_role"] == kv_role
        assert not {"kv_rank", "kv_parallel_size", "kv_ip", "kv_buffer_size"} & set(config)


def test_a_release_without_nixl_is_refused_in_one_line():
    with pytest.raises(UserError, match=r"vLLM 0\.8\.5 has no NixlConnector .*0\.9\.2"):
        kv_transfer.kv_transfer_config("0.8.5", "prefill")


def test_side_channel_ports_and_timeout_follow_the_release():
    assert kv_transfer.side_channel_ports("0.11.0", tp=4, dp=2) == 8  # one per rank
    assert kv_transfer.side_channel_ports("0.12.0", tp=4, dp=2) == 2  # one per DP rank
    channel = SideChannel("10.0.0.11", 5600, 2)
    assert "VLLM_NIXL_ABORT_REQUEST_TIMEOUT" not in kv_transfer.side_channel_env("0.9.2", channel)
    assert kv_transfer.side_channel_env("0.12.0", channel)["VLLM_NIXL_ABORT_REQUEST_TIMEOUT"]
    later = kv_transfer.side_channel_env("0.26.0", channel)  # the lease replaced it
    assert later == {
        "VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.11",
        "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600",
    }
    assert kv_transfer.ucx_env([])["UCX_TLS"].startswith("tcp")
    assert kv_transfer.ucx_env(["mlx5_0"])["UCX_NET_DEVICES"] == "mlx5_0:1"


def test_auto_keeps_aggregated_when_the_split_only_wins_inside_its_band():
    result = _plan("1x8-h100.yaml", LLAMA_8B, PRESETS["chat"])
    decision = result.decision
    assert decision is not None and decision.split is not None
    assert decision.chosen == "aggregated"
    # The split is estimated faster, but not by enough to survive its p10.
    assert decision.split.tokens_per_s > decision.aggregated.tokens_per_s
    assert decision.split.interval.p10 <= decision.aggregated.tokens_per_s
    assert "p10" in decision.reason
    pools = result.plan.disaggregation
    assert pools is not None and pools.chosen == "aggregated" and pools.prefill_hosts is None
    assert [row.mode for row in pools.compared] == ["aggregated", "disaggregated"]


def test_auto_disaggregates_long_prompts_under_a_tight_tpot():
    result = _plan("1x8-h100.yaml", LLAMA_8B, workload_from_dict(TIGHT))
    decision = result.decision
    assert decision is not None and decision.chosen == "disaggregated", decision
    split = decision.split
    assert split is not None and split.meets_slo
    assert split.interval.p10 > decision.aggregated.tokens_per_s
    # NIXL's rule for GQA models: decode TP at least prefill TP.
    assert split.decode.ev.candidate.tp >= split.prefill.ev.candidate.tp
    plan = Plan.model_validate(json.loads(json.dumps(result.plan.document())))
    pools = plan.disaggregation
    assert pools is not None and pools.prefill is not None and pools.prefill_hosts
    assert plan.replicas == split.decode_engines == pools.decode.engines  # type: ignore[union-attr]
    assert plan.tensor_parallel_size == split.decode.ev.candidate.tp
    assert pools.router_host == pools.prefill_hosts[0].host
    prefill_gpus = {r.gpu for h in pools.prefill_hosts for rs in h.engines.values() for r in rs}
    decode_gpus = {r.gpu for h in plan.hosts for rs in h.engines.values() for r in rs}
    assert not prefill_gpus & decode_gpus
    assert len(prefill_gpus | decode_gpus) == split.gpus


def test_kv_over_ethernet_is_never_chosen_by_auto():
    result = _plan("2x8-h100-25gbe.yaml", "Qwen/Qwen3-235B-A22B", PRESETS["rag"])
    decision = result.decision
    assert decision is not None and decision.split is not None
    assert not decision.split.transfer.rdma and decision.split.transfer.link == "ethernet"
    assert decision.chosen == "aggregated" and "without RDMA" in decision.reason


def test_aggregated_mode_compares_nothing_and_old_releases_refuse_disaggregation():
    result = _plan("1x8-h100.yaml", LLAMA_8B, PRESETS["chat"], mode="aggregated")
    assert result.decision is not None and result.decision.split is None
    with pytest.raises(UserError, match="no NixlConnector"):
        _plan("1x8-h100.yaml", LLAMA_8B, PRESETS["chat"], "disaggregated", "0.8.5")
    # Before 0.9.2 auto means aggregated, with no comparison in the plan.
    old = _plan("1x8-h100.yaml", LLAMA_8B, PRESETS["chat"], version="0.8.5")
    assert old.plan.disaggregation is None


def _disaggregated_document() -> dict:
    result = _plan("1x8-h100.yaml", LLAMA_8B, workload_from_dict(TIGHT), mode="disaggregated")
    return json.loads(json.dumps(result.plan.document()))


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d["hosts"][0]["engines"]["0"][0].update(gpu=0), "serves both pools"),
        (lambda d: d["disaggregation"]["prefill"].update(engines=99), r"says 99 engine\(s\)"),
        (lambda d: d["disaggregation"].pop("transfer"), "needs its prefill and decode pools"),
        (
            lambda d: d["disaggregation"]["decode"].update(tensor_parallel_size=8),
            "decode pool's sizes differ",
        ),
    ],
)
def test_a_hand_edited_pool_is_refused_in_one_line(edit, needle):
    doc = _disaggregated_document()
    edit(doc)
    with pytest.raises(UserError, match=needle):
        parse_plan(Document(doc, "plan.json"))


def test_plan_mode_flag_prints_both_rows_and_json_carries_the_pools(tmp_path):
    cluster = str(CLUSTERS / "1x8-h100.yaml")
    shown = vfleet("plan", "--cluster", cluster, "--model", LLAMA_8B, "--mode", "disaggregated")
    assert shown.returncode == 0, shown.stderr
    assert "Aggregated or disaggregated" in shown.stdout
    assert "Mode: disaggregated (disaggregated asked)" in shown.stdout
    out = tmp_path / "plan.json"
    as_json = vfleet(
        "plan", "--cluster", cluster, "--model", LLAMA_8B, "--mode", "disaggregated",
        "--json", "--out", str(out),
    )  # fmt: skip
    assert as_json.returncode == 0
    assert json.loads(as_json.stdout)["disaggregation"]["prefill"]["engines"] >= 1
    assert json.loads(out.read_text())["disaggregation"]["chosen"] == "disaggregated"
    bad = vfleet("plan", "--cluster", cluster, "--model", LLAMA_8B, "--mode", "split")
    assert bad.returncode == 2 and "--mode" in bad.stderr


def test_the_deploy_prints_a_line_per_pool():
    """`make deploy`'s plan step: one line for an aggregated plan, and for a disaggregated
    one the prefill and the decode pool (its top level alone is only the decode pool)."""
    from vfleet.deploy.flow import plan_lines

    workload = workload_from_dict(TIGHT)
    split = _plan("1x8-h100.yaml", LLAMA_8B, workload, "disaggregated").plan
    pools = split.disaggregation
    assert pools is not None and pools.prefill is not None and pools.decode is not None
    memory = f"gpu-memory-utilization {split.gpu_memory_utilization}"
    assert plan_lines(split) == [
        f"{name} pool: {pool.layout} x {pool.engines}: max-num-seqs {pool.max_num_seqs}, "
        f"max-num-batched-tokens {pool.max_num_batched_tokens}, {memory}"
        for name, pool in (("prefill", pools.prefill), ("decode", pools.decode))
    ]
    one = _plan("1x8-h100.yaml", LLAMA_8B, workload, "aggregated").plan
    assert plan_lines(one) == [
        f"{one.layout} x {one.replicas}: max-num-seqs {one.max_num_seqs}, "
        f"max-num-batched-tokens {one.max_num_batched_tokens}, "
        f"gpu-memory-utilization {one.gpu_memory_utilization}"
    ]
