"""The scenarios the bench plans on both sides, and the constants both sides share."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
AIC_VERSION = "0.12.0"
AIC_VLLM = "0.24.0"  # the vLLM release AIC 0.12.0's vllm data describes
DEFAULT_AIC_VENV = Path("/var/cache/vfleet") / f"aic-{AIC_VERSION}"
MEASURED = REPO / "controller" / "src" / "vfleet" / "data" / "perf_cases" / "measured.json"
RATIO_TARGET = 0.95
LOOSE_SLO_MS = 1e9  # "no SLO" for scores at a pinned batch
AIC_MAX_BATCH = 512  # sweep_agg's max_batch_size default in 0.12.0
PP_CANDIDATES = (1, 2, 4, 8)
GPU_CANDIDATES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Scenario:
    name: str
    cluster: str  # examples/clusters/*.yaml
    model: str  # vfleet catalog id
    aic_model: str  # AIC's bundled config of the same architecture
    aic_system: str
    gpus: int
    moe: bool
    # AIC's stock inter-node link is InfiniBand-class; True: give AIC the cluster file's
    # measured inter-node bus bandwidth instead (a copy of aic_system written at run time).
    measured_link: bool = False


SCENARIOS = (
    Scenario(
        "DeepSeek-V3, 8 x H200",
        "1x8-h200.yaml",
        "deepseek-ai/DeepSeek-V3",
        "deepseek-ai/DeepSeek-V3",
        "h200_sxm",
        8,
        True,
    ),
    Scenario(
        "Llama-3.1-70B, 8 x H100",
        "1x8-h100.yaml",
        "meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Meta-Llama-3.1-70B",
        "h100_sxm",
        8,
        False,
    ),
    Scenario(
        "Llama-3.1-8B, 4 x H100",
        "1x4-h100.yaml",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Meta-Llama-3.1-8B",
        "h100_sxm",
        4,
        False,
    ),
    Scenario(
        "Qwen3-235B-A22B-FP8, 8 x H200",
        "1x8-h200.yaml",
        "Qwen/Qwen3-235B-A22B-FP8",
        "Qwen/Qwen3-235B-A22B-FP8",
        "h200_sxm",
        8,
        True,
    ),
    Scenario(
        "DeepSeek-V3, 2 x 8 H200 IB",
        "2x8-h200-ib.yaml",
        "deepseek-ai/DeepSeek-V3",
        "deepseek-ai/DeepSeek-V3",
        "h200_sxm",
        16,
        True,
    ),
    Scenario(
        "DeepSeek-V3, 2 x 8 H100 25GbE",
        "2x8-h100-25gbe.yaml",
        "deepseek-ai/DeepSeek-V3",
        "deepseek-ai/DeepSeek-V3",
        "h100_sxm",
        16,
        True,
        measured_link=True,
    ),
)

# vfleet catalog id -> AIC's bundled config of the same checkpoint family (measured points
# whose own model id AIC bundles use it directly).
AIC_MODELS = {
    "deepseek-ai/DeepSeek-V3": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1": "deepseek-ai/DeepSeek-R1",
    "deepseek-ai/DeepSeek-V3.2": "deepseek-ai/DeepSeek-V3.2",
    "Qwen/Qwen3-235B-A22B-FP8": "Qwen/Qwen3-235B-A22B-FP8",
    "Qwen/Qwen3-235B-A22B": "Qwen/Qwen3-235B-A22B",
    "openai/gpt-oss-120b": "openai/gpt-oss-120b",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B-Instruct": "meta-llama/Meta-Llama-3.1-405B",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mistralai/Mixtral-8x7B-v0.1",
}
# Published GPU names -> AIC systems (checked in this order: "H200" before "H20").
AIC_GPUS = (("H200", "h200_sxm"), ("H100", "h100_sxm"))
