"""examples/vllm_loader.py, run as a user runs it, against tiny saved transformers models: the
vLLM-style engine allocates its rank's parameters, load_into fills them, and they equal
shardload.load(..., devices=[rank])."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import shardload
from hf_tiny import config_dtype, save_tiny, torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "vllm_loader.py"

# (name, architecture, dtype, tied, overrides, tp, rank)
RUNS = [
    ("qwen2-bias-tied-bf16", "Qwen2ForCausalLM", torch.bfloat16, True, {}, 4, 3),  # K=2 < T=4
]
# Run in this process (main(argv)): the same code without another torch import.
IN_PROCESS = [
    ("llama-untied", "LlamaForCausalLM", torch.float32, False, {}, 2, 1),
    ("qwen3-one-kv-head", "Qwen3ForCausalLM", torch.float32, False,
     {"num_key_value_heads": 1, "head_dim": 32}, 2, 0),
    ("mistral-k2-tp4", "MistralForCausalLM", torch.float32, True, {}, 4, 2),
]


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120)


def example_module() -> object:
    spec = importlib.util.spec_from_file_location("vllm_loader_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_output(stdout: str, ckpt: Path, arch: str, dtype: object, tp: int, rank: int) -> None:
    plan = shardload.plan(ckpt, tp=tp, dtype=config_dtype(ckpt))
    n = len(plan.devices[rank].params)
    lines = stdout.splitlines()
    assert lines[-1] == "OK"
    assert re.fullmatch(rf"engine: {arch} tp {tp} rank {rank} {str(dtype)[6:]}: {n} parameters, "
                        rf"{plan.devices[rank].bytes} bytes allocated", lines[0]), lines[0]
    assert re.match(rf"load_into: {n} parameters filled in place, \d+ bytes read", lines[1])
    assert lines[2] == (f"check: all {n} parameters equal shardload.load(devices=[{rank}]) "
                        "bit for bit")


@pytest.mark.parametrize("name,arch,dtype,tied,over,tp,rank", RUNS, ids=[r[0] for r in RUNS])
def test_example_fills_rank_in_place(tmp_path: Path, name: str, arch: str, dtype: object,
                                     tied: bool, over: dict, tp: int, rank: int) -> None:
    ckpt, _ = save_tiny(tmp_path / name, arch, dtype=dtype, tied=tied, seed=5, **over)
    r = run_example(str(ckpt), "--tp", str(tp), "--rank", str(rank))
    assert r.returncode == 0, r.stdout + r.stderr
    check_output(r.stdout, ckpt, arch, dtype, tp, rank)


@pytest.mark.parametrize("name,arch,dtype,tied,over,tp,rank", IN_PROCESS,
                         ids=[r[0] for r in IN_PROCESS])
def test_example_main_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                                 arch: str, dtype: object, tied: bool, over: dict, tp: int,
                                 rank: int) -> None:
    ckpt, _ = save_tiny(tmp_path / name, arch, dtype=dtype, tied=tied, seed=5, **over)
    before = torch.get_default_dtype()
    assert example_module().main([str(ckpt), "--tp", str(tp), "--rank", str(rank)]) == 0
    assert torch.get_default_dtype() == before
    check_output(capsys.readouterr().out, ckpt, arch, dtype, tp, rank)


def test_example_refuses_a_rank_outside_the_mesh(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        example_module().main([str(tmp_path), "--tp", "2", "--rank", "2"])
    assert e.value.code == 2 and "--rank 2 is not in [0, 2)" in capsys.readouterr().err


def test_example_check_catches_bytes_left_unwritten(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The example's own check has teeth: a loader that writes nothing fails it."""
    ckpt, _ = save_tiny(tmp_path / "m", "LlamaForCausalLM")
    mod = example_module()
    monkeypatch.setattr(mod.shardload, "load_into", lambda *a, **k: {"bytes_read": 0})
    assert mod.main([str(ckpt), "--tp", "2", "--rank", "0"]) == 1
    assert "FAIL" in capsys.readouterr().err
