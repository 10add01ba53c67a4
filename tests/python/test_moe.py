"""Mixture-of-experts through the Python API (issue 16, SHARDING-MOE-FP8.md): plan(ep=True) gives
the spec's worked shapes from the real Mixtral-8x7B config, and load(ep=True, devices=[r]) gives
each rank exactly the arrays the independent numpy oracle (tests/oracle_shards.py) cuts from the
checkpoint it wrote itself, reading less than the whole mesh."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

import shardload
from sl_fixtures import CONFIGS

import oracle_shards


def test_plan_ep_worked_figures() -> None:
    p = shardload.plan(config=CONFIGS / "mixtral-8x7b.json", tp=2, ep=True)
    shapes = {q.name: q.shape for q in p.devices[0].params}
    assert shapes["model.layers.0.block_sparse_moe.experts.w13_weight"] == (4, 28672, 4096)
    assert shapes["model.layers.0.block_sparse_moe.experts.w2_weight"] == (4, 4096, 14336)
    flat = shardload.plan(config=CONFIGS / "mixtral-8x7b.json", tp=2)
    assert {q.name: q.shape for q in flat.devices[0].params}[
        "model.layers.0.block_sparse_moe.experts.w13_weight"] == (8, 14336, 4096)
    assert p.ep and not flat.ep
    dense = shardload.plan(config=CONFIGS / "llama-3-8b.json", tp=2, ep=True)
    assert not dense.ep   # ep changes no byte of a dense model: the plan is one without it
    assert not shardload.plan(config=CONFIGS / "mixtral-8x7b.json", tp=1, ep=True).ep   # nor at tp 1
    with pytest.raises(TypeError, match="ep must be a bool"):
        shardload.plan(config=CONFIGS / "mixtral-8x7b.json", tp=2, ep=1)  # type: ignore[arg-type]


def _moe_checkpoint(tmp_path: Path, arch: str, seed: int, layout_seed: int) -> tuple[dict, Path, dict]:
    """The oracle's BF16 checkpoint of a small MoE architecture in tmp_path/arch, two files:
    its config, folder and tensors."""
    cfg = dict(oracle_shards.MOE_ARCHS[arch], torch_dtype="bfloat16")
    ck_dir = tmp_path / arch
    ck_dir.mkdir()
    (ck_dir / "config.json").write_text(json.dumps(cfg))
    ck = oracle_shards.checkpoint_tensors(arch, cfg, "BF16", np.random.default_rng(seed))
    oracle_shards.write_checkpoint(str(ck_dir), ck, 2, random.Random(layout_seed))
    return cfg, ck_dir, ck


@pytest.mark.parametrize("arch", ["qwen2_moe", "mixtral"])
def test_load_ep_ranks_are_the_oracle(tmp_path: Path, arch: str) -> None:
    cfg, ck_dir, ck = _moe_checkpoint(tmp_path, arch, 5, 3)
    T = 4   # E = 5 (qwen2_moe) and 6 (mixtral): uneven ranges
    whole = shardload.load(ck_dir, tp=T, ep=True).stats["bytes_read"]
    for r in range(T):
        want = oracle_shards.expected_tp(arch, cfg, ck, T, 1, r, ep=True)
        m = shardload.load(ck_dir, tp=T, ep=True, devices=[r])
        got = m.numpy(r)
        assert set(got) == set(want)
        for name, w in want.items():
            assert got[name].shape == w.shape, name
            assert np.array_equal(got[name].view(np.uint16), w.view(np.uint16)), f"rank {r}: {name}"
        assert 0 < m.stats["bytes_read"] < whole


def test_reshard_ep_loads_back(tmp_path: Path) -> None:
    """reshard(ep=True) writes each rank's whole experts (the CLI's --ep): the rank files load
    back under EP with the checksums of the original's EP load, and write_manifest=True (the
    CLI's --write-manifest) writes the SHA256SUMS that load then verifies against."""
    arch = "mixtral"
    _, ck_dir, _ = _moe_checkpoint(tmp_path, arch, 7, 4)
    T, out = 4, tmp_path / "ep4"   # E = 6: uneven ranges
    shardload.reshard(ck_dir, out, tp=T, ep=True, write_manifest=True)
    with shardload.load(ck_dir, tp=T, ep=True) as want, \
            shardload.load(out, tp=T, ep=True, manifest=out / "SHA256SUMS") as got:
        assert got.stats["verified_files"] > 0
        for r in range(T):
            assert got.checksums(r) == want.checksums(r), f"rank {r}"
    with pytest.raises(TypeError, match="ep must be a bool"):
        shardload.reshard(ck_dir, tmp_path / "bad", tp=T, ep=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="write_manifest must be a bool"):
        shardload.reshard(ck_dir, tmp_path / "bad", tp=T, write_manifest=1)  # type: ignore[arg-type]


def test_plan_fp8_from_config() -> None:
    """DeepSeek-V3's config is block-FP8: weights F8_E4M3, their 128x128 block scales F32."""
    p = shardload.plan(config=CONFIGS / "deepseek-v3.json", tp=8, ep=True)
    params = {q.name: q for q in p.devices[0].params}
    w13 = params["model.layers.3.mlp.experts.w13_weight"]
    assert (w13.dtype, w13.shape, w13.nbytes) == ("F8_E4M3", (32, 4096, 7168), 32 * 4096 * 7168)
    s = params["model.layers.3.mlp.experts.w13_weight_scale_inv"]
    assert (s.dtype, s.shape) == ("F32", (32, 32, 56))
    assert params["model.layers.3.mlp.gate.weight"].dtype == "BF16"
    assert p.devices[0].bytes == sum(q.nbytes for q in p.devices[0].params)


@pytest.mark.parametrize("name", ["mixtral-ct", "qwen3_moe-ct"])
def test_load_fp8_scales_are_the_oracle(tmp_path: Path, name: str) -> None:
    """Per-tensor (compressed-tensors, static input scales: w13_weight_scale [El, 2], the input
    scales [El]) and per-channel ([El, 2*Ip, 1]) FP8 MoE checkpoints: each rank's arrays under EP
    are the oracle's byte for byte, FP8 weights as float8_e4m3fn and scales as float32."""
    key = next(k for k in oracle_shards.FP8_MORE if k[0] == name)
    arch = key[1]
    cfg = dict(oracle_shards.FP8_MORE[key], torch_dtype="bfloat16")
    ck_dir = tmp_path / name
    ck_dir.mkdir()
    (ck_dir / "config.json").write_text(json.dumps(cfg))
    ck = oracle_shards.checkpoint_tensors(arch, cfg, "BF16", np.random.default_rng(9),
                                          oracle_shards.FP8_MORE_SCALE_DT[name])
    oracle_shards.write_checkpoint(str(ck_dir), ck, 2, random.Random(4))
    T = 4
    for r in range(T):
        want = oracle_shards.expected_tp(arch, cfg, ck, T, 1, r, ep=True)
        got = shardload.load(ck_dir, tp=T, ep=True, devices=[r]).numpy(r)
        assert set(got) == set(want)
        for pname, w in want.items():
            g = got[pname]
            assert g.shape == w.shape, pname
            assert str(g.dtype) == {np.uint8: "float8_e4m3fn", np.float32: "float32"}.get(w.dtype.type, "bfloat16")
            assert g.tobytes() == np.ascontiguousarray(w).tobytes(), f"rank {r}: {pname}"
