"""Fixtures shared by the Python package's tests (each test file imports them): a small
checkpoint made by shardload.synth, and the CLI and CUDA stand-in where the build has them."""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
CONFIGS = TESTS / "configs"
sys.path.insert(0, str(TESTS))  # oracle_shards: the independent numpy reference

# A 2-layer Llama whose vocabulary (1001) no TP degree divides, so every split pads.
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
        "intermediate_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 1001, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "rms_norm_eps": 1e-05, "head_dim": 32}


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(json.dumps(cfg))
    return path


@pytest.fixture(scope="session")
def tiny_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("cfg") / "config.json", TINY)


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory: pytest.TempPathFactory, tiny_config: Path) -> Path:
    """A synthetic 4-shard checkpoint with an index (random bf16 values, seed 1234)."""
    import shardload
    out = tmp_path_factory.mktemp("ckpt") / "tiny"
    shardload.synth(tiny_config, out, max_shard_size=1 << 20)
    return out


@pytest.fixture()
def ckpt_copy(tiny_ckpt: Path, tmp_path: Path) -> Path:
    """A private copy to damage."""
    dst = tmp_path / "copy"
    shutil.copytree(tiny_ckpt, dst)
    return dst


@pytest.fixture(scope="session")
def cli() -> str:
    """The CLI of the same build (SL_CLI, set by `make test`), for cross-checks."""
    exe = os.environ.get("SL_CLI", "")
    if not exe or not os.access(exe, os.X_OK):
        pytest.skip("SL_CLI is not set to a built shardload CLI")
    return exe


@pytest.fixture(scope="session")
def fake_cudart() -> str:
    """The host-memory CUDA runtime stand-in of tests/fake_cudart.c (SL_FAKE_CUDART)."""
    lib = os.environ.get("SL_FAKE_CUDART", "")
    if not lib or not os.path.exists(lib):
        pytest.skip("SL_FAKE_CUDART is not set to the built stand-in")
    return lib


def misaligned(shape: tuple, dtype: object, nbytes: int) -> np.ndarray:
    """A host buffer 16 bytes off XLA's 64-byte alignment: a CPU device_put copies it (as a
    GPU or TPU transfer does) instead of adopting it."""
    raw = np.empty(nbytes + 128, np.uint8)
    off = -raw.ctypes.data % 64 + 16
    return raw[off:off + nbytes].view(dtype).reshape(shape)


def devices_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """shardload.jax's host buffers and slabs misaligned, and its loader told the devices copy:
    JAX's CPU devices then take the path of GPUs and TPUs (bounded groups, slabs, parts)."""
    import shardload.jax._loader as jl
    import shardload.jax._staging as jst
    monkeypatch.setattr(jst, "host_buffer", misaligned)
    monkeypatch.setattr(jst, "slab", lambda nbytes: misaligned((nbytes,), np.uint8, nbytes))
    monkeypatch.setattr(jl, "adopts", lambda devices: False)
