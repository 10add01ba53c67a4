"""Tiny random Hugging Face models written with save_pretrained, for the transformers and
tensor-parallel tests (imported by test_transformers.py, test_tp_slices.py and
test_vllm_example.py, as sl_fixtures is by test_api.py).

Nothing is downloaded: each model is built from a small config with random weights
(torch.manual_seed) and saved as several safetensors shards plus an index, as real
repositories are. The vocabulary (1000) is not a multiple of 64, so every layout pads it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ARCHS = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")

# Small enough that the whole model is ~1 MB, large enough for several shards at 100 KB each.
BASE: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
                        "max_position_embeddings": 128, "rms_norm_eps": 1e-6}
MAX_SHARD_SIZE = "100KB"


def config_class(arch: str) -> Any:
    return getattr(transformers, arch.replace("ForCausalLM", "Config"))


def make_config(arch: str, *, dtype: Any = None, tied: bool = False, **overrides: Any) -> Any:
    dtype = dtype or torch.float32
    kw = dict(BASE, **overrides)
    kw["tie_word_embeddings"] = tied
    cfg = config_class(arch)(**kw)
    cfg.dtype = dtype
    cfg._attn_implementation = "eager"  # the same kernel in every model the tests compare
    return cfg


def build_model(arch: str, cfg: Any, seed: int) -> Any:
    """A random `arch` of cfg (weights from seed), in cfg's dtype, in eval mode.

    Built in its dtype as from_pretrained builds it, not cast afterwards: `.to(bf16)` would also
    cast the rotary inv_freq buffers, which from_pretrained keeps in float32.
    """
    torch.manual_seed(seed)
    m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=cfg.dtype,
                                                      attn_implementation="eager")
    assert type(m).__name__ == arch and m.dtype == cfg.dtype
    return m.eval()


def save_tiny(out: Path, arch: str, *, dtype: Any = None, tied: bool = False, seed: int = 0,
              **overrides: Any) -> tuple[Path, Any]:
    """Builds a random tiny `arch` and writes it to out (several shards and an index).

    Returns (out, model): the model is the source of truth the tests compare against.
    """
    cfg = make_config(arch, dtype=dtype, tied=tied, **overrides)
    model = build_model(arch, cfg, seed)
    model.save_pretrained(out, safe_serialization=True, max_shard_size=MAX_SHARD_SIZE)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) >= 3, "expected several shards"
    return out, model


def config_dtype(ckpt: Path) -> Any:
    """The torch dtype config.json records: transformers 5 writes "dtype", 4.x "torch_dtype"."""
    cfg = json.loads((ckpt / "config.json").read_text())
    return getattr(torch, cfg.get("torch_dtype") or cfg["dtype"])
