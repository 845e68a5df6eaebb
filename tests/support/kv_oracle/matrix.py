"""The oracle case matrix and vfleet's prediction for each case (used by the test and the bench).

Engine inputs vLLM derives itself, as each release derives them (paths inside the `vllm/`
package of that release):
- Async scheduling defaults on for a generative model without speculative decoding on the mp/uni
  executors in every release here: config/vllm.py `elif self.scheduler_config.async_scheduling
  is None:` ... `= True` (0.20.0 and 0.20.2 L798-838, 0.23.0 L957-997, 0.26.0 L1059-1107,
  0.27.0 L1095-1143, 0.32.0 L1585-1644, 0.33.0 L1685-1719).
- In-flight tokens of window caches: up to 0.25 SlidingWindowSpec / ChunkedLocalAttentionSpec
  reserve `scheduler_config.max_num_batched_tokens` (0.23.0 v1/kv_cache_interface.py L443,
  L515); from 0.26 `VllmConfig.max_in_flight_tokens` = max_concurrent_batches x
  max_num_batched_tokens, with 2 batches under async scheduling at PP 1 (0.26.0 config/vllm.py
  L512-533, 0.33.0 L588-609). The runner evaluates these with the release's own code.
- Async scheduling stays on with MTP: the default turns it off only for a speculative method
  outside EagleModelTypes (which holds MTPModelTypes, so "mtp") and NgramGPUTypes, or with
  disable_padded_drafter_batch (default False): config/vllm.py 0.20.0 and 0.20.2 L810-829,
  0.23.0 L969-988, 0.26.0 L1071-1091, 0.27.0 L1107-1127, 0.32.0 L1597-1619; 0.33.0 moves the
  check to the V1 runner's v1_async_sched_incompat (L1652-1665), applied at L1711-1717.
- The hybrid KV-cache manager is switched off by default when the model has chunked local
  attention (Llama 4) unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1: config/vllm.py
  (0.20.0 L1266-1286, 0.23.0 L1459, 0.26.0 L1580, 0.27.0 L1619, 0.32.0 L2150, 0.33.0 L2235-2255).
  Its chunked layers are then allocated as full attention (unify_hybrid_kv_cache_specs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vfleet.budget.compute import BudgetRequest, compute
from vfleet.budget.params import Layout
from vfleet.budget.speculative import Speculative
from vfleet.catalog.gpus import resolve_gpu
from vfleet.catalog.model_shape import ModelShape, spec_from_config
from vfleet.catalog.models import catalog_entry
from vfleet.catalog.releases import traits

GPU = "H200-SXM-141GB"
RELEASES = ("0.20.0", "0.20.2", "0.23.0", "0.26.0", "0.27.0", "0.32.0", "0.33.0")
LENGTHS = (4096, 32768, 131072, 262144, 1048576)
GIB = 1 << 30


@dataclass(frozen=True)
class ModelCase:
    model: str  # catalog id
    tp: int
    kv_cache_dtype: str
    # KV bytes per GPU, as a log's "Available KV cache memory" would give them.
    available_bytes: int
    # Window-bounded caches depend on max_num_batched_tokens; uniform ones do not.
    batched: tuple[int, ...] = (8192,)
    label: str = ""
    # MTP speculative decoding with this many num_speculative_tokens (0: none).
    mtp_tokens: int = 0
    # A num_nextn_predict_layers other than the checkpoint's (a multi-module MTP variant).
    mtp_modules: int = 0
    # Overrides of the standard lengths and of RELEASES, to keep the extra cases few.
    lengths: tuple[int, ...] = ()
    releases: tuple[str, ...] = ()

    @property
    def short(self) -> str:
        name = self.label or self.model.split("/", 1)[1]
        if self.mtp_modules:
            name = f"{name}-{self.mtp_modules}modules"
        return f"{name}-mtp{self.mtp_tokens}" if self.mtp_tokens else name

    def hf_config(self) -> dict[str, Any]:
        hf = catalog_entry(self.model)["config"]
        if self.mtp_modules:
            hf = {**hf, "num_nextn_predict_layers": self.mtp_modules}
        return hf

    def spec(self) -> ModelShape:
        return spec_from_config(self.hf_config(), name=catalog_entry(self.model)["id"])


WINDOWED = (2048, 8192, 16384)
MODELS = (
    # Non-uniform KV layouts.
    ModelCase("deepseek-ai/DeepSeek-V4-Flash", 2, "fp8", 34_448_757_120, WINDOWED),
    ModelCase("deepseek-ai/DeepSeek-V4-Pro", 8, "fp8", 30 * GIB + 987_654_321, WINDOWED),
    ModelCase("deepseek-ai/DeepSeek-V3.2", 8, "fp8", 40 * GIB),
    ModelCase("openai/gpt-oss-20b", 1, "auto", 100 * GIB + 123_456_789, WINDOWED),
    ModelCase("openai/gpt-oss-120b", 2, "auto", 60 * GIB + 55_555_555, WINDOWED),
    ModelCase("google/gemma-3-27b-it", 2, "auto", 85 * GIB + 7_777_777, WINDOWED),
    ModelCase("meta-llama/Llama-4-Scout-17B-16E-Instruct", 4, "auto", 65 * GIB + 31_415_926),
    # Uniform controls.
    ModelCase("meta-llama/Llama-3.1-8B-Instruct", 1, "auto", 100 * GIB + 1_000_003),
    ModelCase("deepseek-ai/DeepSeek-V3", 8, "auto", 40 * GIB),
    ModelCase("deepseek-ai/DeepSeek-V3", 8, "fp8", 40 * GIB, label="DeepSeek-V3-fp8"),
    # MTP drafters: V4's SWA-only layer regroups the window caches; V3's adds one MLA layer.
    # num_speculative_tokens enters only through multi-module MTP, so 3 is checked once.
    ModelCase(
        "deepseek-ai/DeepSeek-V4-Flash",
        2,
        "fp8",
        34_448_757_120,
        (2048, 8192),
        mtp_tokens=1,
        lengths=(4096, 131072, 1048576),
    ),
    ModelCase(
        "deepseek-ai/DeepSeek-V4-Flash",
        2,
        "fp8",
        34_448_757_120,
        (2048, 8192),
        mtp_tokens=3,
        lengths=(131072,),
        releases=("0.33.0",),
    ),
    # Three MTP modules drafting 3 tokens: each module is one more SWA-only layer, and from
    # 0.28 every window cache retains k - 1 more tokens (vfleet.budget.speculative).
    ModelCase(
        "deepseek-ai/DeepSeek-V4-Flash",
        2,
        "fp8",
        34_448_757_120,
        mtp_tokens=3,
        mtp_modules=3,
        lengths=(131072,),
        releases=("0.23.0", "0.33.0"),
    ),
    ModelCase(
        "deepseek-ai/DeepSeek-V3",
        8,
        "fp8",
        40 * GIB,
        label="DeepSeek-V3-fp8",
        mtp_tokens=1,
        lengths=(4096, 131072, 1048576),
    ),
    ModelCase(
        "deepseek-ai/DeepSeek-V3",
        8,
        "fp8",
        40 * GIB,
        label="DeepSeek-V3-fp8",
        mtp_tokens=3,
        lengths=(131072,),
        releases=("0.33.0",),
    ),
)


def lengths_for(
    max_position_embeddings: int, lengths: tuple[int, ...] = LENGTHS
) -> tuple[int, ...]:
    """The lengths up to what the model allows, plus its own maximum."""
    out = [n for n in lengths if n <= max_position_embeddings]
    if max_position_embeddings < lengths[-1] and max_position_embeddings not in out:
        out.append(max_position_embeddings)
    return tuple(out)


def async_scheduling_default(version: str) -> bool:
    return True  # every release in RELEASES; see the module docstring


def hybrid_manager_disabled(hf_config: dict[str, Any]) -> bool:
    text = hf_config.get("text_config") or hf_config
    return text.get("attention_chunk_size") is not None


@dataclass
class Case:
    case_id: str
    release: str
    model: ModelCase
    max_model_len: int
    max_num_batched_tokens: int
    oracle_input: dict[str, Any]
    vfleet: dict[str, Any] | None = None
    vfleet_error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def _vfleet(mc: ModelCase, release: str, length: int, batched: int) -> dict[str, Any]:
    budget = compute(
        BudgetRequest(
            spec=mc.spec(),
            gpu=resolve_gpu(GPU),
            traits=traits(release),
            layout=Layout(tp=mc.tp),
            kv_cache_memory_bytes=mc.available_bytes,
            max_model_len=length,
            max_num_batched_tokens=batched,
            kv_cache_dtype=mc.kv_cache_dtype,
            speculative=Speculative("mtp", mc.mtp_tokens) if mc.mtp_tokens else None,
        )
    )
    return {
        "num_blocks": budget.num_blocks,
        "kv_tokens": budget.kv_tokens,
        "max_concurrency": budget.max_concurrency,
        "block_size": budget.block_size,
        "kv_cache_dtype": budget.kv_cache_dtype,
        "max_num_seqs": budget.max_num_seqs,
    }


def build_cases(releases: tuple[str, ...] = RELEASES) -> list[Case]:
    cases = []
    for release in releases:
        for mc in MODELS:
            if mc.releases and release not in mc.releases:
                continue
            hf = mc.hf_config()
            spec = mc.spec()
            is_dsv4 = bool(spec.compress_ratios)
            for length in lengths_for(spec.max_position_embeddings, mc.lengths or LENGTHS):
                for batched in mc.batched:
                    case_id = f"{mc.short}-{release}-L{length}-M{batched}"
                    vfleet, error = None, None
                    try:
                        vfleet = _vfleet(mc, release, length, batched)
                    except Exception as exc:  # reported per case, the oracle still runs
                        error = f"{type(exc).__name__}: {exc}"
                    oracle_input = {
                        "id": case_id,
                        "model": mc.model,
                        "hf_config": hf,
                        "tensor_parallel_size": mc.tp,
                        "pipeline_parallel_size": 1,
                        # vfleet's own choices go in, so the oracle checks the planner maths.
                        "kv_cache_dtype": vfleet["kv_cache_dtype"] if vfleet else mc.kv_cache_dtype,
                        # DSv4's caches take their block sizes from its model code.
                        "block_size": None if is_dsv4 else (vfleet["block_size"] if vfleet else 16),
                        "max_model_len": length,
                        "max_num_batched_tokens": batched,
                        "max_num_seqs": vfleet["max_num_seqs"] if vfleet else 256,
                        "async_scheduling": async_scheduling_default(release),
                        "disable_hybrid_kv_cache_manager": hybrid_manager_disabled(hf),
                        # MTP: the model's own modules (num_nextn_predict_layers) draft.
                        "num_speculative_layers": spec.num_mtp_layers if mc.mtp_tokens else 0,
                        "num_speculative_tokens": mc.mtp_tokens or None,
                        "available_bytes": mc.available_bytes,
                    }
                    cases.append(
                        Case(case_id, release, mc, length, batched, oracle_input, vfleet, error)
                    )
    return cases


def rel_error(predicted: float | None, truth: float | None) -> float | None:
    if predicted is None or truth is None:
        return None
    if truth == 0:
        return 0.0 if predicted == 0 else float("inf")
    return (predicted - truth) / truth


def compare(case: Case, oracle: dict[str, Any]) -> dict[str, Any]:
    """vfleet next to the oracle for one case; exact means all three numbers agree."""
    row: dict[str, Any] = {
        "id": case.case_id,
        "release": case.release,
        "model": case.model.model,
        "max_model_len": case.max_model_len,
        "max_num_batched_tokens": case.max_num_batched_tokens,
        "oracle": oracle,
        "vfleet": case.vfleet,
        "vfleet_error": case.vfleet_error,
    }
    # An answer built on config a stand-in lacked (a miss) is no answer.
    if "error" in oracle or case.vfleet is None or oracle["debug"]["stand_in_misses"]:
        row["exact"] = False
        return row
    v = case.vfleet
    row["exact"] = (
        v["num_blocks"] == oracle["num_blocks"]
        and v["kv_tokens"] == oracle["kv_tokens"]
        and round(v["max_concurrency"], 2) == round(oracle["max_concurrency"], 2)
    )
    row["error_blocks"] = rel_error(v["num_blocks"], oracle["num_blocks"])
    row["error_tokens"] = rel_error(v["kv_tokens"], oracle["kv_tokens"])
    row["error_concurrency"] = rel_error(v["max_concurrency"], oracle["max_concurrency"])
    return row
