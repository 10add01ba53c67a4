"""config= as something other than a path: a dict (JSON text in memory, sl_plan_opts.config_json),
a transformers config, the CLI's --config - (stdin), and the errors for what they cannot be. The
planner reads them as it reads the file, so plans and loaded bytes must be the file's, and its
strict checks still hold."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import shardload  # noqa: E402
from sl_fixtures import (TINY, ckpt_copy, cli, tiny_ckpt, tiny_config,  # noqa: E402,F401
                         write_config)

MEMORY = "config.json (in memory)"


def _same_bytes(a: shardload.Model, b: shardload.Model) -> None:
    assert a.devices == b.devices
    for d in a.devices:
        x, y = a.numpy(d), b.numpy(d)
        assert list(x) == list(y)
        for name in x:
            assert x[name].dtype == y[name].dtype and x[name].shape == y[name].shape, name
            assert x[name].tobytes() == y[name].tobytes(), (d, name)


def _layers(p: shardload.Plan) -> set[int]:
    return {int(q.name.split(".")[2]) for d in p.devices for q in d.params
            if q.name.startswith("model.layers.")}


def test_dict_loads_what_the_path_loads(tiny_ckpt: Path, tiny_config: Path) -> None:
    with shardload.load(tiny_ckpt, tp=2, config=tiny_config) as want, \
            shardload.load(tiny_ckpt, tp=2, config=dict(TINY)) as got:
        _same_bytes(want, got)
        assert got.plan.devices == want.plan.devices
        assert got.plan.read_bytes == want.plan.read_bytes
    with shardload.load(tiny_ckpt, tp=2, pp=2, layout="tp", config=TINY, dtype="f32") as got, \
            shardload.load(tiny_ckpt, tp=2, pp=2, config=tiny_config, dtype="f32") as want:
        _same_bytes(want, got)


def test_the_checkpoints_config_is_not_read(ckpt_copy: Path, tiny_config: Path) -> None:
    (ckpt_copy / "config.json").unlink()
    with pytest.raises(shardload.PlanError, match="config.json: cannot open"):
        shardload.plan(ckpt_copy)
    with shardload.load(ckpt_copy, tp=2, config=TINY) as got, \
            shardload.load(ckpt_copy, tp=2, config=tiny_config) as want:
        _same_bytes(want, got)


def test_load_into_and_plan_take_a_dict(tiny_ckpt: Path, tiny_config: Path) -> None:
    p = shardload.plan(tiny_ckpt, tp=2, config=TINY)
    assert p.devices == shardload.plan(tiny_ckpt, tp=2, config=tiny_config).devices
    alone = shardload.plan(config=TINY, tp=4, layout="spmd")
    assert alone.devices == shardload.plan(config=tiny_config, tp=4, layout="spmd").devices
    assert alone.read_bytes is None
    params = {q.name: np.empty(q.shape, dtype=np.uint16) for q in p.devices[1].params}
    shardload.load_into(tiny_ckpt, params, tp=2, rank=1, config=TINY)
    with shardload.load(tiny_ckpt, tp=2, devices=[1]) as want:
        for name, a in want.numpy(1).items():
            assert params[name].tobytes() == a.tobytes(), name


def test_reshard_writes_the_config_it_planned_with(tiny_ckpt: Path, tmp_path: Path) -> None:
    # the output directory is loadable on its own, with the given config, not the checkpoint's
    cfg = dict(TINY, shardload_test_marker=7)
    shardload.reshard(tiny_ckpt, tmp_path / "out", tp=2, config=cfg)
    assert json.loads((tmp_path / "out" / "config.json").read_text()) == cfg
    _same_bytes(shardload.load(tmp_path / "out", tp=2), shardload.load(tiny_ckpt, tp=2))


def test_synth_from_a_dict(tiny_config: Path, tmp_path: Path) -> None:
    """synth takes what plan takes: the same shards from a dict as from the path; the output's
    config.json is the config as parsed (its own keys kept), saying the dtype the files hold."""
    cfg = dict(TINY, shardload_test_marker=7)
    write_config(tmp_path / "marked.json", cfg)
    shardload.synth(tmp_path / "marked.json", tmp_path / "a", dtype="f16", seed=5, max_shard_size=1 << 20)
    shardload.synth(cfg, tmp_path / "b", dtype="f16", seed=5, max_shard_size=1 << 20)
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    assert len([n for n in names if n.endswith(".safetensors")]) > 1   # an index too
    for n in names:
        assert (tmp_path / "a" / n).read_bytes() == (tmp_path / "b" / n).read_bytes(), n
    assert json.loads((tmp_path / "b" / "config.json").read_text()) == dict(cfg, torch_dtype="float16")
    # the config read from the output folder itself: it is held as text, then rewritten whole
    shardload.synth(tmp_path / "b" / "config.json", tmp_path / "b", dtype="bf16", seed=5,
                    max_shard_size=1 << 20)
    assert json.loads((tmp_path / "b" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert shardload.open(tmp_path / "b").tensors[0].dtype == "BF16"
    assert not [p for p in (tmp_path / "b").iterdir() if ".tmp." in p.name]
    # one shard (no index) where other shards are: refused before anything is written (the four
    # old shards beside a new model.safetensors would not load: a tensor in two files)
    before = {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()}
    with pytest.raises(shardload.Error) as e:
        shardload.synth(cfg, tmp_path / "b", seed=5)
    assert re.search(r"/b: holds model-0000\d-of-00004\.safetensors, beside which this synth's one "
                     r"model.safetensors \(no index\) would not load", e.value.message), e.value.message
    assert {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()} == before
    # more shards, with an index, where others are: refused too (it replaced the other
    # checkpoint's index and config.json, orphaning its shards: a real model's, say)
    with pytest.raises(shardload.Error) as e:
        shardload.synth(cfg, tmp_path / "b", dtype="f16", seed=5, max_shard_size=1 << 19)
    assert re.search(r"/b: holds model-0000\d-of-00004\.safetensors, a file of another checkpoint",
                     e.value.message), e.value.message
    assert {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()} == before
    with pytest.raises(shardload.PlanError) as e:
        shardload.synth(dict(TINY, num_hidden_layers=0), tmp_path / "c")
    assert e.value.message.startswith(MEMORY + ": config 'num_hidden_layers' is 0")
    with pytest.raises(TypeError):
        shardload.synth(None, tmp_path / "c")   # type: ignore[arg-type]


def test_dummy_load_from_a_dict(tiny_config: Path) -> None:
    a = shardload.load(config=TINY, dummy=True, tp=2, seed=7)
    b = shardload.load(config=tiny_config, dummy=True, tp=2, seed=7)
    assert a.checksums(1) == b.checksums(1)


def test_fewer_layers_plan_fewer_and_stay_strict(tiny_ckpt: Path) -> None:
    one = dict(TINY, num_hidden_layers=1)
    alone = shardload.plan(config=one, tp=2)
    assert _layers(alone) == {0} and _layers(shardload.plan(config=TINY, tp=2)) == {0, 1}
    assert alone.total_bytes < shardload.plan(config=TINY, tp=2).total_bytes
    # the checkpoint holds layer 1 too, which no rule of a 1-layer model claims
    with pytest.raises(shardload.PlanError) as e:
        shardload.load(tiny_ckpt, tp=2, config=one)
    assert e.value.status == "SL_E_UNCLAIMED"
    assert "model.layers.1." in e.value.message and "not claimed" in e.value.message
    # and a model of more layers than the checkpoint misses tensors
    with pytest.raises(shardload.PlanError) as e:
        shardload.plan(tiny_ckpt, config=dict(TINY, num_hidden_layers=3))
    assert e.value.status == "SL_E_MISSING" and "model.layers.2." in e.value.message


def test_errors_name_the_text_in_memory(tiny_ckpt: Path) -> None:
    with pytest.raises(shardload.PlanError) as e:
        shardload.plan(tiny_ckpt, config=dict(TINY, num_hidden_layers=0))
    assert e.value.status == "SL_E_CONFIG"
    assert e.value.message == f"{MEMORY}: config 'num_hidden_layers' is 0; it must be positive"
    with pytest.raises(shardload.PlanError, match=re.escape(f"SL_E_CONFIG: {MEMORY}: config "
                                                            "'hidden_size' is not an integer")):
        shardload.plan(config=dict(TINY, hidden_size="256"))
    with pytest.raises(shardload.PlanError, match="architecture 'NopeForCausalLM' has no built-in"):
        shardload.plan(config=dict(TINY, architectures=["NopeForCausalLM"]))
    # a JSON text that is not an object, from a mapping-like config's to_json_string()
    class Text:
        def to_json_string(self) -> str:
            return "[1, 2]"
    with pytest.raises(shardload.PlanError, match=re.escape(f"{MEMORY}: config is not a JSON object")):
        shardload.plan(config=Text())


def test_bad_types_and_values() -> None:
    for bad in (3, 2.5, [TINY], True):
        with pytest.raises(TypeError, match="config must be a path to a config.json, a mapping"):
            shardload.plan(config=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="config: Out of range float"):
        shardload.plan(config=dict(TINY, rms_norm_eps=float("nan")))
    with pytest.raises(TypeError, match="config: a set value is not JSON serializable"):
        shardload.plan(config=dict(TINY, extra={1, 2}))

    class Odd:
        def to_dict(self) -> list[int]:
            return [1]
    with pytest.raises(TypeError, match=r"config.to_dict\(\) returned list"):
        shardload.plan(config=Odd())  # type: ignore[arg-type]


def test_torch_dtype_values(tiny_ckpt: Path) -> None:
    torch = pytest.importorskip("torch")
    p = shardload.plan(tiny_ckpt, config=dict(TINY, torch_dtype=torch.float16))
    assert p.dtype == "F16"
    p = shardload.plan(config={k: v for k, v in TINY.items() if k != "torch_dtype"} |
                       {"dtype": torch.float32})
    assert p.dtype == "F32"


def test_transformers_config(tiny_ckpt: Path, tiny_config: Path) -> None:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    cfg = transformers.AutoConfig.from_pretrained(tiny_ckpt)
    with shardload.load(tiny_ckpt, tp=2, config=cfg) as got, \
            shardload.load(tiny_ckpt, tp=2, config=tiny_config) as want:
        _same_bytes(want, got)
    # what its to_dict() gives for the dtype differs between versions (a string under
    # "torch_dtype" or "dtype"; a torch.dtype set on it); each is read
    cfg.dtype = torch.float16
    assert shardload.plan(tiny_ckpt, config=cfg).dtype == "F16"
    small = transformers.AutoConfig.from_pretrained(tiny_ckpt, num_hidden_layers=1)
    assert _layers(shardload.plan(config=small, tp=2)) == {0}
    with pytest.raises(shardload.PlanError) as e:
        shardload.plan(tiny_ckpt, config=small)
    assert e.value.status == "SL_E_UNCLAIMED"
    built = transformers.LlamaConfig(**{k: v for k, v in TINY.items() if k != "architectures"},
                                     architectures=["LlamaForCausalLM"])
    assert shardload.plan(tiny_ckpt, tp=2, config=built).devices == \
        shardload.plan(tiny_ckpt, tp=2, config=tiny_config).devices


def test_jax_load_takes_a_dict(tmp_path: Path) -> None:
    jax = pytest.importorskip("jax")
    import shardload.jax as sj
    from jax.sharding import Mesh
    if len(jax.devices()) < 4:
        pytest.skip("needs 4 JAX devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    cfg = dict(TINY, vocab_size=1024)   # JAX wants even splits
    path = write_config(tmp_path / "cfg.json", cfg)
    shardload.synth(path, tmp_path / "ck", max_shard_size=1 << 20)
    mesh = Mesh(np.array(jax.devices()[:4]), ("model",))
    want = sj.load(tmp_path / "ck", mesh, config=path)
    got = sj.load(tmp_path / "ck", mesh, config=cfg)
    assert set(got) == set(want)
    for name, a in got.items():
        assert a.sharding == want[name].sharding, name
        assert np.asarray(a).tobytes() == np.asarray(want[name]).tobytes(), name
    assert sj.plan(tmp_path / "ck", mesh, config=cfg).devices == \
        sj.plan(tmp_path / "ck", mesh, config=path).devices
    with pytest.raises(shardload.PlanError) as e:
        sj.load(tmp_path / "ck", mesh, config=dict(cfg, num_hidden_layers=1))
    assert e.value.status == "SL_E_UNCLAIMED"
    assert json.loads(path.read_text()) == cfg


def test_cli_config_from_stdin(cli: str, tiny_ckpt: Path, tiny_config: Path, tmp_path: Path) -> None:
    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([cli, *args], input=stdin, capture_output=True, text=True,
                              timeout=120)
    text = tiny_config.read_text()
    for cmd in (["plan", str(tiny_ckpt), "--tp", "2", "--json"],
                ["load", str(tiny_ckpt), "--tp", "2", "--checksums", "--json"]):
        want = run(*cmd, "--config", str(tiny_config))
        got = run(*cmd, "--config", "-", stdin=text)
        assert want.returncode == 0 and got.returncode == 0, got.stderr
        w, g = json.loads(want.stdout), json.loads(got.stdout)
        assert g["devices"] == w["devices"]
    out = tmp_path / "synth-stdin"
    got = run("synth", "--config", "-", str(out), "--seed", "9", stdin=text)
    want = run("synth", "--config", str(tiny_config), str(out) + "-file", "--seed", "9")
    assert got.returncode == 0 and want.returncode == 0, got.stderr + want.stderr
    assert got.stdout == f"wrote a synthetic checkpoint of <stdin> to {out}\n"
    assert ((out / "model.safetensors").read_bytes() ==
            (tmp_path / "synth-stdin-file" / "model.safetensors").read_bytes())
    bad = run("plan", "--config", "-", stdin=json.dumps(dict(TINY, num_hidden_layers=0)))
    assert bad.returncode == 1
    assert "<stdin>: config 'num_hidden_layers' is 0" in bad.stderr
    one = run("plan", str(tiny_ckpt), "--config", "-",
              stdin=json.dumps(dict(TINY, num_hidden_layers=1)))
    assert one.returncode == 1 and "not claimed" in one.stderr
    # stdin is read in growing pieces up to the library's 16 MiB bound, and one byte past it is
    # the planner's refusal, not a text cut short
    plan2 = ["plan", "--config", "-", "--tp", "2", "--json"]
    small = json.loads(run(*plan2, stdin=text).stdout)
    for size in (300 << 10, 16 << 20):
        padded = run(*plan2, stdin=" " * (size - len(text)) + text)
        assert padded.returncode == 0 and json.loads(padded.stdout) == small, padded.stderr
    over = run(*plan2, stdin=" " * ((16 << 20) + 1 - len(text)) + text)
    assert over.returncode == 1
    assert over.stderr == ("shardload: error: <stdin>: 16777217 bytes, over the 16777216-byte "
                           "limit\n")
    empty = run(*plan2, stdin="")
    assert empty.returncode == 1 and empty.stderr.startswith("shardload: error: <stdin>: ")
    twice = run("plan", "--config", "-", "--config", "-", stdin=text)
    assert twice.returncode == 2 and "given twice" in twice.stderr
    dist = run("load", str(tiny_ckpt), "--config", "-", "--dist", "cooperative", stdin=text)
    assert dist.returncode == 2 and "--config - is for one process" in dist.stderr
    rdist = run("reshard", str(tiny_ckpt), str(tiny_ckpt.parent / "rs-dist"), "--tp", "2", "--config", "-",
                "--dist", "independent", stdin=text)
    assert rdist.returncode == 2 and "reshard: --config - is for one process" in rdist.stderr
