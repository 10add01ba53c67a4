"""shardload.load and shardload.load_into against the numpy oracle on seeded random cases: a
model of the oracle's (dense, MoE, an F32 and an F16 source), target dtype, layout, T, P, EP,
the devices to load, staging, I/O mode and threads. Every loaded device's parameters, read
through Model.numpy and Model.torch (and load_into's own tensors), must equal the oracle's
bytes. The C engine's own random cases are tests/oracle_random.py (through the CLI); these
check what the Python layer adds: the devices subset, the views, the dtype of what it hands
out. SHARDLOAD_RANDOM_CASES=N runs N (default 60)."""
from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardload
import sl_fixtures  # noqa: F401  (puts tests/ on the path, for the oracle)
import oracle_shards as oracle

CASES = int(os.environ.get("SHARDLOAD_RANDOM_CASES", "60"))
MODELS = [("llama", "BF16"), ("qwen2", "F32"), ("mistral", "F16"), ("mixtral", "BF16"),
          ("qwen3_moe", "BF16")]
TARGETS = {"BF16": "bfloat16", "F32": "float32", "F16": "float16"}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict, dict]]:
    rng, shuffle = np.random.default_rng(5), random.Random(5)
    out = {}
    for arch, src in MODELS:
        cfg = dict(oracle.ARCHS.get(arch) or oracle.MOE_ARCHS[arch], torch_dtype="bfloat16")
        path = tmp_path_factory.mktemp(f"{arch}-{src}")
        (path / "config.json").write_text(json.dumps(cfg))
        ck = oracle.checkpoint_tensors(arch, cfg, src, rng)
        oracle.write_checkpoint(str(path), ck, 2, shuffle)
        out[f"{arch}-{src}"] = (path, cfg, ck)
    return out


def _bytes(a: Any) -> bytes:
    if not isinstance(a, np.ndarray):  # a torch tensor: its bytes through an integer view
        import torch
        a = a.contiguous().view(torch.uint8).numpy() if a.dtype != torch.uint8 else a.numpy()
    return np.ascontiguousarray(a).tobytes()


@pytest.mark.parametrize("seed", range(CASES))
def test_random_load(seed: int, models: dict[str, tuple[Path, dict, dict]]) -> None:
    r = random.Random(seed)
    key = r.choice(sorted(models))
    path, cfg, ck = models[key]
    arch, src = key.rsplit("-", 1)
    moe = arch in oracle.MOE_ARCHS
    layout = "spmd" if r.random() < 0.25 else "tp"
    T = r.choice([1, 2, 4] if moe else [1, 2, 4, 8])
    P = 1 if layout == "spmd" else r.choice([1, 2, 3])
    ep = layout == "tp" and moe and r.random() < 0.5
    target = r.choice(sorted(TARGETS))
    n = T * P
    devices = sorted(r.sample(range(n), r.randint(1, n))) if n > 1 and r.random() < 0.5 else None
    opts: dict[str, Any] = dict(io=r.choice(["auto", "direct", "buffered"]),
                                staging=r.choice([64 << 10, 1 << 20, 64 << 20]),
                                threads=r.choice([0, 1, 3]))
    case = dict(seed=seed, model=key, layout=layout, T=T, P=P, ep=ep, target=target,
                devices=devices, **opts)

    def want(d: int) -> dict[str, np.ndarray]:
        exp = oracle.expected(arch, cfg, ck, layout, T, P, d, ep)
        return {k: oracle.convert(v, src, target) for k, v in exp.items()}

    if r.random() < 0.3 and layout == "tp":  # load_into an engine's own tensors of one rank
        import torch
        rank = r.randrange(n)
        plan = shardload.plan(path, tp=T, pp=P, ep=ep, dtype=TARGETS[target])
        mine = {p.name: torch.empty(p.shape, dtype=getattr(torch, TARGETS[target]))
                for p in plan.devices[rank].params}
        shardload.load_into(path, mine, tp=T, pp=P, ep=ep, rank=rank, dtype=TARGETS[target],
                            **opts)
        w = want(rank)
        assert set(mine) == set(w), case
        for name, t in mine.items():
            assert _bytes(t) == _bytes(w[name]), (name, case)
        return
    m = shardload.load(path, tp=T, pp=P, ep=ep, layout=layout, dtype=TARGETS[target],
                       devices=devices, **opts)
    for d in devices if devices is not None else range(n):
        w = want(d)
        got = m.numpy(d) if r.random() < 0.5 else m.torch(d)
        assert set(got) == set(w), (d, case)
        for name, a in got.items():
            assert tuple(a.shape) == w[name].shape and _bytes(a) == _bytes(w[name]), \
                (d, name, case)
