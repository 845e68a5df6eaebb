"""Rendered launch commands against the real vLLM CPU build: its argument parser accepts
every one, and the single-node script really starts an engine that answers a completion."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from support.harness import VllmServer, free_port
from support.paths import TESTS
from support.render_cases import CASES, commands, render_case, run_vfleet

pytestmark = pytest.mark.engine

PARSER = TESTS / "support" / "parse_with_vllm.py"


# A flag vLLM no longer knows, parsed beside the rendered commands (one import of vLLM's
# parser, not two): the parser's answer must be "no" for it, so the check can fail.
UNKNOWN_FLAG = ["vllm", "serve", "/m", "--num-scheduler-steps", "8"]


def test_vllms_own_parser_accepts_every_rendered_command(vllm_venv: Path, tmp_path: Path):
    argvs, names = [], []
    for case in CASES:
        out = render_case(case, tmp_path / case.name)
        for argv in commands(out):
            argvs.append(argv)
            names.append(case.name)
    assert argvs
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update({"VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "TMPDIR": str(tmp_path)})
    proc = subprocess.run(
        [str(vllm_venv / "bin" / "python"), str(PARSER)],
        input=json.dumps([*argvs, UNKNOWN_FLAG]),
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    *results, control = json.loads(proc.stdout)
    assert control["ok"] is False, control  # the check would catch a flag vLLM does not know
    failures = [
        (n, a, r["error"]) for n, a, r in zip(names, argvs, results, strict=True) if not r["ok"]
    ]
    assert not failures, failures


class ScriptServer(VllmServer):
    """Runs a rendered launch.sh instead of building its own command."""

    def __init__(self, script: Path, env_file: Path, port: int, **kwargs):
        super().__init__(script.parent, kv_cache_memory_bytes=0, **kwargs)
        self.script, self.env_file, self.fixed_port = script, env_file, port

    def command(self) -> list[str]:
        self.port = self.fixed_port
        return ["bash", str(self.script)]

    def environment(self) -> dict[str, str]:
        env = super().environment()
        for line in self.env_file.read_text().splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.partition("=")
                env[key] = value
        env["VLLM_BIN"] = str(self.venv / "bin" / "vllm")
        return env


def test_rendered_single_node_script_serves_a_completion(
    vllm_venv: Path, tiny_models: Path, tmp_path: Path
):
    port = free_port()
    cluster = tmp_path / "cluster.yaml"
    # The CPU engine stands in for one GPU of this host: plan as one L4, then pin the KV
    # size and the CPU-safe dtypes through the renderer's extra arguments.
    cluster.write_text(
        "nodes: [{name: local, address: 127.0.0.1, gpus: 1}]\ngpu: L4\n"
        "intra_node: {link: pcie, busbw_GBps: 20}\n"
    )
    plan = tmp_path / "plan.json"
    out = run_vfleet(
        "plan",
        "--cluster",
        str(cluster),
        "--model",
        str(tiny_models / "tiny-llama"),
        "--vllm-version",
        "0.32.0",
        "--kv-cache-dtype",
        "auto",
        "--out",
        str(plan),
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(plan.read_text())
    doc["max_model_len"] = 512  # the tiny model's context
    doc["block_size"] = 128  # the CPU backend's block size
    plan.write_text(json.dumps(doc))
    target = tmp_path / "launch"
    out = run_vfleet(
        "render",
        "--plan",
        str(plan),
        "--cluster",
        str(cluster),
        "--out",
        str(target),
        "--model-path",
        str(tiny_models / "tiny-llama"),
        "--served-model-name",
        "tiny",
        "--port",
        str(port),
        "--extra-arg=--kv-cache-memory-bytes=67108864",
        "--extra-arg=--enforce-eager",
        "--extra-arg=--dtype=bfloat16",
    )
    assert out.returncode == 0, out.stderr
    script = target / "local" / "engine-0" / "launch.sh"
    with ScriptServer(
        script, script.with_name("vllm.env"), port, venv=vllm_venv, run_dir=tmp_path / "run"
    ) as server:
        reply = server.complete("def main():", max_tokens=8)
        assert reply["choices"][0]["text"] is not None
        assert server.cache_config_info()["num_gpu_blocks"] == "1024"
