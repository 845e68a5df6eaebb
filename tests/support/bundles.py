"""Environment bundles for tests that run the deploy's steps in process: a copy of
inventories/prod with its group_vars and probe facts, no host needed. Shared by the deploy,
calibrate, feedback, health and plan tests and the testbed's health gate."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from support.facts import H100, H200, raw_probe, second_host, with_bandwidth, write_dir
from support.paths import REPO
from vfleet.environment.context import Context

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def deploy_context(tmp_path: Path, overrides: dict[str, Any], env: str = "prod") -> Context:
    """A copy of inventories/prod as environment `env`, its group_vars pinning the Llama 3.1 8B
    deploy and `overrides`, and the probe facts of two hosts like the real H200 capture."""
    root = tmp_path / "bundle"
    shutil.copytree(REPO / "inventories" / "prod", root / "inventories" / env)
    (root / "ansible").symlink_to(REPO / "ansible")
    group_vars = {
        "vfleet_model": MODEL,
        "vfleet_model_dir_on_hosts": "/srv/models/Llama-3.1-8B-Instruct",
        "vfleet_served_model_name": MODEL,
        "vfleet_workload": "chat",
        "vfleet_vllm_version": "0.11.1",
        "vfleet_plan_overrides": overrides,
        "vfleet_render_extra_args": ["--enforce-eager"],
    }
    ctx = Context(env, root, group_vars=group_vars)
    raw = with_bandwidth(raw_probe(H200), inter=5.0)
    write_dir(ctx.artifacts / "facts", raw, second_host(raw, "gpu-b", "10.0.0.12"))
    return ctx


def h100_context(tmp_path: Path) -> Any:
    """A prod bundle whose probe saw one real 8 x H100 NVSwitch node."""
    ctx = deploy_context(tmp_path, {})
    shutil.rmtree(ctx.artifacts / "facts")
    write_dir(ctx.artifacts / "facts", with_bandwidth(raw_probe(H100), intra=455.0))
    return ctx
