"""Speculative decoding: what a draft adds to each GPU, and how each vLLM release spells it.

Methods, as vLLM's SpeculativeConfig names them:
- mtp: the target's own multi-token-prediction layers (config num_nextn_predict_layers;
  DeepSeek V3/R1/V3.2/V4). vLLM builds each as one more decoder layer of the target's shape
  (model_executor/models/deepseek_mtp.py: enorm, hnorm, eh_proj over [embedding; hidden],
  the decoder block with its MoE, shared_head.norm and shared_head.head);
- eagle, eagle3: a separate draft head with its own config (a catalog id or a config path);
- ngram: prompt lookup; no weights and no KV.

Weights sit on the last pipeline stage, where vLLM runs the drafter, sharded like the
target's layers (the draft takes the target's TP size; EP only for a MoE draft,
SpeculativeConfig.create_draft_parallel_config). What the draft shares with the target
(v1/spec_decode/llm_base_proposer.py, 0.33): the embedding when PP is 1
(_maybe_share_embeddings; with PP > 1 the draft loads its own), and for MTP and EAGLE-1
the LM head (_maybe_share_lm_head). MTP's per-layer shared_head.head is shared only since
vLLM PR #34385 (Feb 2026); before, it stayed the checkpoint's own copy.

KV: the drafter's attention layers register in the same static forward context as the
target's (load_model takes every attention layer minus the target's as draft layers), so
they get KV cache like any other layer: one more row per token per draft layer.

Scheduler: a running request schedules 1 + num_speculative_tokens tokens per decode step
out of the max_num_batched_tokens budget (v1/core/sched/scheduler.py: num_tokens_with_spec
counts the spec tokens), so a step decodes at most max_num_batched_tokens // (1 + k)
sequences.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from vfleet.budget.params import Layout, TensorGroup, groups_bytes, layer_groups, padded_vocab
from vfleet.catalog.model_shape import ModelShape, load_config_file, spec_from_config
from vfleet.catalog.releases import parse_version
from vfleet.errors import UserError

if TYPE_CHECKING:
    from vfleet.budget.quant import WeightFormat
    from vfleet.catalog.gpus import Gpu

# The methods and the most drafted tokens vfleet models; the flags' model
# (vfleet.documents.requests.SpeculativeOptions) takes its choices and its range from these.
Method = Literal["mtp", "eagle", "eagle3", "ngram"]
METHODS: tuple[Method, ...] = get_args(Method)
MAX_TOKENS = 16
# vLLM PR #34385 made MTP's shared_head.head the target's LM head; the first recorded
# release after its merge (2026-02-11) is 0.17.1. Releases before keep a copy.
MTP_HEAD_SHARED_FROM = (0, 17, 0)
# First release whose window caches retain extra tokens for multi-module MTP (0.27.0 lacks it).
MULTI_MODULE_RETAINED_FROM = (0, 28, 0)


@dataclass(frozen=True)
class Speculative:
    method: str
    num_speculative_tokens: int
    draft_model: str | None = None
    draft_spec: ModelShape | None = None
    draft_vocab_size: int = 0  # EAGLE-3 heads predict over their own smaller vocabulary

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise UserError(
                f"--speculative-method {self.method!r} is not one of {', '.join(METHODS)}"
            )
        k = self.num_speculative_tokens
        if not isinstance(k, int) or not 1 <= k <= MAX_TOKENS:
            raise UserError(
                f"--num-speculative-tokens {k} must be a whole number from 1 to {MAX_TOKENS}"
            )
        if self.method in ("eagle", "eagle3") and self.draft_spec is None:
            raise UserError(
                f"--speculative-method {self.method} needs --draft-model (a catalog id or "
                "the draft head's config.json)"
            )
        if self.method in ("mtp", "ngram") and self.draft_model:
            raise UserError(
                f"--speculative-method {self.method} takes no --draft-model: drop it "
                "(mtp uses the model's own layers, ngram the prompt)"
            )

    def check(self, target: ModelShape, version: tuple[int, int, int] | None = None) -> None:
        """What depends on the target model, and on the release when given."""
        if self.method == "mtp" and not target.num_mtp_layers:
            raise UserError(
                f"{target.name} has no MTP layers (num_nextn_predict_layers is 0): use "
                "--speculative-method eagle, eagle3 or ngram"
            )
        if version is not None:
            vllm_method(self.method, target.model_type, version)

    def kv_layers(self, target: ModelShape) -> int:
        """Draft attention layers that take KV on the last stage."""
        if self.method == "mtp":
            return target.num_mtp_layers
        return self.draft_spec.num_layers if self.draft_spec is not None else 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "method": self.method,
            "num_speculative_tokens": self.num_speculative_tokens,
        }
        if self.draft_model:
            out["draft_model"] = self.draft_model
        return out


def load_draft(model: str) -> tuple[ModelShape, int]:
    """A draft head's spec and its draft vocabulary (0 when it predicts the full one)."""
    try:
        return _load_draft(model)
    except UserError as exc:
        raise UserError(f"--draft-model: {exc}") from None


def _load_draft(model: str) -> tuple[ModelShape, int]:
    from vfleet.catalog.models import catalog_entry, load_model

    path = Path(model).expanduser()
    if path.exists():
        raw = load_config_file(path)
        # Old EAGLE checkpoints nest the decoder config under "model".
        inner = raw.get("model") if isinstance(raw.get("model"), dict) else None
        cfg = inner if inner and not raw.get("hidden_size") else raw
        spec = spec_from_config(cfg, name=str(path))
    else:
        spec = load_model(model)
        raw = catalog_entry(spec.name)["config"]
    return spec, int(raw.get("draft_vocab_size") or 0)


def from_args(
    method: str | None, num_tokens: int | None, draft_model: str | None, target: ModelShape
) -> Speculative | None:
    """The three speculative flags as one choice, checked against the target; None when
    unset (vfleet.documents.requests.SpeculativeOptions.speculative calls this)."""
    if method is None:
        if num_tokens is not None or draft_model:
            raise UserError(
                "--num-speculative-tokens and --draft-model need --speculative-method "
                f"({', '.join(METHODS)})"
            )
        return None
    if num_tokens is None:
        if method != "mtp":
            raise UserError(f"--speculative-method {method} needs --num-speculative-tokens N")
        # vLLM defaults MTP's count to the model's n_predict (SpeculativeConfig).
        num_tokens = max(target.num_mtp_layers, 1)
    draft_spec, draft_vocab = (None, 0)
    if draft_model and method in ("eagle", "eagle3"):
        draft_spec, draft_vocab = load_draft(draft_model)
    sp = Speculative(method, num_tokens, draft_model, draft_spec, draft_vocab)
    sp.check(target)
    return sp


def check_fields(doc: dict[str, Any], where: str) -> None:
    """A plan's `speculative` object, checked without loading any model (render)."""
    method, tokens = doc.get("method"), doc.get("num_speculative_tokens")
    if method not in METHODS:
        raise UserError(
            f"{where}: speculative.method {method!r} is not one of {', '.join(METHODS)}"
        )
    if not isinstance(tokens, int) or not 1 <= tokens <= MAX_TOKENS:
        raise UserError(f"{where}: speculative.num_speculative_tokens must be 1 to {MAX_TOKENS}")
    if method in ("eagle", "eagle3") and not doc.get("draft_model"):
        raise UserError(f"{where}: speculative method {method} needs a draft_model")


# ---- weights ----------------------------------------------------------------------------


def draft_weight_bytes(
    sp: Speculative,
    target: ModelShape,
    fmt: WeightFormat,
    layout: Layout,
    version: tuple[int, int, int],
    gpu: Gpu | None = None,
) -> dict[str, float]:
    """Bytes the draft adds to one GPU of the last pipeline stage, as one component:
    "mtp" for the model's own layers, "draft" for an EAGLE head."""
    if sp.method == "mtp":
        return {"mtp": _mtp_bytes(target, fmt, layout, version)}
    if sp.draft_spec is None:
        return {}
    from vfleet.budget.quant import weight_format

    draft = sp.draft_spec
    dfmt = weight_format(
        draft.quantization, draft.model_type, draft.dtype_bytes, version=version, gpu=gpu
    )
    return {"draft": _eagle_bytes(sp, target, draft, dfmt, layout)}


def _vocab_rank_params(vocab: int, hidden: int, tp: int) -> float:
    """A VocabParallelEmbedding / ParallelLMHead on one rank: vocab padded to 64, split."""
    return -(-vocab // 64) * 64 / tp * hidden


def _mtp_bytes(
    target: ModelShape, fmt: WeightFormat, layout: Layout, version: tuple[int, int, int]
) -> float:
    h = target.hidden_size
    # Each MTP block is a decoder layer of the target's last layer's kind (MoE for V3).
    block = layer_groups(target, max(target.num_layers - 1, 0))
    per_layer = groups_bytes(block, target, fmt, layout)
    # eh_proj (2h -> h) is a plain replicated linear; enorm, hnorm, shared_head.norm.
    per_layer += (2 * h * h + 3 * h) * fmt.dtype_bytes
    if version < MTP_HEAD_SHARED_FROM:
        per_layer += padded_vocab(target) / layout.tp * h * fmt.bytes_per_param("lm_head")
    total = target.num_mtp_layers * per_layer
    if layout.pp > 1:  # the embedding is shared only when PP is 1
        total += padded_vocab(target) / layout.tp * h * fmt.bytes_per_param("embeddings")
    return float(total)


def _eagle_bytes(
    sp: Speculative, target: ModelShape, draft: ModelShape, dfmt: WeightFormat, layout: Layout
) -> float:
    h, n = draft.hidden_size, draft.num_layers
    groups: list[TensorGroup] = [g for i in range(n) for g in layer_groups(draft, i)]
    if sp.method == "eagle3":
        # EAGLE-3's layer attends over [embedding; hidden]: its q/k/v take 2h inputs
        # (llama_eagle3.py), and fc fuses three target hidden states into one.
        nh, nkv, hd = draft.num_attention_heads, draft.num_kv_heads, draft.head_dim
        groups += [
            TensorGroup("attention", h * nh * hd, "tp"),
            TensorGroup("attention", 2 * h * nkv * hd, "kv", kv_heads=nkv),
        ]
        fc, norms = 3 * target.hidden_size * h, 2 * h  # plus hidden_norm and norm
    else:
        # EAGLE-1 (llama_eagle.py): fc over [embedding; hidden], no final norm, and the
        # first layer's input_layernorm replaced by an identity.
        fc, norms = 2 * h * h, -h
    total = groups_bytes(groups, draft, dfmt, layout) + (fc + norms) * dfmt.dtype_bytes
    if sp.method == "eagle3":  # its own LM head over the draft vocabulary
        vocab = sp.draft_vocab_size or draft.vocab_size
        total += _vocab_rank_params(vocab, h, layout.tp) * dfmt.bytes_per_param("lm_head")
    if layout.pp > 1:
        total += _vocab_rank_params(draft.vocab_size, h, layout.tp) * dfmt.dtype_bytes
    return float(total)


# ---- KV -------------------------------------------------------------------------------


def stage_kv_args(
    sp: Speculative | None, target: ModelShape, kv_dtype: str, dtype_bytes: int, tp: int
) -> dict[str, Any]:
    """Keyword arguments for kv_layout.stage_layout on the last stage."""
    if sp is None or sp.method == "ngram":
        return {}
    if sp.method == "mtp":
        return {"mtp_layers": target.num_mtp_layers}
    from vfleet.budget.kv_layout import layer_row_bytes

    draft = sp.draft_spec
    assert draft is not None
    return {"draft_rows": (layer_row_bytes(draft, kv_dtype, dtype_bytes, tp),) * draft.num_layers}


def window_retained_tokens(
    sp: Speculative | None, target: ModelShape, version: tuple[int, int, int]
) -> int:
    """Tokens every sliding-window cache keeps beyond its window for this draft.

    With more than one MTP module drafting (SpeculativeConfig.use_multi_module_mtp: method
    mtp and min(num_nextn_predict_layers, k) > 1) a module re-prefills up to k - 1 trailing
    tokens, so from 0.28.0 get_kv_cache_configs tags every SlidingWindowSpec with
    extra_retained_tokens = k - 1 (0.28.0 v1/core/kv_cache_utils.py L2135-2147; 0.31 spells it
    num_prefill_lookahead_tokens - 1, 0.33.0 v1/core/kv_cache_planning.py L1634-1641), and
    max_admission_blocks_per_request adds it to the window (0.28.0 v1/kv_cache_interface.py
    L563-566). 0.27.0 has use_multi_module_mtp but no extra retention.
    """
    if sp is None or sp.method != "mtp" or version < MULTI_MODULE_RETAINED_FROM:
        return 0
    if min(target.num_mtp_layers, sp.num_speculative_tokens) <= 1:
        return 0
    return sp.num_speculative_tokens - 1


def decode_slots(sp: Speculative | None) -> int:
    """Tokens one decoding request takes from max_num_batched_tokens per step."""
    return 1 + (sp.num_speculative_tokens if sp else 0)


# ---- flags per release ----------------------------------------------------------------


@cache
def _methods() -> dict[str, dict[str, str]]:
    from vfleet.catalog.flag_registry import speculative_methods

    return speculative_methods()


def method_available(name: str, version: tuple[int, int, int]) -> bool:
    entry = _methods().get(name)
    if not entry:
        return False
    return parse_version(entry["first"]) <= version


def vllm_method(method: str, model_type: str, version: tuple[int, int, int]) -> str:
    """The `method` value this release's --speculative-config accepts for this choice."""
    label = ".".join(str(p) for p in version)
    if method == "mtp":
        if method_available("mtp", version):
            return "mtp"
        # Before the names were unified, DeepSeek's MTP was "deepseek_mtp".
        if model_type.startswith("deepseek") and method_available("deepseek_mtp", version):
            return "deepseek_mtp"
        first = _methods().get("mtp", {}).get("first", "?")
        raise UserError(
            f"vLLM {label} has no MTP speculative method for {model_type or 'this model'}: "
            f"target vLLM {first} or later, or drop the speculative method"
        )
    if not method_available(method, version):
        first_seen = _methods().get(method, {}).get("first")
        since = f"it first appears in {first_seen}" if first_seen else "no recorded release has it"
        raise UserError(
            f"vLLM {label} has no speculative method {method} ({since}): upgrade vLLM or "
            "choose another speculative method"
        )
    return method


def speculative_config(
    doc: dict[str, Any], model_type: str, version: tuple[int, int, int], draft_path: str | None
) -> str:
    """--speculative-config's JSON for this release, from a plan's `speculative` object."""
    conf: dict[str, Any] = {
        "method": vllm_method(doc["method"], model_type, version),
        "num_speculative_tokens": doc["num_speculative_tokens"],
    }
    if doc["method"] in ("eagle", "eagle3"):
        conf["model"] = draft_path or doc["draft_model"]
    return json.dumps(conf)
