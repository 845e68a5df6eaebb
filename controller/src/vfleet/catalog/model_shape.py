"""A model's shape, normalised from a Hugging Face config.json.

Only the fields the budget needs are kept; everything else in the config is ignored. Missing
fields that the math cannot do without raise UserError naming the field. Every number read
is first checked for type and range, and the shape built from it is checked as vLLM checks
it on load (both in `config_checks`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vfleet.catalog.config_checks import (
    DTYPE_BYTES,
    check_config,
    check_semantics,
    norm_dtype,
    where_of,
)
from vfleet.errors import UserError
from vfleet.inputs.files import parse_json, read_text


@dataclass(frozen=True)
class VisionTower:
    """A multimodal encoder counted as one block of weights (replicated per rank in vLLM)."""

    params: int


@dataclass(frozen=True)
class ModelShape:
    name: str
    architecture: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    dtype: str
    max_position_embeddings: int
    gated_mlp: bool = True
    attention_bias: bool = False
    # Mixture of experts.
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    moe_layers: tuple[int, ...] = ()
    # Multi-head latent attention (DeepSeek V2/V3, Kimi-K2).
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek V3.2 lightning indexer.
    index_head_dim: int = 0
    index_n_heads: int = 0
    index_topk: int = 0
    # DeepSeek V4 hybrid attention: one ratio per decoder layer (0 = sliding window only).
    compress_ratios: tuple[int, ...] = ()
    o_lora_rank: int = 0
    o_groups: int = 0
    hc_mult: int = 0
    # Sliding-window layers (Gemma-2/3, gpt-oss, Mistral): indices of the windowed layers.
    sliding_window: int = 0
    sliding_layers: tuple[int, ...] = ()
    # Chunked local attention (Llama 4): the layers that attend within attention_chunk_size.
    attention_chunk_size: int = 0
    chunked_layers: tuple[int, ...] = ()
    num_mtp_layers: int = 0
    quantization: dict[str, Any] = field(default_factory=dict)
    vision: VisionTower | None = None

    # ---- derived shape facts -------------------------------------------------------------
    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_dsv4(self) -> bool:
        return bool(self.compress_ratios)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)

    def is_moe_layer(self, layer: int) -> bool:
        return layer in self.moe_layers


def _pick(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if cfg.get(name) is not None:
            return cfg[name]
    return default


def _need(cfg: dict[str, Any], model: str, *names: str) -> Any:
    value = _pick(cfg, *names)
    if value is None:
        raise UserError(
            f"model config {model} has no {names[0]}: add it to config.json "
            "(copy it from the model card) and retry"
        )
    return value


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs keep the language model under text_config / llm_config."""
    for key in ("text_config", "llm_config", "language_config"):
        sub = cfg.get(key)
        if isinstance(sub, dict) and sub.get("hidden_size"):
            merged = dict(sub)
            for inherit in ("quantization_config", "torch_dtype", "tie_word_embeddings"):
                if inherit not in merged and inherit in cfg:
                    merged[inherit] = cfg[inherit]
            return merged
    return cfg


def _vision_tower(cfg: dict[str, Any]) -> VisionTower | None:
    """Rough parameter count of a ViT encoder plus projector; exact enough for a few GiB."""
    vc = cfg.get("vision_config")
    if not isinstance(vc, dict):
        return None
    hidden = int(_pick(vc, "hidden_size", "embed_dim", "width", default=0) or 0)
    layers = int(_pick(vc, "num_hidden_layers", "depth", "layers", default=0) or 0)
    if not hidden or not layers:
        return None
    inter = int(_pick(vc, "intermediate_size", default=4 * hidden))
    mlp_mats = 3 if vc.get("hidden_act") in ("silu", "swiglu") else 2
    per_layer = 4 * hidden * hidden + mlp_mats * hidden * inter
    patch = int(_pick(vc, "patch_size", default=14))
    channels = int(_pick(vc, "num_channels", "in_channels", default=3))
    text_hidden = int(_text_config(cfg).get("hidden_size", hidden))
    projector = hidden * text_hidden + text_hidden * text_hidden
    return VisionTower(params=layers * per_layer + patch * patch * channels * hidden + projector)


def _moe_layers(cfg: dict[str, Any], num_layers: int, num_experts: int) -> tuple[int, ...]:
    if not num_experts:
        return ()
    first_dense = int(_pick(cfg, "first_k_dense_replace", default=0))
    freq = int(_pick(cfg, "moe_layer_freq", "decoder_sparse_step", default=1) or 1)
    mlp_only = set(cfg.get("mlp_only_layers") or [])
    step = int(cfg.get("interleave_moe_layer_step") or 1)
    layers = []
    for i in range(num_layers):
        if i < first_dense or i in mlp_only:
            continue
        if (i + 1) % freq and freq > 1:
            continue
        if step > 1 and (i + 1) % step:
            continue
        layers.append(i)
    return tuple(layers)


def _sliding_layers(cfg: dict[str, Any], model_type: str, num_layers: int) -> tuple[int, ...]:
    window = cfg.get("sliding_window")
    if not window:
        return ()
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        return tuple(i for i, t in enumerate(layer_types) if "sliding" in str(t))
    if model_type == "gemma2":
        return tuple(range(0, num_layers, 2))  # even layers are local
    if model_type in ("gemma3", "gemma3_text"):
        pattern = int(cfg.get("sliding_window_pattern") or 6)
        return tuple(i for i in range(num_layers) if (i + 1) % pattern)
    if model_type in ("mistral", "mixtral") and cfg.get("use_sliding_window", True):
        return tuple(range(num_layers))
    if cfg.get("use_sliding_window"):
        first_full = int(cfg.get("max_window_layers") or num_layers)
        return tuple(i for i in range(num_layers) if i >= first_full)
    return ()


def _chunked_layers(cfg: dict[str, Any], num_layers: int) -> tuple[int, ...]:
    """Llama 4: RoPE layers use chunked local attention, NoPE layers (no_rope_layers[i] == 0,
    by default every fourth) attend globally (vLLM llama4.py)."""
    if not cfg.get("attention_chunk_size"):
        return ()
    flags = cfg.get("no_rope_layers")
    if not isinstance(flags, list) or len(flags) < num_layers:
        interval = int(cfg.get("no_rope_layer_interval") or 4)
        flags = [int((i + 1) % interval != 0) for i in range(num_layers)]
    return tuple(i for i in range(num_layers) if flags[i])


def spec_from_config(raw: dict[str, Any], name: str = "model") -> ModelShape:
    """Build a ModelShape from a parsed config.json dictionary."""
    if not isinstance(raw, dict):
        raise UserError(f"model config {name} is not a JSON object: pass a Hugging Face config")
    check_config(raw, name)
    cfg = _text_config(raw)
    arch_list = raw.get("architectures") or cfg.get("architectures") or ["unknown"]
    architecture = str(arch_list[0])
    model_type = str(cfg.get("model_type") or raw.get("model_type") or "unknown")

    hidden = int(_need(cfg, name, "hidden_size", "n_embd", "d_model"))
    layers = int(_need(cfg, name, "num_hidden_layers", "n_layer", "num_layers"))
    heads = int(_need(cfg, name, "num_attention_heads", "n_head"))
    kv_heads = int(_pick(cfg, "num_key_value_heads", "n_head_kv", "num_kv_heads", default=heads))
    head_dim = int(_pick(cfg, "head_dim", default=0) or hidden // heads)
    vocab = int(_need(cfg, name, "vocab_size"))

    num_experts = int(
        _pick(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=0) or 0
    )
    moe_inter = int(_pick(cfg, "moe_intermediate_size", default=0) or 0)
    inter = int(_pick(cfg, "intermediate_size", "n_inner", default=0) or 0)
    if num_experts and not moe_inter:
        moe_inter = inter  # Mixtral / gpt-oss name the expert width intermediate_size
    if not inter:
        inter = 4 * hidden if not num_experts else moe_inter
    shared_count = int(_pick(cfg, "n_shared_experts", "num_shared_experts", default=0) or 0)
    shared_inter = int(cfg.get("shared_expert_intermediate_size") or 0)
    if model_type.startswith("llama4") and num_experts:
        # Llama 4: every MoE layer adds one shared expert as wide as a routed one; dense
        # layers use intermediate_size_mlp.
        shared_inter = moe_inter
        inter = int(cfg.get("intermediate_size_mlp") or inter)
    if shared_count and not shared_inter:
        shared_inter = shared_count * moe_inter

    compress = cfg.get("compress_ratios")
    if not compress and cfg.get("compress_rates") and cfg.get("layer_types"):
        rates = cfg["compress_rates"]
        compress = [int(rates.get(t, 0)) for t in cfg["layer_types"]]
    compress_ratios = tuple(int(r) for r in (compress or [])[:layers])

    quant = raw.get("quantization_config") or cfg.get("quantization_config") or {}
    # GPT-2-style blocks (fc1/fc2, no gate): Phi-1/2, GPT-NeoX, GPT-J, Falcon.
    is_phi = model_type in ("phi", "phi-msft", "gpt2", "gpt_neox", "gptj", "falcon")

    spec = ModelShape(
        name=name,
        architecture=architecture,
        model_type=model_type,
        hidden_size=hidden,
        num_layers=layers,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=vocab,
        tie_word_embeddings=bool(
            _pick(cfg, "tie_word_embeddings", default=model_type.startswith("gemma"))
        ),
        dtype=norm_dtype(
            _pick(cfg, "torch_dtype", "dtype", default=raw.get("torch_dtype")), where_of(name)
        ),
        max_position_embeddings=int(
            _pick(
                cfg, "max_position_embeddings", "n_positions", "max_sequence_length", default=4096
            )
        ),
        gated_mlp=not is_phi,
        attention_bias=bool(cfg.get("attention_bias") or model_type.startswith("qwen2")),
        num_experts=num_experts,
        experts_per_token=int(_pick(cfg, "num_experts_per_tok", "experts_per_token", default=0)),
        moe_intermediate_size=moe_inter,
        num_shared_experts=shared_count or (1 if shared_inter else 0),
        shared_expert_intermediate_size=shared_inter,
        moe_layers=_moe_layers(cfg, layers, num_experts),
        kv_lora_rank=int(cfg.get("kv_lora_rank") or 0),
        q_lora_rank=int(cfg.get("q_lora_rank") or 0),
        qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0),
        qk_nope_head_dim=int(cfg.get("qk_nope_head_dim") or 0),
        v_head_dim=int(cfg.get("v_head_dim") or 0),
        index_head_dim=int(cfg.get("index_head_dim") or 0),
        index_n_heads=int(cfg.get("index_n_heads") or 0),
        index_topk=int(cfg.get("index_topk") or 0),
        compress_ratios=compress_ratios,
        o_lora_rank=int(cfg.get("o_lora_rank") or 0),
        o_groups=int(cfg.get("o_groups") or 0),
        hc_mult=int(cfg.get("hc_mult") or 0),
        sliding_window=int(cfg.get("sliding_window") or 0),
        sliding_layers=_sliding_layers(cfg, model_type, layers),
        attention_chunk_size=int(cfg.get("attention_chunk_size") or 0),
        chunked_layers=_chunked_layers(cfg, layers),
        num_mtp_layers=int(cfg.get("num_nextn_predict_layers") or 0),
        quantization=dict(quant),
        vision=_vision_tower(raw),
    )
    check_semantics(spec, cfg, where_of(name))
    return spec


def load_config_file(path: Path) -> dict[str, Any]:
    target = path / "config.json" if path.is_dir() else path
    if not target.exists():
        raise UserError(f"no config.json at {path}: pass a model folder or a config.json file")
    data = parse_json(read_text(target, "model config"), str(target)).data
    if not isinstance(data, dict):
        raise UserError(f"model config {target} is not a JSON object: pass a Hugging Face config")
    return data
