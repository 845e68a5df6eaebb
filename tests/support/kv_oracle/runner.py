"""vLLM's own KV planner as an oracle, run under the vLLM CPU build's python.

Usage: PYTHONPATH=<release sources, or unset for the installed build> python runner.py
stdin: a JSON list of cases; stdout: a JSON list of results, one per case, in order.

Case: id; hf_config (a catalog entry's `config`); tensor_parallel_size; pipeline_parallel_size
(default 1); kv_cache_dtype; block_size (null for DeepSeek-V4, whose caches take theirs from
its model code); max_model_len; max_num_batched_tokens; async_scheduling;
disable_hybrid_kv_cache_manager (default false); num_speculative_layers (MTP modules, 0 for
none; DeepSeek V3 and V4 only) with num_speculative_tokens; available_bytes (KV memory per
GPU); optional model, max_num_seqs, use_v2_model_runner.
Result: num_blocks, kv_tokens and max_concurrency as the release logs them
("GPU KV cache size", "Maximum concurrency"), max_concurrency_raw (the unrounded float from the
log record), bytes_per_block, groups (spec type, block size, page size, layers), the log lines,
vllm_file / vllm_version and a debug dict; or error + traceback for that case alone.

The runner registers the KV-cache layers the model's attention code registers in this release
(real cache objects where they are cheap to build, else an instance of the release's own layer
class carrying only the attributes its get_kv_cache_spec reads), then calls the release's
EngineCore._initialize_kv_caches on a stand-in engine, so the release's grouping, block count,
admission check and capacity report run unchanged. A real VllmConfig needs a device, so the
configs it reads are the release's CacheConfig/SchedulerConfig/ParallelConfig/AttentionConfig
plus small stand-ins whose VllmConfig properties are the release's own. With MTP the drafter's
layers register after the target's and the speculative config is a stand-in whose predicates
are the release's SpeculativeConfig methods. Any attribute a stand-in lacked is listed in
debug.stand_in_misses; such an answer is not a valid one.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import inspect
import json
import logging
import os
import re
import sys
import time
import traceback
import types
from typing import Any, ClassVar

# The oracle emulates an H200 (Hopper, SM 9.0).
DEVICE_CAPABILITY = (9, 0)

# vLLM logs to stdout by default; our stdout carries the JSON answer.
os.environ["VLLM_CONFIGURE_LOGGING"] = "0"
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
for _var in ("VLLM_KV_CACHE_LAYOUT", "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"):
    os.environ.pop(_var, None)


# ---- import stubs ---------------------------------------------------------------------------
class _Anything:
    """Stands for any attribute of a stubbed module; never called on the KV path."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Anything()

    def __iter__(self):
        return iter(())

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


# gguf is a CUDA wheel's dependency missing from the CPU venv; vllm_flash_attn's CUDA
# extensions are absent, but the MLA backends import it at module level.
STUBBED = ("gguf", "vllm.vllm_flash_attn")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if any(name == s or name.startswith(s + ".") for s in STUBBED):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


sys.meta_path.insert(0, _StubFinder())


# ---- stand-in objects -----------------------------------------------------------------------
class StandIn:
    """Attribute bag; records every attribute it was asked for and lacked."""

    misses: ClassVar[set[str]] = set()

    def __init__(self, label: str, **attrs: Any) -> None:
        object.__setattr__(self, "_label", label)
        self.__dict__.update(attrs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        StandIn.misses.add(f"{self._label}.{name}")
        raise AttributeError(f"oracle stand-in {self._label} has no attribute {name!r}")


def _optional(module: str, name: str | None = None) -> Any:
    """The module (or its attribute) when this release has it; other import errors surface."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            return None
        raise
    return mod if name is None else getattr(mod, name, None)


def _first(*candidates: tuple[str, str]) -> Any:
    for module, name in candidates:
        found = _optional(module, name)
        if found is not None:
            return found
    raise ImportError(f"none of {candidates} exists in this release")


def _build(cls: type, **attrs: Any) -> Any:
    """An instance of the release's layer class without its __init__ (which needs a GPU)."""
    import torch

    obj = cls.__new__(cls)
    if isinstance(obj, torch.nn.Module):
        torch.nn.Module.__init__(obj)
    obj.__dict__.update(attrs)
    return obj


def _kwargs_for(fn: Any, **kwargs: Any) -> dict[str, Any]:
    """Keep only the keyword arguments this release's signature takes."""
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


# ---- configs --------------------------------------------------------------------------------
def _text_config(hf: dict[str, Any]) -> dict[str, Any]:
    for key in ("text_config", "llm_config", "language_config"):
        sub = hf.get(key)
        if isinstance(sub, dict) and sub.get("num_hidden_layers"):
            return sub
    return hf


def _model_dtype(hf: dict[str, Any]) -> Any:
    import torch

    text = _text_config(hf)
    name = str(text.get("torch_dtype") or hf.get("torch_dtype") or "bfloat16")
    return {"float16": torch.float16, "float32": torch.float32}.get(
        name.replace("torch.", ""), torch.bfloat16
    )


def make_vllm_config(case: dict[str, Any]) -> Any:
    from vllm.config import AttentionConfig, CacheConfig, ParallelConfig, SchedulerConfig
    from vllm.config import VllmConfig as RealVllmConfig

    hf = case["hf_config"]
    text = _text_config(hf)
    max_model_len = int(case["max_model_len"])
    cache = CacheConfig(
        **_kwargs_for(
            CacheConfig,
            block_size=case["block_size"],
            cache_dtype=case["kv_cache_dtype"],
        )
    )
    sched = SchedulerConfig(
        **_kwargs_for(
            SchedulerConfig,
            max_num_batched_tokens=int(case["max_num_batched_tokens"]),
            max_num_seqs=int(case.get("max_num_seqs") or 256),
            max_model_len=max_model_len,
            is_encoder_decoder=False,
        )
    )
    sched.async_scheduling = bool(case["async_scheduling"])
    sched.disable_hybrid_kv_cache_manager = bool(case.get("disable_hybrid_kv_cache_manager"))
    parallel = ParallelConfig(
        tensor_parallel_size=int(case["tensor_parallel_size"]),
        pipeline_parallel_size=int(case.get("pipeline_parallel_size") or 1),
    )
    attention = AttentionConfig()
    model = StandIn(
        "model_config",
        model=case.get("model") or case["id"],
        max_model_len=max_model_len,
        original_max_model_len=max_model_len,
        dtype=_model_dtype(hf),
        hf_config=_namespace(text),
        hf_text_config=_namespace(text),
        architectures=list(hf.get("architectures") or []),
        use_mla=bool(text.get("kv_lora_rank")) or bool(text.get("compress_ratios")),
        attention_chunk_size=text.get("attention_chunk_size"),
        supports_kv_cache_grouping=False,
        is_hybrid=False,
        is_mm_prefix_lm=False,
        is_encoder_decoder=False,
        is_attention_free=False,
        is_diffusion=False,
        runner_type="generate",
        get_sliding_window=lambda: None,
    )
    compilation = StandIn(
        "compilation_config",
        static_forward_context={},
        compilation_time=0.0,
        encoder_compilation_time=0.0,
        mode=None,
    )

    # Properties and methods the KV path calls on VllmConfig, taken from this release.
    delegated = {}
    for name in (
        "max_concurrent_batches",
        "max_in_flight_tokens",
        "num_speculative_tokens",
        "num_lookahead_tokens",
        "num_prefill_lookahead_tokens",
        "validate_block_size",
        "adjust_dcp_kv_cache_interleave_size",
    ):
        if name in RealVllmConfig.__dict__:
            delegated[name] = RealVllmConfig.__dict__[name]
    cls = type("OracleVllmConfig", (StandIn,), delegated)
    return cls(
        "vllm_config",
        model_config=model,
        cache_config=cache,
        scheduler_config=sched,
        parallel_config=parallel,
        attention_config=attention,
        compilation_config=compilation,
        device_config=StandIn("device_config", device_type="cuda", device="cuda"),
        kernel_config=StandIn("kernel_config", enable_jit_warmup=False, moe_backend=None),
        speculative_config=make_speculative_config(case, text),
        kv_transfer_config=None,
        kv_events_config=None,
        ec_transfer_config=None,
        diffusion_config=None,
        lora_config=None,
        quant_config=None,
        # With PP 1 the V1 and V2 runners allow the same two batches in flight.
        use_v2_model_runner=bool(case.get("use_v2_model_runner", False)),
    )


def make_speculative_config(case: dict[str, Any], text: dict[str, Any]) -> Any:
    """What `--speculative-config '{"method": "mtp", "num_speculative_tokens": k}'` leaves.

    SpeculativeConfig.__post_init__ renames every MTPModelTypes method (deepseek_mtp, ...) to
    "mtp" in all releases here (0.20.0 config/speculative.py L455-459, 0.33.0 L1246-1250) and
    builds the draft model config from the target's with hf_config_override (DeepSeek: model
    type deepseek_mtp, n_predict = num_nextn_predict_layers). Its predicates (use_eagle,
    uses_draft_model, use_multi_module_mtp, ...) are the release's own; the fields they read
    carry the release's defaults; anything else the KV path asks for shows as a miss.
    """
    if not int(case.get("num_speculative_layers") or 0):
        return None
    k = case.get("num_speculative_tokens")
    if not isinstance(k, int) or k < 1:
        raise ValueError("num_speculative_layers > 0 needs num_speculative_tokens >= 1")
    real = _first(("vllm.config.speculative", "SpeculativeConfig"))
    methods = {
        name: value
        for name, value in real.__dict__.items()
        if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))
    }
    fields = getattr(real, "__dataclass_fields__", {})
    # Flags the predicates and the KV path read, at this release's defaults (absent: unset).
    flags = {
        name: fields[name].default
        for name in (
            "disable_eagle_block_drop",
            "disable_padded_drafter_batch",
            "disable_lookahead_block_hashes",
            "num_speculative_tokens_per_batch_size",
            "kv_cache_dtype",
            "moe_backend",
            "attention_backend",
        )
        if name in fields and not isinstance(fields[name].default, type(dataclasses.MISSING))
    }
    draft_hf = _namespace(
        {**text, "model_type": "deepseek_mtp", "n_predict": text.get("num_nextn_predict_layers")}
    )
    draft_model = StandIn(
        "draft_model_config",
        model=case.get("model") or case["id"],
        hf_config=draft_hf,
        hf_text_config=draft_hf,
        max_model_len=int(case["max_model_len"]),
    )
    cls = type("OracleSpeculativeConfig", (StandIn,), methods)
    return cls(
        "speculative_config",
        method="mtp",
        num_speculative_tokens=k,
        model=case.get("model") or case["id"],
        draft_model_config=draft_model,
        **flags,
    )


def _namespace(d: dict[str, Any]) -> types.SimpleNamespace:
    return types.SimpleNamespace(**d)


# ---- layers per architecture -----------------------------------------------------------------
class Layers:
    """Registers layers in the forward context in the order the model's __init__ does."""

    def __init__(self, vllm_config: Any) -> None:
        self.vc = vllm_config
        self.ctx = vllm_config.compilation_config.static_forward_context

    def add(self, name: str, layer: Any) -> Any:
        if name in self.ctx:
            raise ValueError(f"duplicate layer {name}")
        self.ctx[name] = layer
        return layer


def _kv_torch_dtype(kv_cache_dtype: str, vc: Any) -> Any:
    fn = _first(("vllm.utils.torch_utils", "kv_cache_dtype_str_to_dtype"))
    return fn(kv_cache_dtype, vc.model_config)


def _flash_attn_backend() -> type:
    return _first(("vllm.v1.attention.backends.flash_attn", "FlashAttentionBackend"))


def _attn_type() -> Any:
    for module in (
        "vllm.v1.attention.backend",
        "vllm.attention.backends.abstract",
        "vllm.v1.attention.backends.abstract",
    ):
        found = _optional(module, "AttentionType")
        if found is not None:
            return found.DECODER
    return "decoder"


def gqa_layer(
    layers: Layers,
    name: str,
    *,
    num_kv_heads: int,
    head_size: int,
    sliding_window: int | None,
    chunk: int | None = None,
) -> None:
    """model_executor/layers/attention/attention.py Attention (and ChunkedLocalAttention)."""
    vc = layers.vc
    kv_dtype = vc.cache_config.cache_dtype
    backend = _flash_attn_backend()  # Hopper default for these head sizes (platforms/cuda.py)
    attrs = dict(
        attn_type=_attn_type(),
        kv_cache_dtype=kv_dtype,
        kv_cache_torch_dtype=_kv_torch_dtype(kv_dtype, vc),
        num_kv_heads=num_kv_heads,
        num_heads=num_kv_heads,
        head_size=head_size,
        head_size_v=head_size,
        sliding_window=sliding_window,
        kv_sharing_target_layer_name=None,
        layer_name=name,
        attn_backend=backend,
    )
    if chunk:
        mod = importlib.import_module(
            "vllm.model_executor.layers.attention.chunked_local_attention"
        )
        attrs["attn_backend"] = mod.create_chunked_local_attention_backend(backend, chunk)
        attrs["attention_chunk_size"] = chunk
        layers.add(name, _build(mod.ChunkedLocalAttention, **attrs))
        return
    cls = _first(("vllm.model_executor.layers.attention.attention", "Attention"))
    layers.add(name, _build(cls, **attrs))


def build_llama(layers: Layers, text: dict[str, Any], tp: int) -> None:
    # model_executor/models/llama.py LlamaAttention: max(1, kv // tp) heads, full attention.
    heads = text["num_attention_heads"]
    kv = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or text["hidden_size"] // heads
    for i in range(text["num_hidden_layers"]):
        gqa_layer(
            layers,
            f"model.layers.{i}.self_attn.attn",
            num_kv_heads=max(1, kv // tp),
            head_size=head_dim,
            sliding_window=None,
        )


def build_gpt_oss(layers: Layers, text: dict[str, Any], tp: int) -> None:
    # model_executor/models/gpt_oss.py OAIAttention: even layers slide over
    # config.sliding_window, odd layers are full; kv // tp heads.
    for i in range(text["num_hidden_layers"]):
        gqa_layer(
            layers,
            f"model.layers.{i}.attn.attn",
            num_kv_heads=text["num_key_value_heads"] // tp,
            head_size=text["head_dim"],
            sliding_window=text["sliding_window"] if i % 2 == 0 else None,
        )


def _gemma3_layer_types(text: dict[str, Any]) -> list[str]:
    if text.get("layer_types"):
        return list(text["layer_types"])
    # transformers Gemma3TextConfig derives them from sliding_window_pattern.
    pattern = int(text.get("sliding_window_pattern") or 6)
    return [
        "sliding_attention" if (i + 1) % pattern else "full_attention"
        for i in range(text["num_hidden_layers"])
    ]


def build_gemma3(layers: Layers, text: dict[str, Any], tp: int) -> None:
    # model_executor/models/gemma3.py Gemma3Attention: layer_types[i] == "sliding_attention"
    # gets config.sliding_window; max(1, kv // tp) heads.
    kinds = _gemma3_layer_types(text)
    for i in range(text["num_hidden_layers"]):
        gqa_layer(
            layers,
            f"language_model.model.layers.{i}.self_attn.attn",
            num_kv_heads=max(1, text["num_key_value_heads"] // tp),
            head_size=text["head_dim"],
            sliding_window=text["sliding_window"] if kinds[i] == "sliding_attention" else None,
        )


def build_llama4(layers: Layers, text: dict[str, Any], tp: int) -> None:
    # model_executor/models/llama4.py Llama4Attention: NoPE layers (no_rope_layers[i] == 0)
    # are full attention, the others ChunkedLocalAttention over attention_chunk_size.
    n = text["num_hidden_layers"]
    rope = text.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(n)]
    for i in range(n):
        nope = rope[i] == 0
        gqa_layer(
            layers,
            f"language_model.model.layers.{i}.self_attn.attn",
            num_kv_heads=max(1, text["num_key_value_heads"] // tp),
            head_size=text["head_dim"],
            sliding_window=None,
            chunk=None if nope else text.get("attention_chunk_size"),
        )


def _mla_backend(sparse: bool, kv_dtype: str) -> type:
    # platforms/cuda.py on Hopper: sparse -> FLASHMLA_SPARSE; dense bf16 -> FLASH_ATTN_MLA,
    # dense fp8 -> FLASHMLA.
    if sparse:
        return _first(("vllm.v1.attention.backends.mla.flashmla_sparse", "FlashMLASparseBackend"))
    if kv_dtype.startswith("fp8"):
        return _first(("vllm.v1.attention.backends.mla.flashmla", "FlashMLABackend"))
    # 0.32+ fa_utils defines its kernels only on CUDA; the backend class itself is plain.
    fa_utils = importlib.import_module("vllm.v1.attention.backends.fa_utils")
    if not hasattr(fa_utils, "__getattr__"):
        fa_utils.__getattr__ = _stub_attr
    return _first(("vllm.v1.attention.backends.mla.flashattn_mla", "FlashAttnMLABackend"))


def _stub_attr(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return _Anything()


def build_deepseek_mla(layers: Layers, text: dict[str, Any], tp: int) -> None:
    # model_executor/models/deepseek_v2.py DeepseekV2MLAAttention (0.33: models/deepseek_v32
    # for V3.2): V3.2 builds its indexer (k_cache, 128 fp8 + 4 B scale) before the MLA layer.
    _deepseek_mla_layers(layers, text, range(text["num_hidden_layers"]))


def _deepseek_mla_layers(layers: Layers, text: dict[str, Any], indices: range) -> None:
    vc = layers.vc
    sparse = "index_topk" in text
    kv_dtype = vc.cache_config.cache_dtype
    backend = _mla_backend(sparse, kv_dtype)
    canon = _optional(
        "vllm.model_executor.layers.attention.mla_attention",
        "_canonicalize_sparse_mla_kv_cache_dtype",
    )
    if canon is not None:
        new = canon(backend, kv_dtype)
        if new != kv_dtype:
            vc.cache_config.cache_dtype = kv_dtype = new
    mla_cls = _first(
        ("vllm.model_executor.layers.attention.mla_attention", "MLAAttention"),
        ("vllm.model_executor.layers.attention", "MLAAttention"),
    )
    index_cache_cls = _first(("vllm.model_executor.models.deepseek_v2", "DeepseekV32IndexerCache"))
    import torch

    head = text["kv_lora_rank"] + text["qk_rope_head_dim"]
    for i in indices:
        prefix = f"model.layers.{i}.self_attn"
        indexer = None
        if sparse:
            index_dim = text["index_head_dim"]
            indexer = index_cache_cls(
                head_dim=index_dim + index_dim // 128 * 4,
                dtype=torch.uint8,
                prefix=f"{prefix}.indexer.k_cache",
                cache_config=vc.cache_config,
            )
        layers.add(
            f"{prefix}.attn",
            _build(
                mla_cls,
                kv_cache_dtype=kv_dtype,
                head_size=head,
                num_kv_heads=1,
                sliding_window=None,
                indexer=indexer,
                topk_buffer_width=text.get("index_topk") if sparse else None,
                non_causal_multi_token_decode=False,
                attn_backend=backend,
                layer_name=f"{prefix}.attn",
                kv_sharing_target_layer_name=None,
            ),
        )


def _dsv4_ratios(text: dict[str, Any]) -> list[int]:
    if text.get("compress_ratios") is not None:
        return list(text["compress_ratios"])
    rates = text.get("compress_rates") or {}
    return [int(rates.get(t, 0)) for t in text.get("layer_types") or []]


def build_deepseek_v4(layers: Layers, text: dict[str, Any], tp: int) -> None:
    """DeepseekV4 attention per layer, in its __init__ order.

    0.20.x: model_executor/models/deepseek_v4.py DeepseekV4Attention + layers/
    deepseek_v4_attention.py (wrapper, DeepseekV4MLAAttention); 0.23+: models/deepseek_v4/
    attention.py DeepseekV4Attention via nvidia/model.py _select_dsv4_attn_cls (FlashMLA on
    Hopper). Order: indexer k_cache, indexer compressor state (C4 layers only), SWA cache,
    the attention layer (compressed KV, ratio > 1 only), its compressor state.
    """
    ratios = _dsv4_ratios(text)
    kinds = _Dsv4Classes(layers.vc)
    for i in range(text["num_hidden_layers"]):
        _dsv4_layer(layers, text, kinds, i, max(1, ratios[i]))


class _Dsv4Classes:
    """This release's DeepSeek-V4 cache and attention classes and its KV dtypes."""

    def __init__(self, vc: Any) -> None:
        import torch

        cache_config = vc.cache_config
        self.swa_cls = _first(("vllm.v1.attention.backends.mla.sparse_swa", "DeepseekV4SWACache"))
        self.state_cls = _first(
            ("vllm.models.deepseek_v4.compressor", "CompressorStateCache"),
            ("vllm.model_executor.layers.deepseek_compressor", "CompressorStateCache"),
        )
        self.index_cls = _first(
            ("vllm.models.deepseek_v4.attention", "DeepseekV4IndexerCache"),
            ("vllm.model_executor.layers.deepseek_v4_attention", "DeepseekV4IndexerCache"),
        )
        self.attn_cls = _first(
            ("vllm.models.deepseek_v4.nvidia.flashmla", "DeepseekV4FlashMLAAttention"),
            ("vllm.model_executor.layers.deepseek_v4_attention", "DeepseekV4MLAAttention"),
        )
        resolve = _optional("vllm.models.deepseek_v4.attention", "_resolve_dsv4_kv_cache_dtype")
        if resolve is not None:
            fp8_layout = getattr(
                self.attn_cls,
                "use_fp8_ds_mla_layout",
                getattr(self.attn_cls, "use_flashmla_fp8_layout", True),
            )
            self.kv_dtype, self.kv_torch = resolve(
                fp8_layout, cache_config.cache_dtype, cache_config
            )
            self.swa_dtype = self.kv_torch
        else:
            # 0.20.x DeepseekV4MLAAttention.__init__: fp8 only, rewritten to fp8_ds_mla.
            kv_dtype = cache_config.cache_dtype
            if not kv_dtype.startswith("fp8"):
                raise ValueError(f"DeepseekV4 only supports fp8 kv-cache, got {kv_dtype}")
            if kv_dtype != "fp8_ds_mla":
                cache_config.cache_dtype = kv_dtype = "fp8_ds_mla"
            self.kv_dtype, self.kv_torch = kv_dtype, torch.uint8
            self.swa_dtype = torch.uint8
        self.swa_kwargs = {}
        if "backend_cls" in inspect.signature(self.swa_cls).parameters:
            self.swa_kwargs["backend_cls"] = getattr(self.attn_cls, "swa_backend_cls", None)


def _dsv4_layer(
    layers: Layers, text: dict[str, Any], kinds: _Dsv4Classes, i: int, ratio: int
) -> None:
    """The caches one DeepseekV4Attention at model.layers.{i} registers, in its order."""
    import torch

    cache_config = layers.vc.cache_config
    head_dim = text["head_dim"]
    index_dim = text["index_head_dim"]
    prefix = f"model.layers.{i}.attn"
    if ratio == 4:
        kinds.index_cls(
            head_dim=index_dim + index_dim // 128 * 4,
            dtype=torch.uint8,
            prefix=f"{prefix}.indexer.k_cache",
            cache_config=cache_config,
            compress_ratio=ratio,
        )
        kinds.state_cls(
            state_dim=2 * 2 * index_dim,
            dtype=torch.float32,
            compress_ratio=ratio,
            prefix=f"{prefix}.indexer.compressor.state_cache",
        )
    kinds.swa_cls(
        head_dim=head_dim,
        window_size=text["sliding_window"],
        dtype=kinds.swa_dtype,
        prefix=f"{prefix}.swa_cache",
        cache_config=cache_config,
        **kinds.swa_kwargs,
    )
    layers.add(
        prefix,
        _build(
            kinds.attn_cls,
            compress_ratio=ratio,
            head_dim=head_dim,
            kv_cache_dtype=kinds.kv_dtype,
            kv_cache_torch_dtype=kinds.kv_torch,
            window_size=text["sliding_window"],
            prefix=prefix,
        ),
    )
    if ratio > 1:
        coff = 1 + (ratio == 4)
        kinds.state_cls(
            state_dim=2 * coff * head_dim,
            dtype=torch.float32,
            compress_ratio=ratio,
            prefix=f"{prefix}.compressor.state_cache",
        )


# ---- speculative decoding: the MTP drafter's layers -------------------------------------------
def mtp_deepseek_v3(layers: Layers, text: dict[str, Any], n: int) -> None:
    """model_executor/models/deepseek_mtp.py DeepSeekMultiTokenPredictor: layers
    num_hidden_layers .. + n at f"{prefix}.layers.{idx}" (prefix "model", the proposer's
    get_model passes none), each mtp_block a DeepseekV2DecoderLayer whose self_attn is the
    target's MLA attention: one more MLA layer per MTP module."""
    first = text["num_hidden_layers"]
    _deepseek_mla_layers(layers, text, range(first, first + n))


def mtp_deepseek_v4(layers: Layers, text: dict[str, Any], n: int) -> None:
    """DeepSeekV4MultiTokenPredictor (0.20.x model_executor/models/deepseek_v4_mtp.py; 0.23+
    models/deepseek_v4/nvidia/mtp.py): layer idx = num_hidden_layers + j, its mtp_block a
    DeepseekV4DecoderLayer at prefix model.layers.{idx}, so attention model.layers.{idx}.attn.

    DeepseekV4Attention takes compress_ratio = 1 for layer_id >= num_hidden_layers, whatever
    compress_ratios holds ("MTP layer is not included in the compress ratio list"): 0.20.0
    model_executor/models/deepseek_v4.py L900-903, 0.20.2 L955-958, models/deepseek_v4/
    attention.py 0.23.0 L178-181, 0.26.0 L187-190, 0.27.0 L210-213, 0.32.0 L232-235, 0.33.0
    L238-242. So an MTP layer is its SWA cache plus an attention layer with no spec.
    """
    kinds = _Dsv4Classes(layers.vc)
    first = text["num_hidden_layers"]
    for i in range(first, first + n):
        _dsv4_layer(layers, text, kinds, i, 1)


BUILDERS = {
    "LlamaForCausalLM": build_llama,
    "GptOssForCausalLM": build_gpt_oss,
    "Gemma3ForConditionalGeneration": build_gemma3,
    "Gemma3ForCausalLM": build_gemma3,
    "Llama4ForConditionalGeneration": build_llama4,
    "DeepseekV3ForCausalLM": build_deepseek_mla,
    "DeepseekV32ForCausalLM": build_deepseek_mla,
    "DeepseekV4ForCausalLM": build_deepseek_v4,
}

# Drafters registered after the target (v1/spec_decode/llm_base_proposer.py load_model).
MTP_BUILDERS = {
    "DeepseekV3ForCausalLM": mtp_deepseek_v3,
    "DeepseekV4ForCausalLM": mtp_deepseek_v4,
}


def dsv4_block_size() -> int:
    # DeepseekSparseSWABackend.get_preferred_block_size sets --block-size for DSv4
    # (platforms/interface.py update_block_size_for_backend).
    from vllm.v1.attention.backends.mla.sparse_swa import DeepseekSparseSWABackend

    return int(DeepseekSparseSWABackend.get_preferred_block_size(16))


# ---- the engine-core path -------------------------------------------------------------------
class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _clear_once_caches() -> None:
    import vllm.logger as vlog

    for name in dir(vlog):
        fn = getattr(vlog, name)
        if name.startswith("_print_") and hasattr(fn, "cache_clear"):
            fn.cache_clear()


def worker_specs(vc: Any) -> dict[str, Any]:
    """gpu_model_runner.GPUModelRunner.get_kv_cache_spec over the forward context."""
    specs = {}
    for name, layer in vc.compilation_config.static_forward_context.items():
        if getattr(layer, "kv_sharing_target_layer_name", None):
            continue
        spec = layer.get_kv_cache_spec(vc)
        if spec is not None:
            # 0.33 marks the drafter's specs (is_draft, compare=False) for its eagle groups.
            if getattr(layer, "is_draft_layer", False) and "is_draft" in getattr(
                spec, "__dataclass_fields__", {}
            ):
                spec = dataclasses.replace(spec, is_draft=True)
            specs[name] = spec
    return specs


def split_for_pp(vc: Any, specs: dict[str, Any], num_layers: int) -> list[dict[str, Any]]:
    """One spec dict per worker; PP stages own the layers get_pp_indices gives them."""
    tp = vc.parallel_config.tensor_parallel_size
    pp = vc.parallel_config.pipeline_parallel_size
    if pp == 1:
        return [dict(specs) for _ in range(tp)]
    from vllm.distributed.utils import get_pp_indices
    from vllm.model_executor.models.utils import extract_layer_index

    def stage_index(name: str) -> int:
        # The drafter's layers (index >= num_layers) sit on the last stage, where it runs.
        return min(extract_layer_index(name), num_layers - 1)

    out = []
    for rank in range(pp):
        start, end = get_pp_indices(num_layers, rank, pp)
        own = {k: v for k, v in specs.items() if start <= stage_index(k) < end}
        out.extend(dict(own) for _ in range(tp))
    return out


class FakeExecutor:
    """The executor calls EngineCore._initialize_kv_caches makes, answered without workers.

    Calls that only act on workers (layout RPC, allocation, warm-up) are recorded and ignored.
    """

    def __init__(self, vc: Any, specs: list[dict[str, Any]], available: int) -> None:
        self.vc = vc
        self.specs = specs
        self.available = available
        self.configs: list[Any] = []
        self.ignored: list[str] = []

    def get_kv_cache_specs(self) -> list[dict[str, Any]]:
        return self.specs

    def determine_available_memory(self) -> list[int]:
        return [self.available] * len(self.specs)

    def get_supported_kv_cache_layouts(self) -> list[list[str]]:
        from vllm.v1.worker.worker_base import WorkerBase

        names = WorkerBase.get_supported_kv_cache_layouts(StandIn("worker", vllm_config=self.vc))
        return [names] * len(self.specs)

    def initialize_from_config(self, configs: list[Any]) -> None:
        self.configs = configs

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        self.ignored.append(name)
        return lambda *args, **kwargs: None


def run_engine_core(
    vc: Any, specs: list[dict[str, Any]], available: int
) -> tuple[Any, Any, list[str]]:
    from vllm.v1.engine.core import EngineCore

    executor = FakeExecutor(vc, specs, available)
    core = StandIn(
        "engine_core",
        model_executor=executor,
        vllm_config=vc,
        available_gpu_memory_for_kv_cache=-1,
        collective_rpc=lambda *args, **kwargs: None,
    )
    scheduler_config = EngineCore._initialize_kv_caches(core, vc)
    return executor.configs, scheduler_config, executor.ignored


def _spec_summary(spec: Any) -> dict[str, Any]:
    return {
        "type": type(spec).__name__,
        "block_size": int(spec.block_size),
        "page_size": int(spec.page_size_bytes),
        **(
            {"sliding_window": int(spec.sliding_window)}
            if getattr(spec, "sliding_window", None)
            else {}
        ),
        **(
            {"attention_chunk_size": int(spec.attention_chunk_size)}
            if getattr(spec, "attention_chunk_size", None)
            else {}
        ),
    }


def group_summary(group: Any) -> dict[str, Any]:
    spec = group.kv_cache_spec
    out = _spec_summary(spec)
    out["layers"] = len(group.layer_names)
    if getattr(group, "is_eagle_group", False):
        out["eagle"] = True  # holds the drafter's layers (prefix-cache block drop)
    inner = getattr(spec, "kv_cache_specs", None)
    if inner:
        kinds: dict[tuple, int] = {}
        for layer_spec in inner.values():
            key = tuple(sorted(_spec_summary(layer_spec).items()))
            kinds[key] = kinds.get(key, 0) + 1
        out["members"] = [dict(k) | {"layers": n} for k, n in kinds.items()]
    return out


def _bytes_per_block(vc: Any, config: Any) -> int | None:
    """The release's own divisor of available memory into blocks, where it has one."""
    planner = _optional("vllm.v1.core.kv_cache_planning") or _optional(
        "vllm.v1.core.kv_cache_utils"
    )
    fn = getattr(planner, "_pool_bytes_per_block", None)
    if fn is not None:
        params = inspect.signature(fn).parameters
        args = (vc, config.kv_cache_groups) if len(params) == 2 else (config.kv_cache_groups,)
        return int(fn(*args))
    # 0.20.0: one tensor per layer slot, none shared between pools.
    tensors = getattr(config, "kv_cache_tensors", None) or []
    if not tensors or not config.num_blocks:
        return None
    return sum(t.size for t in tensors) // config.num_blocks


_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


def run_case(case: dict[str, Any], capture: _Capture) -> dict[str, Any]:
    from vllm.config import set_current_vllm_config

    case = dict(case)
    hf = case["hf_config"]
    arch = (hf.get("architectures") or ["?"])[0]
    builder = BUILDERS.get(arch)
    if builder is None:
        raise NotImplementedError(f"no oracle builder for architecture {arch}")
    n_mtp = int(case.get("num_speculative_layers") or 0)
    if n_mtp and arch not in MTP_BUILDERS:
        raise NotImplementedError(f"MTP layers of {arch} are not modelled by the oracle")
    if case.get("block_size") is None:
        if builder is not build_deepseek_v4:
            raise ValueError("block_size is required for this model")
        case["block_size"] = dsv4_block_size()
    text = _text_config(hf)
    vc = make_vllm_config(case)
    StandIn.misses = set()
    _clear_once_caches()
    capture.records.clear()
    draft_layers: list[str] = []
    with set_current_vllm_config(vc):
        layers = Layers(vc)
        builder(layers, text, int(case["tensor_parallel_size"]))
        if n_mtp:
            # The proposer loads the drafter after the target; every attention layer it adds
            # is a draft layer (0.33 v1/spec_decode/llm_base_proposer.py L1318-1335).
            target = set(layers.ctx)
            MTP_BUILDERS[arch](layers, text, n_mtp)
            draft_layers = [name for name in layers.ctx if name not in target]
            for name in draft_layers:
                layers.ctx[name].is_draft_layer = True
        specs = worker_specs(vc)
        per_worker = split_for_pp(vc, specs, text["num_hidden_layers"])
        configs, scheduler_config, ignored = run_engine_core(
            vc, per_worker, int(case["available_bytes"])
        )

    tokens = conc = conc_raw = None
    messages = []
    for record in capture.records:
        text_msg = record.getMessage()
        if "KV cache size" in text_msg or "Maximum concurrency" in text_msg:
            messages.append(text_msg)
        if m := _TOKENS.search(text_msg):
            tokens = int(m.group(1).replace(",", ""))
        if m := _CONC.search(text_msg):
            conc = float(m.group(2))
            floats = [a for a in (record.args or ()) if isinstance(a, float)]
            conc_raw = floats[-1] if floats else None
    worker = configs[0]
    return {
        "id": case["id"],
        "num_blocks": int(worker.num_blocks),
        "kv_tokens": tokens,
        "max_concurrency": conc,
        "max_concurrency_raw": conc_raw,
        "block_size": int(case["block_size"]),
        "kv_cache_dtype": vc.cache_config.cache_dtype,
        "bytes_per_block": _bytes_per_block(vc, worker),
        "groups": [group_summary(g) for g in worker.kv_cache_groups],
        "log": messages,
        "debug": {
            "layers_with_kv": len(specs),
            "draft_layers_with_kv": [name for name in draft_layers if name in specs],
            "backends": sorted(
                {
                    layer.get_attn_backend().get_name()
                    for layer in vc.compilation_config.static_forward_context.values()
                }
            ),
            "kv_cache_layout": getattr(vc.cache_config, "kv_cache_layout", None),
            "stand_in_misses": sorted(StandIn.misses),
            "executor_calls_ignored": ignored,
            "scheduler_block_size": int(vc.cache_config.block_size),
            "scheduler_groups": len(scheduler_config.kv_cache_groups),
        },
    }


def main() -> int:
    started = time.time()
    cases = json.load(sys.stdin)
    out_stream = sys.stdout
    sys.stdout = sys.stderr  # stray prints from vLLM must not corrupt the answer
    capture = _Capture()
    import vllm

    vllm_logger = logging.getLogger("vllm")
    vllm_logger.addHandler(capture)
    vllm_logger.setLevel(logging.DEBUG)
    from vllm.platforms import current_platform

    # Backends ask the platform for the GPU generation; answer as an H200 would.
    from vllm.platforms.interface import DeviceCapability

    cap = DeviceCapability(*DEVICE_CAPABILITY)
    type(current_platform).get_device_capability = classmethod(lambda cls, device_id=0: cap)
    import_s = time.time() - started

    planner = _optional("vllm.v1.core.kv_cache_planning") or _optional(
        "vllm.v1.core.kv_cache_utils"
    )
    debug = {
        "vllm_file": vllm.__file__,
        "vllm_version": getattr(vllm, "__version__", None),
        "planner_file": getattr(planner, "__file__", None),
        "python": sys.version.split()[0],
        "platform": type(current_platform).__name__,
        "device_capability": list(current_platform.get_device_capability()),
        "import_s": round(import_s, 1),
    }
    results = []
    for case in cases:
        try:
            result = run_case(case, capture)
        except Exception as exc:  # one bad case must not stop the others
            tail = traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:]
            result = {"id": case.get("id"), "error": f"{type(exc).__name__}: {exc}"}
            result["traceback"] = "".join(tail)
        results.append(result)
    debug["total_s"] = round(time.time() - started, 1)
    # Every result names the vLLM that produced it, so a silent fallback shows.
    for result in results:
        result["vllm_file"] = debug["vllm_file"]
        result["vllm_version"] = debug["vllm_version"]
        result.setdefault("debug", {})["run"] = debug
    json.dump(results, out_stream)
    out_stream.write("\n")
    out_stream.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
