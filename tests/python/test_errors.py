"""Errors: every argument checked in Python or refused by the core with a message that names the
file, tensor or parameter; load_into refusals come before any byte is read."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import shardload
from sl_fixtures import ckpt_copy, tiny_ckpt, tiny_config  # noqa: F401

BAD_ARGS = [
    (dict(tp=0), ValueError, "tp must be >= 1"),
    (dict(tp="2"), TypeError, "tp must be an int"),
    (dict(pp=True), TypeError, "pp must be an int"),
    (dict(layout="zigzag"), ValueError, "layout 'zigzag'"),
    (dict(dtype="int7"), ValueError, "dtype 'int7'"),
    (dict(device="tpu"), ValueError, "device 'tpu'"),
    (dict(io="mmap"), ValueError, "io 'mmap'"),
    (dict(staging=0), ValueError, "staging must be at least 1, got 0$"),
    # beyond what the C fields hold: refused, not wrapped by ctypes into another valid value
    (dict(tp=2**32 + 2), ValueError, "tp must be at most 65536"),
    (dict(pp=2**32 + 1), ValueError, "pp must be at most 65536"),
    (dict(staging=2**64 + 1), ValueError, "staging must be at most"),
    (dict(seed=2**64), ValueError, "seed must be at most"),
    (dict(threads=2**32), ValueError, "threads must be at most 256"),
    (dict(tp=2, devices=[2**32]), ValueError, "devices: 4294967296 is out of range"),
    (dict(gpus=[2**32 + 1, 0]), ValueError, "gpus: 4294967297 is out of range"),
    (dict(progress=1), TypeError, "progress must be None, a bool or a callable"),
    (dict(progress="yes"), TypeError, "progress must be None, a bool or a callable"),
    # the core's least budget (SL_STAGING_MIN), which the CLI checks as a usage error before
    (dict(staging=16383), shardload.ArgumentError,
     "a staging budget of 16383 bytes is too small: the least that holds is 16384 bytes"),
    (dict(threads=-1), ValueError, "threads must be at least 0, got -1$"),
    (dict(seed=-1), ValueError, "seed must be at least 0, got -1$"),
    (dict(devices="01"), TypeError, "devices must be a list of ints"),
    (dict(devices=[0.5]), TypeError, "devices must be a list of ints"),
    (dict(gpus=3), TypeError, "gpus must be a list of ints"),
    (dict(ep=1), TypeError, "ep must be a bool"),
]


@pytest.mark.parametrize("kwargs,exc,msg", BAD_ARGS, ids=[str(a[0]) for a in BAD_ARGS])
def test_bad_arguments(tiny_ckpt: Path, kwargs: dict, exc: type, msg: str) -> None:
    with pytest.raises(exc, match=msg):
        shardload.load(tiny_ckpt, **kwargs)


@pytest.mark.parametrize("devices,msg", [([0, 0], "chosen twice"), ([4], "out of range"),
                                         ([], "0 devices chosen")])
def test_bad_devices_refused_by_the_core(tiny_ckpt: Path, devices: list, msg: str) -> None:
    with pytest.raises(shardload.ArgumentError, match=msg) as e:
        shardload.load(tiny_ckpt, tp=4, devices=devices)
    assert e.value.status == "SL_E_INVALID_ARG" and isinstance(e.value, ValueError)


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(shardload.CheckpointError) as e:
        shardload.open(tmp_path / "nothing")
    assert e.value.status == "SL_E_NOT_FOUND" and "nothing" in e.value.message
    with pytest.raises(TypeError, match="path"):
        shardload.open(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a checkpoint path"):
        shardload.load()


def test_malformed_header_names_the_file(ckpt_copy: Path) -> None:
    f = sorted(ckpt_copy.glob("*.safetensors"))[1]
    raw = bytearray(f.read_bytes())
    raw[9] = ord("#")  # inside the JSON header
    f.write_bytes(bytes(raw))
    with pytest.raises(shardload.FormatError) as e:
        shardload.load(ckpt_copy)
    assert e.value.status == "SL_E_HEADER_JSON" and f.name in e.value.message


def test_truncated_file(ckpt_copy: Path) -> None:
    f = sorted(ckpt_copy.glob("*.safetensors"))[0]
    os.truncate(f, f.stat().st_size - 2)
    with pytest.raises(shardload.FormatError, match=f.name) as e:
        shardload.open(ckpt_copy)
    assert e.value.status == "SL_E_INCOMPLETE"


def _drop_tensor(ck: Path, name: str) -> None:
    idx = ck / "model.safetensors.index.json"
    j = json.loads(idx.read_text())
    j["weight_map"].pop(name)
    idx.write_text(json.dumps(j))


def test_missing_weight_is_a_plan_error(ckpt_copy: Path) -> None:
    # The index no longer names the tensor, but its file still holds it: the index is wrong.
    _drop_tensor(ckpt_copy, "model.layers.1.mlp.down_proj.weight")
    with pytest.raises(shardload.Error) as e:
        shardload.load(ckpt_copy)
    assert "model.layers.1.mlp.down_proj.weight" in e.value.message


def test_wrong_shape_names_the_tensor(ckpt_copy: Path) -> None:
    cfg = json.loads((ckpt_copy / "config.json").read_text())
    cfg["intermediate_size"] = 256
    (ckpt_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(shardload.PlanError) as e:
        shardload.plan(ckpt_copy)
    assert e.value.status == "SL_E_SHAPE" and "mlp" in e.value.message


def test_indivisible_mesh(tiny_ckpt: Path) -> None:
    with pytest.raises(shardload.PlanError) as e:
        shardload.plan(tiny_ckpt, tp=3)
    assert e.value.status == "SL_E_DIVISIBILITY"


def test_plan_without_anything() -> None:
    with pytest.raises(ValueError, match="config="):
        shardload.plan()
    with pytest.raises(shardload.PlanError):
        shardload.plan(config="/nonexistent/config.json")


def test_file_changed_during_load(ckpt_copy: Path) -> None:
    ck = shardload.open(ckpt_copy)
    p = shardload.Plan(ck, tp=2)
    f = Path(ck.files[0])
    os.truncate(f, f.stat().st_size - 64)
    from shardload.model import _load_opts, _run
    with pytest.raises(shardload.LoadError) as e:
        _run(ck, p, _load_opts("cpu", "auto", 1 << 20, 0, False, 1), False)
    assert e.value.status == "SL_E_CHANGED" and f.name in e.value.message


# ---- load_into refusals --------------------------------------------------------------------

@pytest.fixture()
def engine_tensors(tiny_ckpt: Path) -> dict:
    torch = pytest.importorskip("torch")
    plan = shardload.plan(tiny_ckpt, tp=2)
    return {q.name: torch.full(q.shape, 3, dtype=torch.bfloat16) for q in plan.devices[1].params}


def _refused(tiny_ckpt: Path, tensors: dict, match: str) -> None:
    torch = pytest.importorskip("torch")
    before = {k: v.clone() if hasattr(v, "clone") else v.copy() for k, v in tensors.items()}
    with pytest.raises((ValueError, TypeError, shardload.Error), match=match):
        shardload.load_into(tiny_ckpt, tensors, tp=2, rank=1)
    for k, v in tensors.items():  # nothing was read into them
        b = before[k]
        if getattr(v, "is_meta", False):
            continue
        assert torch.equal(v, b) if hasattr(v, "clone") else np.array_equal(v, b), k


def test_load_into_missing_name(tiny_ckpt: Path, engine_tensors: dict) -> None:
    engine_tensors.pop("model.norm.weight")
    _refused(tiny_ckpt, engine_tensors, "no tensor for parameter 'model.norm.weight'")


def test_load_into_extra_name(tiny_ckpt: Path, engine_tensors: dict) -> None:
    import torch
    engine_tensors["model.layers.0.extra"] = torch.zeros(2)
    _refused(tiny_ckpt, engine_tensors, "'model.layers.0.extra' is not a parameter")


def test_load_into_wrong_shape(tiny_ckpt: Path, engine_tensors: dict) -> None:
    import torch
    engine_tensors["model.norm.weight"] = torch.zeros(255, dtype=torch.bfloat16)
    _refused(tiny_ckpt, engine_tensors, r"'model.norm.weight': shape \(255,\)")


def test_load_into_wrong_dtype(tiny_ckpt: Path, engine_tensors: dict) -> None:
    import torch
    engine_tensors["model.norm.weight"] = torch.zeros(256, dtype=torch.float16)
    _refused(tiny_ckpt, engine_tensors, "'model.norm.weight': dtype torch.float16")


def test_load_into_non_contiguous(tiny_ckpt: Path, engine_tensors: dict) -> None:
    name = "model.layers.0.self_attn.o_proj.weight"
    t = engine_tensors[name]
    engine_tensors[name] = t.t().contiguous().t()  # same shape, column-major
    _refused(tiny_ckpt, engine_tensors, f"'{name}': tensor is not contiguous")


def test_load_into_read_only_array(tiny_ckpt: Path) -> None:
    import ml_dtypes
    plan = shardload.plan(tiny_ckpt, tp=2)
    arrays = {q.name: np.zeros(q.shape, ml_dtypes.bfloat16) for q in plan.devices[1].params}
    arrays["model.norm.weight"].flags.writeable = False
    _refused(tiny_ckpt, arrays, "'model.norm.weight': array is not C-contiguous and writeable")


def test_load_into_wrong_type_and_rank(tiny_ckpt: Path, engine_tensors: dict) -> None:
    engine_tensors["model.norm.weight"] = [0.0] * 256
    _refused(tiny_ckpt, engine_tensors, "expected a torch.Tensor or numpy.ndarray, got list")
    with pytest.raises(ValueError, match="rank 2"):
        shardload.load_into(tiny_ckpt, {}, tp=2, rank=2)
    for rank in (True, np.int64(1), 1.0):  # a type, not a range, problem
        with pytest.raises(TypeError, match="rank must be an int"):
            shardload.load_into(tiny_ckpt, {}, tp=2, rank=rank)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="mapping"):
        shardload.load_into(tiny_ckpt, [], tp=2)  # type: ignore[arg-type]


def test_load_into_shared_memory_refused(tiny_ckpt: Path, engine_tensors: dict) -> None:
    """Two parameters in one memory (a tensor under two names, overlapping views of one buffer)
    would each get part of the other's bytes, the load succeeding with wrong weights: the core
    refuses them by name before reading (it loaded them)."""
    import torch
    a, b = "model.layers.0.input_layernorm.weight", "model.norm.weight"
    engine_tensors[b] = engine_tensors[a]
    _refused(tiny_ckpt, engine_tensors, f"parameter '{a}' and .*parameter '{b}' overlap|"
             f"parameter '{b}' and .*parameter '{a}' overlap")
    flat = torch.zeros(512 + 128, dtype=torch.bfloat16)
    engine_tensors[a], engine_tensors[b] = flat[:256], flat[128:384]
    _refused(tiny_ckpt, engine_tensors, "overlap .*each needs memory of its own")


def test_load_into_read_only_memory_refused(tiny_ckpt: Path, engine_tensors: dict,
                                            tmp_path: Path) -> None:
    """A tensor over memory the process may not write (torch.from_numpy of a read-only memmap,
    which torch only warns about) is refused by name: the first byte copied killed the
    process (SIGSEGV)."""
    import warnings

    import torch
    name = "model.norm.weight"
    (tmp_path / "ro.bin").write_bytes(bytes(512))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "The given NumPy array is not writable"
        ro = torch.from_numpy(np.memmap(tmp_path / "ro.bin", np.uint16, "r", shape=(256,)))
    engine_tensors[name] = ro.view(torch.bfloat16)
    _refused(tiny_ckpt, engine_tensors, f"the destination of parameter '{name}' .* is memory "
             "this process may not write")


def test_load_into_tensor_subclasses(tiny_ckpt: Path, engine_tensors: dict) -> None:
    """A subclass of torch.Tensor defined outside torch (vLLM's BasevLLMParameter, under its
    quantized layers' parameters) is a tensor to fill; it was refused as no torch.Tensor. A
    torch object that is no tensor is refused by name."""
    import torch

    class EngineParameter(torch.nn.Parameter):  # as vLLM's, a Parameter subclass of its own
        pass
    want = {k: v.clone() for k, v in engine_tensors.items()}
    shardload.load_into(tiny_ckpt, want, tp=2, rank=1)
    mine = {k: EngineParameter(v, requires_grad=False) for k, v in engine_tensors.items()}
    shardload.load_into(tiny_ckpt, mine, tp=2, rank=1)
    for k, v in mine.items():
        assert type(v) is EngineParameter and torch.equal(v, want[k]), k
    engine_tensors["model.norm.weight"] = torch.nn.Linear(2, 2)  # type: ignore[assignment]
    with pytest.raises(TypeError, match="'model.norm.weight': expected a torch.Tensor or "
                       "numpy.ndarray, got Linear"):
        shardload.load_into(tiny_ckpt, engine_tensors, tp=2, rank=1)


def test_load_into_meta_device_refused(tiny_ckpt: Path, engine_tensors: dict) -> None:
    import torch
    engine_tensors["model.norm.weight"] = torch.empty(256, dtype=torch.bfloat16, device="meta")
    _refused(tiny_ckpt, engine_tensors, "'model.norm.weight': meta tensor")


def test_every_status_has_a_family() -> None:
    """Each status of the C core's one list (SL_STATUS_LIST) raises a family's exception, not the
    bare base class: a status added in C without a Python family fails here."""
    import re
    from shardload import _native as N
    from shardload.errors import error_class
    header = (Path(__file__).resolve().parents[2] / "include" / "shardload.h").read_text()
    values = [int(v) for v in re.findall(r"X\(SL_E_\w+, (\d+),", header)]
    assert len(values) > 20
    for v in values:
        assert error_class(v) is not shardload.Error, f"{N.status_name(v)} ({v}) has no family"
    assert error_class(34) is shardload.CancelledError


def test_synth_seed_beyond_64_bits(tmp_path: Path, tiny_config: Path) -> None:
    with pytest.raises(ValueError, match="seed must be an int from 0 to 2"):
        shardload.synth(tiny_config, tmp_path / "s", seed=2**64)


def test_bytes_path(tiny_ckpt: Path) -> None:
    with shardload.open(os.fsencode(tiny_ckpt)) as ck:
        assert ck.path == str(tiny_ckpt) and str(tiny_ckpt) in repr(ck)


def test_plan_class_given_a_path(tiny_ckpt: Path) -> None:
    """Plan takes an open Checkpoint; given a path it says so and what to call instead (it
    failed with AttributeError: 'PosixPath' object has no attribute 'remote')."""
    with pytest.raises(TypeError, match=r"Plan takes an open Checkpoint .* got PosixPath: "
                                        r"shardload\.plan\(path\) plans a path"):
        shardload.Plan(tiny_ckpt, tp=2)
    with shardload.open(tiny_ckpt) as ck:
        assert len(shardload.Plan(ck, tp=2).devices) == 2
