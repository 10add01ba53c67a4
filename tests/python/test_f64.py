"""F64 checkpoints load into bf16, f16 and f32 parameters with PyTorch's rounding (through F32:
c10's BFloat16 and Half are made from a float), in the torch API and in shardload.jax; dtypes
may be given as NumPy, JAX or torch types as well as names."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import shardload
from sl_fixtures import TINY, tiny_ckpt, tiny_config  # noqa: F401

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def f64_ckpt(tmp_path_factory: pytest.TempPathFactory,
             tiny_ckpt: Path) -> tuple[Path, dict]:  # noqa: F811
    """tiny_ckpt's tensors as F64, each with low bits set that F32 cannot hold (so that every
    conversion rounds, and a few round differently straight to 16 bits than through F32)."""
    from safetensors.numpy import save_file
    out = tmp_path_factory.mktemp("f64")
    rng = np.random.default_rng(64)
    tensors = {}
    with shardload.open(tiny_ckpt) as ck:
        for t in ck.tensors:
            bf = ck.read(t.name).view(np.uint16).astype(np.uint32) << 16
            x = bf.view(np.float32).astype(np.float64)
            tensors[t.name] = x + x * rng.uniform(-2.0 ** -20, 2.0 ** -20, x.shape)
    # ties of bf16's rounding in F32 that are not ties in F64: through F32 they go to even
    tensors["model.norm.weight"][:4] = [1 + 2.0 ** -8 + 2.0 ** -30, -(1 + 2.0 ** -8 + 2.0 ** -30),
                                         2.0 ** -8 + 2.0 ** -16 + 2.0 ** -38,
                                         1 + 2.0 ** -11 + 2.0 ** -40]
    save_file(tensors, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(TINY))
    return out, tensors


def torch_cast(x: np.ndarray, dtype: object) -> np.ndarray:
    """What vLLM's loader gets: PyTorch's own conversion of the F64 tensor."""
    t = torch.from_numpy(x).to(dtype)
    return t.view(torch.int16).numpy() if t.element_size() == 2 else t.numpy()


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32", np.float16, torch.bfloat16])
def test_load_rounds_as_torch(f64_ckpt: tuple[Path, dict], dtype: object) -> None:
    path, tensors = f64_ckpt
    want_dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
               np.float16: torch.float16}.get(dtype, dtype)
    m = shardload.load(path, tp=1, layout="spmd", dtype=dtype)   # spmd keeps checkpoint names
    got = m.torch(0)
    assert set(got) == set(tensors)
    for name, x in tensors.items():
        g = got[name]
        assert g.dtype == want_dt, name
        g = g.view(torch.int16).numpy() if g.element_size() == 2 else g.numpy()
        assert np.array_equal(g, torch_cast(x, want_dt)), name
    norm = got["model.norm.weight"]
    if want_dt == torch.bfloat16:   # straight from F64 these would be 0x3f81, 0xbf81, 0x3b81
        assert norm.view(torch.int16)[:3].tolist() == [0x3f80, -0x4080, 0x3b80]
    if want_dt == torch.float16:    # and this 0x3c01
        assert norm.view(torch.int16)[3].item() == 0x3c00


def test_jax_load_rounds_as_torch(f64_ckpt: tuple[Path, dict]) -> None:
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import ml_dtypes
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import shardload.jax as sj
    path, tensors = f64_ckpt
    mesh = Mesh(np.array(jax.devices()[:2]), ("model",))
    rule = [(r".*proj\.weight", P("model", None)), (r".*", P())]
    for dtype, np_dt in ((jnp.bfloat16, ml_dtypes.bfloat16), ("f16", np.float16),
                         (np.float32, np.float32)):
        out = sj.load(path, mesh, rule, dtype=dtype, progress=False)
        for name, x in tensors.items():
            a = out[name]
            assert a.dtype == np_dt and a.shape == x.shape, name
            assert isinstance(a.sharding, NamedSharding)
            want = x.astype(np.float32).astype(np_dt)   # ml_dtypes rounds through F32 too
            assert np.array_equal(np.asarray(a).view(np.uint8), want.view(np.uint8)), name
            if name == "model.norm.weight" and np_dt != np.float32:
                assert np.array_equal(want.view(np.uint16), torch_cast(x, {
                    ml_dtypes.bfloat16: torch.bfloat16, np.float16: torch.float16}[np_dt])
                    .view(np.uint16))
