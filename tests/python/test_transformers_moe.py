"""The mixture-of-experts and MLA families as transformers writes them: tiny random Mixtral,
Qwen2-MoE, Qwen3-MoE, DeepSeek-V2 and DeepSeek-V3 models saved by save_pretrained (several shards
and an index, the config.json transformers 5 writes), loaded by the CLI in vLLM's layout (with and
without --ep, with pipeline stages) and in spmd, every device's every parameter checked against the
numpy oracle of the same files.

What this catches that the oracle's own checkpoints cannot: the names, dtypes and config keys of
today's transformers. Its Qwen3-MoE config says num_local_experts, not num_experts; its DeepSeek-V3
config has no topk_method, yet the router has an e_score_correction_bias (F32, as is its router
weight in a bf16 model)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hf_tiny import torch, transformers
from sl_fixtures import cli  # noqa: F401  (a fixture; also puts tests/ on the path)
import oracle_shards as oracle  # noqa: E402

COMMON: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
                          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 320,
                          "max_position_embeddings": 128, "tie_word_embeddings": False}
MOE = {"num_experts_per_tok": 2, "moe_intermediate_size": 32}
MLA = dict(MOE, n_routed_experts=5, n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=32,
           qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_group=1, topk_group=1)
# architecture -> (the oracle's name, config overrides)
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "MixtralForCausalLM": ("mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2}),
    "Qwen2MoeForCausalLM": ("qwen2_moe", dict(MOE, num_experts=4, decoder_sparse_step=1,
                                              shared_expert_intermediate_size=64)),
    "Qwen3MoeForCausalLM": ("qwen3_moe", dict(MOE, num_experts=6, decoder_sparse_step=1,
                                              head_dim=32)),
    "DeepseekV3ForCausalLM": ("deepseek_v3", dict(MLA, q_lora_rank=48)),
    "DeepseekV2ForCausalLM": ("deepseek_v2", dict(MLA, q_lora_rank=None)),
}
# (layout, T, P, ep, target dtype)
MESHES = [("tp", 2, 1, False, "bf16"), ("tp", 2, 1, True, "bf16"), ("tp", 2, 2, False, "f32"),
          ("tp", 4, 1, True, "bf16"), ("spmd", 2, 1, False, "bf16")]
SRC = {np.dtype(np.uint16): "BF16", np.dtype(np.float16): "F16", np.dtype(np.float32): "F32"}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def saved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[str, Path, dict[str, Any], dict[str, Any]]:
    arch = request.param
    name, over = FAMILIES[arch]
    cfg = getattr(transformers, arch.replace("ForCausalLM", "Config"))(**dict(COMMON, **over))
    torch.manual_seed(3)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    assert type(model).__name__ == arch
    out = tmp_path_factory.mktemp(name) / "ckpt"
    model.save_pretrained(out, max_shard_size="150KB")
    files = sorted(out.glob("*.safetensors"))
    assert len(files) >= 3 and (out / "model.safetensors.index.json").exists()
    ck: dict[str, Any] = {}
    for f in files:
        ck.update(oracle.read_safetensors(str(f)))
    return name, out, json.loads((out / "config.json").read_text()), ck


def test_what_transformers_writes(saved: tuple[str, Path, dict[str, Any], dict[str, Any]]) -> None:
    """The config keys and tensors this file exists for are still what transformers writes."""
    name, _, cfg, ck = saved
    if name == "qwen3_moe":
        assert oracle.n_experts(cfg, "num_experts", "num_local_experts") == 6
    if name == "deepseek_v3":
        bias = [k for k in ck if k.endswith("mlp.gate.e_score_correction_bias")]
        assert bias and all(ck[k][0] == "F32" for k in bias)
        if "topk_method" not in cfg:  # transformers 5: the bias with no topk_method to say so
            assert len(bias) == 2


@pytest.mark.parametrize("layout,T,P,ep,dst", MESHES,
                         ids=[f"{m[0]}-T{m[1]}-P{m[2]}{'-ep' if m[3] else ''}-{m[4]}" for m in MESHES])
def test_every_parameter_equals_the_oracle(saved: tuple[str, Path, dict[str, Any], dict[str, Any]],
                                           cli: str, layout: str, T: int, P: int, ep: bool,
                                           dst: str) -> None:
    name, path, cfg, ck = saved
    args = ["--tp", str(T), "--pp", str(P), "--layout", layout, "--dtype", dst]
    rep = oracle.run_load(cli, str(path), args + (["--ep"] if ep else []))
    assert len(rep["devices"]) == T * P
    for dev in rep["devices"]:
        d = dev["index"]
        exp = (oracle.expected_tp(name, cfg, ck, T, P, d, ep) if layout == "tp"
               else oracle.expected_spmd(name, cfg, ck, T, d))
        got = {p["name"]: p["xxh3"] for p in dev["params"]}
        assert set(got) == set(exp), (d, sorted(set(exp) ^ set(got))[:6])
        nbytes = 0
        for pname, arr in exp.items():
            # each from its own dtype (transformers keeps DeepSeek's router F32), to the target;
            # the F32 correction bias stays F32 (SHARDING-MOE-FP8.md)
            src = SRC[arr.dtype]
            to = "F32" if pname.endswith("e_score_correction_bias") else dst.upper()
            want = oracle.convert(arr, src, to) if src != "F32" else _from_f32(arr, to)
            nbytes += want.nbytes
            assert got[pname] == oracle.xxh3(want), (d, pname)
        assert dev["allocated_bytes"] == nbytes, d


def _from_f32(arr: np.ndarray, to: str) -> np.ndarray:
    """oracle.convert passes F32 arrays through unless told their source is F32 (FP8 scales)."""
    return oracle.convert(arr, "F32", to)


def test_jax_load_keeps_each_dtype(saved: tuple[str, Path, dict[str, Any], dict[str, Any]]) -> None:
    """shardload.jax.load with no dtype: every array in its checkpoint dtype (DeepSeek's F32
    router next to bf16 weights), every shard the checkpoint's bytes at its index."""
    jax = pytest.importorskip("jax")
    if jax.device_count() < 4:
        pytest.skip("needs 4 JAX devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    import shardload.jax as sj
    from jax.sharding import Mesh
    name, path, _, ck = saved
    arrays = sj.load(path, Mesh(np.array(jax.devices()[:4]), ("model",)))
    assert arrays
    for k, a in arrays.items():
        src, w = ck[k]
        assert np.dtype(a.dtype).itemsize == w.itemsize and (src == "F32") == (a.dtype == np.float32), k
        for s in a.addressable_shards:
            assert np.array_equal(np.asarray(s.data).view(np.uint8),
                                  np.ascontiguousarray(w[s.index]).view(np.uint8)), (k, s.index)
    if name.startswith("deepseek"):
        assert {str(a.dtype) for a in arrays.values()} == {"bfloat16", "float32"}
