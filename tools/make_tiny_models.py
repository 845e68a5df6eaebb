"""Build tiny random-weight models that the vLLM CPU build can serve, without the hub.

Run it with the vLLM venv's interpreter (it needs torch, transformers and tokenizers):

    $VLLM_VENV/bin/python tools/make_tiny_models.py [OUT_DIR] [--models NAME ...]

Each model gets its own folder (config, bf16 safetensors, a locally trained byte-level BPE
tokenizer, a chat template). A fixed seed makes the weights reproducible. A folder that is
already complete for the same spec is left alone, so the cache can be shared by test runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path(os.environ.get("VFLEET_CACHE", "/var/cache/vfleet")) / "tiny-models"
VOCAB_SIZE = 1024
SEED = 1234
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
# Bump when the recipe changes so cached folders are rebuilt.
GENERATOR_VERSION = 1
COMPLETE_MARKER = ".complete"
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant: {% endif %}"
)

# Shapes are chosen for the CPU kernels: attention head size 32 (a multiple of 32), and for
# MLA the one latent width the CPU kernel takes (kv_lora_rank 512 + rope 64 = 576).
MODEL_SPECS: dict[str, dict[str, Any]] = {
    "tiny-llama": {
        "config_class": "LlamaConfig",
        "hidden_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "intermediate_size": 256,
    },
    "tiny-dsv3": {
        "config_class": "DeepseekV3Config",
        "hidden_size": 64,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 128,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 32,
        "v_head_dim": 32,
        "q_lora_rank": 32,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "moe_intermediate_size": 64,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
        # vLLM only creates e_score_correction_bias (which the checkpoint has) for noaux_tc.
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
    },
    "tiny-qwen3moe": {
        "config_class": "Qwen3MoeConfig",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "intermediate_size": 128,
        "moe_intermediate_size": 64,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    },
}
EXPECTED_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)


def log(msg: str) -> None:
    print(f"[make_tiny_models] {msg}", flush=True)


def spec_digest(name: str) -> str:
    """Identify what a folder was built from; a cached folder must match it exactly."""
    blob = json.dumps(
        {"gen": GENERATOR_VERSION, "seed": SEED, "vocab": VOCAB_SIZE, "spec": MODEL_SPECS[name]},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def is_complete(folder: Path, name: str) -> bool:
    marker = folder / COMPLETE_MARKER
    if not marker.is_file() or marker.read_text().strip() != spec_digest(name):
        return False
    return all((folder / f).is_file() for f in EXPECTED_FILES)


def corpus_files(limit_bytes: int = 4_000_000) -> list[str]:
    """Python standard library sources: always on disk, and in a stable order."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files: list[str] = []
    total = 0
    for path in sorted(stdlib.glob("*.py")):
        files.append(str(path))
        total += path.stat().st_size
        if total >= limit_bytes:
            break
    if not files:
        raise SystemExit(f"no .py files under {stdlib} to train the tokenizer on")
    return files


def train_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(corpus_files(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(name: str, folder: Path, tokenizer: Any) -> None:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.utils.logging.disable_progress_bar()

    spec = dict(MODEL_SPECS[name])
    config_class: Callable[..., Any] = getattr(transformers, spec.pop("config_class"))
    config = config_class(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        **spec,
    )
    # Keys that the config class does not know must still reach config.json, since vLLM
    # reads them from there (topk_method, head_dim for Qwen3-MoE).
    for key, value in spec.items():
        if getattr(config, key, None) != value:
            setattr(config, key, value)
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config)
    model = model.to(torch.bfloat16)
    model.config.dtype = "bfloat16"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    missing = {k: v for k, v in spec.items() if saved.get(k) != v}
    if missing:
        # Some keys are dropped on save by transformers 5; write them back explicitly.
        saved.update(missing)
        (folder / "config.json").write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    if not (folder / "chat_template.jinja").is_file():
        (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    # mkdtemp and safetensors create owner-only modes; the cache is shared and read-only use.
    folder.chmod(0o755)
    for path in folder.iterdir():
        path.chmod(0o644)
    params = sum(p.numel() for p in model.parameters())
    log(f"{name}: {params / 1e6:.2f} M params")


def make(out_dir: Path, names: list[str]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = [n for n in names if not is_complete(out_dir / n, n)]
    for n in names:
        if n not in todo:
            log(f"{n}: cached in {out_dir / n}")
    if not todo:
        return [out_dir / n for n in names]
    started = time.monotonic()
    tokenizer = train_tokenizer()
    for name in todo:
        final = out_dir / name
        # Build in a sibling temp folder and rename, so a crash never leaves a half folder
        # that looks complete, and concurrent builders do not mix files.
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out_dir))
        try:
            build_model(name, tmp, tokenizer)
            (tmp / COMPLETE_MARKER).write_text(spec_digest(name) + "\n")
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log(f"{name}: written to {final}")
    log(f"built {len(todo)} model(s) in {time.monotonic() - started:.1f} s")
    return [out_dir / n for n in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--models", nargs="+", choices=sorted(MODEL_SPECS), default=list(MODEL_SPECS)
    )
    args = parser.parse_args(argv)
    make(args.out_dir, args.models)
    return 0


if __name__ == "__main__":
    sys.exit(main())
