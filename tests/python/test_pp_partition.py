"""An explicit pipeline split through the Python API (pp_partition=, vLLM's
VLLM_PP_LAYER_PARTITION): each stage's arrays are the independent numpy oracle's
(tests/oracle_shards.py, which computes the stage ranges from the partition itself), for a
sequence and for vLLM's text; load_into and reshard take it too, and a reshard's parts load back
only with the same split; the planner's refusals keep their status and message, and the package
reads no environment variable for it."""
from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

import shardload
from sl_fixtures import CONFIGS, cli  # noqa: F401  (the fixture)

import oracle_shards


def _checkpoint(tmp_path: Path, arch: str) -> tuple[dict, Path, dict]:
    """The oracle's BF16 checkpoint of a small architecture, in two files."""
    cfg = dict(oracle_shards.ARCHS.get(arch) or oracle_shards.MOE_ARCHS[arch], torch_dtype="bfloat16")
    ck_dir = tmp_path / arch
    ck_dir.mkdir()
    (ck_dir / "config.json").write_text(json.dumps(cfg))
    ck = oracle_shards.checkpoint_tensors(arch, cfg, "BF16", np.random.default_rng(11))
    oracle_shards.write_checkpoint(str(ck_dir), ck, 2, random.Random(5))
    return cfg, ck_dir, ck


def _same(got: dict, want: dict, what: str) -> None:
    assert set(got) == set(want), what
    for name, w in want.items():
        assert got[name].shape == w.shape, f"{what}: {name}"
        assert np.array_equal(got[name].view(np.uint16), w.view(np.uint16)), f"{what}: {name}"


def test_plan_reports_the_split() -> None:
    cfg = CONFIGS / "llama-3-8b.json"
    assert shardload.plan(config=cfg, tp=2, pp=3).pp_partition == (11, 11, 10)   # vLLM's default
    for part in ((10, 12, 10), [10, 12, 10], "10,12,10", " 10, 12,10 "):
        p = shardload.plan(config=cfg, tp=2, pp=3, pp_partition=part)
        assert p.pp_partition == (10, 12, 10), part
        stage1 = {q.name for q in p.devices[2].params}
        assert "model.layers.10.input_layernorm.weight" in stage1
        assert "model.layers.21.input_layernorm.weight" in stage1
        assert "model.layers.22.input_layernorm.weight" not in stage1
    spmd = shardload.plan(config=cfg, tp=2, layout="spmd")
    assert spmd.pp_partition == (32,)


@pytest.mark.parametrize("arch,tp,pp,part", [("qwen3", 2, 3, "0,5,0"), ("mixtral", 2, 2, (3, 0)),
                                             ("deepseek_v3", 1, 3, [0, 2, 1])])
def test_load_is_the_oracle(tmp_path: Path, arch: str, tp: int, pp: int, part: object) -> None:
    """Stages of no layers (the tied Qwen3's embedding alone on stage 0 and with the norm on the
    last), Mixtral's embed/norm/lm_head on every stage, DeepSeek's MTP layer on none."""
    cfg, ck_dir, ck = _checkpoint(tmp_path, arch)
    text = part if isinstance(part, str) else ",".join(map(str, part))
    with shardload.load(ck_dir, tp=tp, pp=pp, pp_partition=part) as m:   # type: ignore[arg-type]
        assert m.plan.pp_partition == tuple(int(x) for x in text.split(","))
        for d in range(tp * pp):
            want = oracle_shards.expected_tp(arch, cfg, ck, tp, pp, d, part=text)
            _same(m.numpy(d), want, f"{arch} {text} device {d}")


def test_load_into_and_reshard(tmp_path: Path) -> None:
    cfg, ck_dir, ck = _checkpoint(tmp_path, "llama")   # 7 layers
    part = (1, 6, 0)
    plan = shardload.plan(ck_dir, tp=2, pp=3, pp_partition=part)
    import ml_dtypes
    mine = {q.name: np.zeros(q.shape, ml_dtypes.bfloat16) for q in plan.devices[3].params}
    shardload.load_into(ck_dir, mine, tp=2, pp=3, rank=3, pp_partition=part)
    _same(mine, oracle_shards.expected_tp("llama", cfg, ck, 2, 3, 3, part="1,6,0"), "load_into rank 3")
    out = tmp_path / "rs"
    shardload.reshard(ck_dir, out, tp=2, pp=3, pp_partition="1,6,0")
    with shardload.load(ck_dir, tp=2, pp=3, pp_partition=part) as want, \
            shardload.load(out, tp=2, pp=3, pp_partition=part) as got:
        for d in range(6):
            assert got.checksums(d) == want.checksums(d), f"device {d}"
    with pytest.raises(shardload.PlanError, match="pre-sharded with pp_partition 1,6,0") as e:
        shardload.load(out, tp=2, pp=3)
    assert e.value.status == "SL_E_CONFIG"


def test_boxes_have_no_stages(tmp_path: Path) -> None:
    _, ck_dir, _ = _checkpoint(tmp_path, "qwen3")
    with shardload.open(ck_dir) as ck:
        p = shardload.Plan.from_boxes(ck, [("model.norm.weight", 0, (0,), (32,))], 1)
        assert p.pp == 1 and p.pp_partition == ()


def test_refusals() -> None:
    cfg = CONFIGS / "llama-3-8b.json"
    with pytest.raises(shardload.ArgumentError, match="pp_partition 16,16 has 2 entries but pp is 3"):
        shardload.plan(config=cfg, pp=3, pp_partition=[16, 16])
    with pytest.raises(shardload.ArgumentError, match="stage 1's entry -2 is negative"):
        shardload.plan(config=cfg, pp=3, pp_partition="10,-2,24")
    with pytest.raises(shardload.PlanError,
                       match="pp_partition 10,12,11 places 33 layers but num_hidden_layers is 32") as e:
        shardload.plan(config=cfg, pp=3, pp_partition=(10, 12, 11))
    assert e.value.status == "SL_E_CONFIG"
    with pytest.raises(shardload.ArgumentError, match="layout tp only"):
        shardload.plan(config=cfg, tp=2, layout="spmd", pp_partition=[32])
    with pytest.raises(ValueError, match="not a comma-separated list of layer counts"):
        shardload.plan(config=cfg, pp=3, pp_partition="10,x,22")
    with pytest.raises(ValueError, match="not a comma-separated list"):
        shardload.plan(config=cfg, pp=3, pp_partition="10,12,10,")   # vLLM refuses it too
    # any integer type, NumPy's too, in any ordered collection: a split worked out with NumPy
    assert shardload.plan(config=cfg, pp=3, pp_partition=np.array([10, 12, 10])).pp_partition == (10, 12, 10)
    assert shardload.plan(config=cfg, pp=3, pp_partition=[np.int64(10), np.int32(12), 10]).pp_partition == (10, 12, 10)
    for bad in ([10.0, 12, 10], [True, 12, 19], [np.True_, 12, 19], [np.float64(10), 12, 10],
                b"10,12,10", 32, {"a": 1}, {10, 12}):
        with pytest.raises(TypeError, match="pp_partition"):
            shardload.plan(config=cfg, pp=3, pp_partition=bad)   # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a count of layers"):
        shardload.plan(config=cfg, pp=3, pp_partition=[2**32 + 10, 12, 10])   # no wrap to 10


def test_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The package, like the library, reads no VLLM_PP_LAYER_PARTITION: the caller passes it."""
    monkeypatch.setenv("VLLM_PP_LAYER_PARTITION", "20,12")
    assert shardload.plan(config=CONFIGS / "llama-3-8b.json", pp=2).pp_partition == (16, 16)


def test_cli_agrees(cli: str) -> None:  # noqa: F811
    out = subprocess.run([cli, "plan", "--config", str(CONFIGS / "llama-3-8b.json"), "--tp", "2",
                          "--pp", "3", "--pp-partition", "10,12,10", "--json"],
                         capture_output=True, text=True, check=True).stdout
    rep = json.loads(out)
    p = shardload.plan(config=CONFIGS / "llama-3-8b.json", tp=2, pp=3, pp_partition="10,12,10")
    assert tuple(rep["pp_partition"]) == p.pp_partition
    assert [d["bytes"] for d in rep["devices"]] == [d.bytes for d in p.devices]
