"""Speculative decoding: the draft's weights and KV in the budget, the plan carrying the
choice, and the spelling each vLLM release accepts in the launch scripts."""

import json
import os
import shlex
import subprocess
import sys
from dataclasses import replace

import pytest

from vfleet.budget.compute import BudgetRequest, compute, speculative
from vfleet.budget.params import Layout
from vfleet.catalog.flag_registry import _registry, flag_set, speculative_methods
from vfleet.catalog.gpus import resolve_gpu
from vfleet.catalog.models import MODELS_DIR, load_model
from vfleet.catalog.releases import parse_version, traits
from vfleet.cli import main as cli
from vfleet.documents.plan import Plan
from vfleet.errors import UserError
from vfleet.probe.load import load_cluster
from vfleet.render.engines import render
from vfleet.render.file_set import render_files
from vfleet.render.types import RenderOptions

V3 = "deepseek-ai/DeepSeek-V3"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
PINNED = 40 << 30  # pin the KV pool so block counts follow from bytes per block alone

EAGLE_LLAMA = {  # an EAGLE-1 head for Llama 3.1 8B: one decoder layer of the target's shape
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 1,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 131072,
}


def _budget(model, sp=None, version="0.33.0", tp=8, **kw):
    spec = load_model(model)
    req = BudgetRequest(
        spec=spec,
        gpu=resolve_gpu("H200-SXM-141GB"),
        traits=traits(version),
        layout=Layout(tp=tp),
        max_model_len=32768,
        kv_cache_memory_bytes=PINNED,
        speculative=sp,
        **kw,
    )
    return compute(req)


def _mtp(model=V3, tokens=1):
    return speculative.from_args("mtp", tokens, None, load_model(model))


def _v3_mtp_layer_bytes_by_hand(tp: int) -> float:
    """One DeepSeek-V3 MTP module on one GPU in bf16, from the config's numbers: the MoE
    decoder layer, plus eh_proj (2h x h) and enorm, hnorm, shared_head.norm."""
    c = json.loads((MODELS_DIR / "deepseek-ai--DeepSeek-V3.json").read_text())["config"]
    h, nh = c["hidden_size"], c["num_attention_heads"]
    q, kv, rope = c["q_lora_rank"], c["kv_lora_rank"], c["qk_rope_head_dim"]
    nope, v = c["qk_nope_head_dim"], c["v_head_dim"]
    experts, inter = c["n_routed_experts"], c["moe_intermediate_size"]
    shared = c["n_shared_experts"] * inter
    replicated = (
        h * (q + kv + rope)  # q_a + kv_a down-projections
        + kv
        + q  # their norms
        + 2 * h  # input and post-attention norms
        + experts * h  # router
        + 2 * h * h  # eh_proj
        + 3 * h  # enorm, hnorm, shared_head.norm
    )
    split = (
        q * nh * (nope + rope)  # q_b
        + kv * nh * (nope + v)  # kv_b
        + nh * v * h  # o_proj
        + 3 * h * shared  # shared expert
        + experts * 3 * h * inter  # routed experts, split over TP without EP
    )
    return 2 * (replicated + split / tp)


def test_mtp_adds_one_decoder_layer_of_weights_on_deepseek_v3():
    base = _budget(V3, quantization="none")
    mtp = _budget(V3, _mtp(), quantization="none")
    added = mtp.stages[-1].weights_bytes - base.stages[-1].weights_bytes
    assert added == pytest.approx(_v3_mtp_layer_bytes_by_hand(8), abs=2)
    assert mtp.weights_by_component_gib["mtp"] == pytest.approx(added / (1 << 30), abs=1e-3)
    assert mtp.speculative["draft_weights_gib"] == pytest.approx(added / (1 << 30), abs=1e-3)


def test_mtp_before_0_17_keeps_its_own_lm_head_copy():
    # vLLM PR #34385 shared MTP's shared_head.head with the target's LM head.
    old = _budget(V3, _mtp(), version="0.15.1", quantization="none")
    new = _budget(V3, _mtp(), version="0.17.1", quantization="none")
    head = -(-129280 // 64) * 64 / 8 * 7168 * 2  # vocab padded to 64, split over TP8, bf16
    extra = old.stages[-1].weights_bytes - new.stages[-1].weights_bytes
    assert extra == pytest.approx(head, abs=2)


def test_mtp_adds_one_layer_of_kv_per_block():
    base = _budget(V3, kv_cache_dtype="fp8")
    mtp = _budget(V3, _mtp(), kv_cache_dtype="fp8")
    # fp8 MLA latent: (512 + 64) bytes per token per layer, 61 layers plus the MTP layer.
    assert base.kv_bytes_per_token == 61 * 576
    assert mtp.kv_bytes_per_token == 62 * 576
    assert mtp.num_blocks == PINNED // (62 * 576 * mtp.block_size)
    assert mtp.speculative["draft_kv_layers"] == 1


def test_multi_module_mtp_retains_window_tokens_from_0_28():
    flash = load_model("deepseek-ai/DeepSeek-V4-Flash")
    three = replace(flash, num_mtp_layers=3)

    def retained(spec, tokens, version, method="mtp"):
        sp = speculative.Speculative(method, tokens) if method else None
        return speculative.window_retained_tokens(sp, spec, parse_version(version))

    # min(modules, k) > 1 drafts with several modules: k - 1 trailing tokens stay cached.
    assert retained(three, 3, "0.28.0") == 2
    assert retained(three, 2, "0.33.0") == 1
    assert retained(three, 3, "0.27.0") == 0  # 0.27 does not retain them
    assert retained(flash, 3, "0.33.0") == 0  # one module reused for every token
    assert retained(three, 1, "0.33.0") == 0
    assert retained(three, 3, "0.33.0", method="ngram") == 0
    assert retained(three, 3, "0.33.0", method=None) == 0


def test_mtp_kv_sits_on_the_last_pipeline_stage_only():
    spec = load_model(V3)
    req = BudgetRequest(
        spec=spec,
        gpu=resolve_gpu("H200-SXM-141GB"),
        traits=traits("0.33.0"),
        layout=Layout(tp=8, pp=2),
        max_model_len=32768,
        kv_cache_dtype="fp8",
        kv_cache_memory_bytes=PINNED,
    )
    plain, draft = compute(req), compute(replace(req, speculative=_mtp()))
    assert draft.stages[0].kv_bytes_per_token == plain.stages[0].kv_bytes_per_token
    assert draft.stages[1].kv_bytes_per_token == plain.stages[1].kv_bytes_per_token + 576
    assert draft.stages[0].weights_bytes == plain.stages[0].weights_bytes
    assert draft.stages[1].weights_bytes > plain.stages[1].weights_bytes


def test_ngram_changes_no_bytes():
    base = _budget(LLAMA, tp=1)
    ngram = _budget(LLAMA, speculative.from_args("ngram", 4, None, load_model(LLAMA)), tp=1)
    assert ngram.stages == base.stages
    assert ngram.kv_tokens == base.kv_tokens
    assert ngram.speculative["decode_tokens_per_seq"] == 5


def test_eagle_head_from_a_config_adds_its_weights_and_kv(tmp_path):
    cfg = tmp_path / "eagle" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(EAGLE_LLAMA))
    sp = speculative.from_args("eagle", 3, str(cfg.parent), load_model(LLAMA))
    base = _budget(LLAMA, tp=1)
    eagle = _budget(LLAMA, sp, tp=1)
    h, inter = 4096, 14336
    # q, k/v, o, gate/up/down, post-attention norm (the first input norm is an identity)
    layer = h * 32 * 128 + 2 * h * 8 * 128 + 32 * 128 * h + 3 * h * inter + h
    fc = 2 * h * h  # EAGLE-1 fuses [embedding; hidden]; embedding and LM head are shared
    added = eagle.stages[0].weights_bytes - base.stages[0].weights_bytes
    assert added == pytest.approx(2 * (layer + fc), abs=2)
    # One more bf16 GQA layer: K and V, 8 heads x 128 dims x 2 bytes.
    assert eagle.kv_bytes_per_token == base.kv_bytes_per_token + 2 * 8 * 128 * 2
    assert eagle.speculative["draft_model"] == str(cfg.parent)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--model", LLAMA, "--speculative-method", "mtp"], "has no MTP layers"),
        (
            ["--model", V3, "--speculative-method", "mtp", "--num-speculative-tokens", "0"],
            "from 1 to 16",
        ),
        (
            ["--model", V3, "--speculative-method", "ngram", "--num-speculative-tokens", "17"],
            "from 1 to 16",
        ),
        (
            ["--model", LLAMA, "--speculative-method", "eagle", "--num-speculative-tokens", "2"],
            "needs --draft-model",
        ),
        (["--model", LLAMA, "--num-speculative-tokens", "2"], "need --speculative-method"),
        (
            ["--model", V3, "--speculative-method", "mtp", "--vllm-version", "0.8.5"],
            None,  # 0.8.5 has deepseek_mtp: accepted
        ),
    ],
)
def test_bad_speculative_input_exits_2_with_one_line(argv, needle, capsys):
    rc = cli.main(["budget", "--gpu", "H200-SXM-141GB", "--tp", "8", "--json", *argv])
    err = capsys.readouterr().err
    if needle is None:
        assert rc == 0, err
        return
    assert rc == 2
    assert err.count("\n") == 1 and needle in err, err


def test_a_release_without_the_method_is_refused():
    with pytest.raises(UserError, match="has no speculative method eagle3"):
        speculative.vllm_method("eagle3", "llama", parse_version("0.8.5.post1"))
    with pytest.raises(UserError, match="has no MTP speculative method"):
        speculative.vllm_method("mtp", "glm4_moe", parse_version("0.10.2"))


def test_the_method_table_agrees_with_spec_method_choices():
    """From 0.25.1 --spec-method lists the methods: every one the table says a release
    has must be among them."""
    table = speculative_methods()
    assert set(speculative.METHODS) <= set(table)
    for version, entry in _registry()["versions"].items():
        choices = (entry.get("flags") or {}).get("--spec-method", {}).get("choices")
        if not choices:
            continue
        for name, row in table.items():
            if parse_version(row["first"]) <= parse_version(version):
                assert name in choices, (version, name)


# ---- plan and render ----------------------------------------------------------------

ONE_H200 = """nodes: [{name: gpu-a, address: 10.20.0.11, gpus: 8}]
gpu: H200-SXM-141GB
intra_node: {link: nvswitch, busbw_GBps: 450}
"""


def _plan_doc(version, sp, model=V3, model_type="deepseek_v3"):
    ranks = [{"gpu": g, "tp_rank": g, "pp_rank": 0, "dp_rank": 0} for g in range(8)]
    return Plan.model_validate(
        {
            "model": model,
            "model_type": model_type,
            "vllm_version": version,
            "tensor_parallel_size": 8,
            "pipeline_parallel_size": 1,
            "data_parallel_size": 1,
            "max_model_len": 8192,
            "gpu_memory_utilization": 0.9,
            "max_num_seqs": 64,
            "max_num_batched_tokens": 8192,
            "kv_cache_dtype": "fp8",
            "speculative": sp,
            "hosts": [{"host": "gpu-a", "address": "10.20.0.11", "engines": {"0": ranks}}],
        }
    )


def _render(tmp_path, version, sp, **kw):
    cluster_file = tmp_path / "c.yaml"
    cluster_file.write_text(ONE_H200)
    plan = _plan_doc(version, sp, **kw)
    flags = flag_set(version)
    opts = RenderOptions(model_path="/srv/models/DeepSeek-V3", served_model_name="ds")
    rendered = render(plan, load_cluster(cluster_file), opts, flags)
    return render_files(rendered, opts, flags, plan)


def _spec_config(files) -> dict:
    argv = json.loads(files["gpu-a/engine-0/command.json"])
    return json.loads(argv[argv.index("--speculative-config") + 1])


@pytest.mark.parametrize(
    ("version", "method"),
    [
        ("0.8.5.post1", "deepseek_mtp"),
        ("0.10.2", "deepseek_mtp"),
        ("0.11.0", "mtp"),
        ("0.33.0", "mtp"),
    ],
)
def test_mtp_is_spelt_per_release(tmp_path, version, method):
    files = _render(tmp_path, version, {"method": "mtp", "num_speculative_tokens": 2})
    assert _spec_config(files) == {"method": method, "num_speculative_tokens": 2}
    script = files["gpu-a/engine-0/launch.sh"]
    assert "--speculative-model" not in script and "--num-speculative-tokens" not in script


def test_eagle_renders_the_draft_path_on_the_hosts(tmp_path):
    sp = {"method": "eagle3", "num_speculative_tokens": 3, "draft_model": "org/Head-EAGLE3"}
    conf = _spec_config(_render(tmp_path, "0.33.0", sp, model=LLAMA, model_type="llama"))
    assert conf == {
        "method": "eagle3",
        "num_speculative_tokens": 3,
        "model": "/srv/models/Head-EAGLE3",
    }
    with pytest.raises(UserError, match="no speculative method eagle3"):
        _render(tmp_path, "0.8.5.post1", sp, model=LLAMA, model_type="llama")


def test_the_json_is_one_shell_word(tmp_path):
    files = _render(tmp_path, "0.33.0", {"method": "mtp", "num_speculative_tokens": 1})
    script = tmp_path / "launch.sh"
    script.write_text(files["gpu-a/engine-0/launch.sh"])
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    line = next(ln for ln in script.read_text().splitlines() if "--speculative-config" in ln)
    words = shlex.split(line, comments=True)
    assert len(words) == 2 and json.loads(words[1])["method"] == "mtp"
    # Run the script's argument handling for real: a stand-in vllm prints its argv.
    echo = tmp_path / "argv.py"
    echo.write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    stub = tmp_path / "vllm"
    stub.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {echo} "$@"\n')
    stub.chmod(0o755)
    ran = subprocess.run(
        ["bash", str(script)],
        env={**os.environ, "VLLM_BIN": str(stub)},
        capture_output=True,
        text=True,
        check=True,
    )
    command = json.loads(files["gpu-a/engine-0/command.json"])
    assert json.loads(ran.stdout) == command[1:]


def test_plan_carries_the_choice_and_caps_seqs_by_draft_slots(tmp_path, capsys):
    cluster = tmp_path / "c.yaml"
    cluster.write_text(ONE_H200)
    out = tmp_path / "plan.json"
    base = ["plan", "--cluster", str(cluster), "--model", V3, "--layout", "TP8 EP", "--json"]
    rc = cli.main([*base, "--speculative-method", "mtp", "--num-speculative-tokens", "3"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert doc["speculative"] == {"method": "mtp", "num_speculative_tokens": 3}
    assert doc["max_num_seqs"] * 4 <= doc["max_num_batched_tokens"]
    assert cli.main([*base, "--out", str(out)]) == 0
    capsys.readouterr()
    assert "speculative" not in json.loads(out.read_text())
    # render adds the choice to a plan made without it
    rc = cli.main(
        [
            "render",
            "--plan",
            str(out),
            "--cluster",
            str(cluster),
            "--out",
            str(tmp_path / "launch"),
            "--speculative-method",
            "mtp",
        ]
    )
    assert rc == 0
    argv = json.loads((tmp_path / "launch/gpu-a/engine-0/command.json").read_text())
    assert json.loads(argv[argv.index("--speculative-config") + 1])["method"] == "mtp"


def test_budget_json_and_table_show_the_draft(capsys):
    argv = ["budget", "--model", V3, "--gpu", "H200-SXM-141GB", "--tp", "8"]
    assert cli.main([*argv, "--speculative-method", "mtp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["speculative"]["method"] == "mtp" and out["speculative"]["draft_weights_gib"] > 1
    assert out["weights_by_component_gib"]["mtp"] == out["speculative"]["draft_weights_gib"]
    assert cli.main([*argv, "--speculative-method", "mtp"]) == 0
    table = capsys.readouterr().out
    assert "incl. mtp draft" in table and "incl. 1 draft layer(s)" in table
