"""Dummy weights equal vLLM's on the CPU bit for bit (docs/engine.md "Dummy weights"): every
parameter of every device is what `param.uniform_(-1e-3, 1e-3, generator=g)` gives a CPU tensor of
the device's shape, with g = torch.Generator().manual_seed(seed) made anew for each parameter
(vLLM's initialize_dummy_weights), except vocab padding rows, which stay zero (SHARDING.md)."""
from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest

import shardload

torch = pytest.importorskip("torch")

# torch's x86 DEFAULT kernel (ATEN_CPU_CAPABILITY=default, or a CPU without AVX2) computes
# x * (to - from) + from with two roundings; its AVX2 and AVX512 kernels, what shardload follows,
# with one FMA.
pytestmark = pytest.mark.skipif(
    platform.machine() in ("x86_64", "AMD64") and torch.backends.cpu.get_cpu_capability() == "DEFAULT",
    reason="torch runs its DEFAULT (no FMA) CPU kernel")

VOCAB = 4099   # padded to 4160 rows (a multiple of 64), 2080 per rank at TP 2
DENSE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 320,
         "intermediate_size": 1000, "num_attention_heads": 6, "num_key_value_heads": 2,
         "head_dim": 64, "num_hidden_layers": 1, "vocab_size": VOCAB, "tie_word_embeddings": False,
         "torch_dtype": "bfloat16", "rms_norm_eps": 1e-05}
MOE = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 32,
       "intermediate_size": 72, "num_attention_heads": 8, "num_key_value_heads": 2,
       "num_hidden_layers": 1, "vocab_size": 100, "tie_word_embeddings": False,
       "num_local_experts": 3, "num_experts_per_tok": 2, "torch_dtype": "bfloat16"}
VOCAB_PARAMS = ("model.embed_tokens.weight", "lm_head.weight")
BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def torch_dummy(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.empty(shape, dtype=dtype).uniform_(-1e-3, 1e-3, generator=g)


def real_rows(cfg: dict, name: str, rows: int, rank: int) -> int:
    """Rows of rank's vocab shard that hold tokens; the rest is padding."""
    if name not in VOCAB_PARAMS:
        return rows
    return max(0, min(rows, cfg["vocab_size"] - rank * rows))


def check_model(cfg: dict, tmp_path: Path, tp: int, dtype: str, seed: int, threads: int) -> int:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = shardload.load(config=path, dummy=True, tp=tp, dtype=dtype, seed=seed, threads=threads)
    checked = 0
    for d in range(tp):
        for name, got in m.torch(d).items():
            want = torch_dummy(tuple(got.shape), got.dtype, seed)
            n = real_rows(cfg, name, got.shape[0], m.plan.devices[d].tp_rank)
            want[n:] = 0
            bits = BITS[got.dtype]
            diff = (got.view(bits) != want.view(bits)).sum().item()
            assert diff == 0, (f"device {d} {name} {tuple(got.shape)} {dtype} seed {seed}: "
                               f"{diff} of {got.numel()} elements differ from torch")
            checked += got.numel()
    return checked


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("tp", [1, 2])
def test_dense_equals_torch_uniform(tmp_path: Path, dtype: str, tp: int) -> None:
    # embed_tokens and lm_head at TP 1 are 4160 x 320 (1,331,200 elements, padded), gate_up_proj
    # 2000 x 320, down_proj 320 x 1000, the norms 320; at TP 2 odd shards such as 500 columns
    assert check_model(DENSE, tmp_path, tp, dtype, 1234, 0) > 2_000_000


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_moe_3d_params_equal_torch_uniform(tmp_path: Path, dtype: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MOE))
    shapes = [p.shape for p in shardload.plan(config=path, dtype=dtype).devices[0].params]
    assert (3, 144, 32) in shapes   # w13_weight [experts, 2 * intermediate, hidden]
    check_model(MOE, tmp_path, 1, dtype, 1234, 0)


@pytest.mark.parametrize("seed,threads", [(7, 1), (2**32 + 7, 3), (0, 2)])
def test_seed_is_manual_seed(tmp_path: Path, seed: int, threads: int) -> None:
    # torch's MT19937 takes the seed's low 32 bits, as shardload does; any thread count
    check_model(DENSE, tmp_path, 2, "bf16", seed, threads)


def test_first_values_are_pinned() -> None:
    # what tests/test_load.c pins for seed 1234, and torch 2.13 gives
    got = torch_dummy((4,), torch.bfloat16, 1234).view(torch.int16).tolist()
    assert [v & 0xFFFF for v in got] == [0xBA77, 0xB94E, 0xB9FC, 0xB98C]
