"""bench/gpu_python.py, the Python part of bench/gpu_check.sh, run through here on the CUDA stand-in
and with its JAX part on JAX's CPU devices (GPU_JAX_PLATFORM=cpu), and its JSON rendered by
bench/gpu_report.py: a GPU machine is lent for minutes, so a mistake in the script's own code (an
API it calls wrongly, a key the report expects) must show here, not there."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import shardload
from sl_fixtures import TESTS, TINY, fake_cudart, write_config  # noqa: F401 - fixtures

BENCH = TESTS.parent / "bench"


def _report_module():
    spec = importlib.util.spec_from_file_location("gpu_report", BENCH / "gpu_report.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_python_dry_run(tmp_path: Path, fake_cudart: str) -> None:
    # a vocabulary 8 devices divide: the script shards the embedding over every device, as JAX
    # allows for Llama-3-8B's 128,256 rows on up to 8 GPUs
    ck = tmp_path / "ck"
    shardload.synth(write_config(tmp_path / "config.json", dict(TINY, vocab_size=1024)), ck)
    env = dict(os.environ, SL_CUDART=fake_cudart, FAKE_CUDA_GPUS="1", FAKE_CUDA_MEM=str(1 << 30),
               GPU_JAX_PLATFORM="cpu", GPU_JAX_LAYERS="1", GPU_JAX_REPS="1",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    out = subprocess.run([sys.executable, str(BENCH / "gpu_python.py"), str(ck)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    p = json.loads(out.stdout.strip().splitlines()[-1])["python"]
    assert p["checksums_equal"] is True
    # the JAX part ran (not skipped) and every load equals the CPU one, on the platform asked for
    assert "jax_skipped" not in p, p.get("jax_skipped")
    assert p["jax_equal_cpu"] is True and p["jax_on_gpus"] is True
    assert p["jax_bytes"] > 0 and p["jax_pair_staging"] == 512 << 20
    assert p["jax_plain_stats"]["dma"] == "off"
    line = _report_module().python_line(p)
    assert "cuda checksums = cpu: yes" in line
    assert "`shardload.jax.load` onto the GPUs" in line and "equal to its CPU result: yes" in line
    assert "slabs DMA-mapped" in line and "vs plain (dma=False)" in line
    # JAX's CPU devices have pinned_host memory too: the host-offloading load ran and is exact
    assert p["jax_pinned_in_kind"] is True and p["jax_pinned_equal_cpu"] is True, p
    assert "into pinned host memory" in line and "in that memory: yes, equal: yes" in line


class _RegisteringClient:
    """A JAX client whose dma_map acts as XLA's GPU client's (cuMemHostRegister, portable): a
    range that overlaps one still mapped is refused, as is an unmap of an address not mapped."""

    def __init__(self) -> None:
        self.live: dict[int, int] = {}
        self.maps = 0

    def dma_map(self, address: int, size: int) -> None:
        if any(a < address + size and address < a + n for a, n in self.live.items()):
            raise RuntimeError(f"INTERNAL: Failed to register host memory at address: {address:#x}")
        self.live[address] = size
        self.maps += 1

    def dma_unmap(self, address: int) -> None:
        if self.live.pop(address, None) is None:
            raise RuntimeError(f"INTERNAL: Failed to unregister host memory at address: {address:#x}")


def test_gpu_python_jax_part_as_on_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The script's JAX part through the path it takes on GPUs, on JAX's CPU devices: devices
    that copy every put (bounded groups, two slabs reused, bands of rows written on the devices,
    pinned host memory through the slabs) and a client whose dma_map registers host memory. Its
    stats are the ones gpu_check.sh looks for on a GPU ("jax_dma": "mapped"), and every slab it
    mapped is unmapped by the end of each load."""
    pytest.importorskip("jax")
    import shardload.jax._loader as jl
    from sl_fixtures import devices_copy
    # a 16,384-row embedding: each device's box (1 MiB) is over the pair's group bound with a
    # 2 MiB staging, so it goes in bands through the slabs, as Llama-3-8B's does on one GPU
    ck = tmp_path / "ck"
    shardload.synth(write_config(tmp_path / "config.json", dict(TINY, vocab_size=16384)), ck)
    monkeypatch.setenv("GPU_JAX_PLATFORM", "cpu")
    spec = importlib.util.spec_from_file_location("gpu_python", BENCH / "gpu_python.py")
    assert spec and spec.loader
    gp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gp)
    monkeypatch.setattr(gp, "JAX_LAYERS", 1)
    monkeypatch.setattr(gp, "JAX_REPS", 1)
    monkeypatch.setattr(gp, "JAX_STAGING", 2 << 20)
    devices_copy(monkeypatch)
    client = _RegisteringClient()
    monkeypatch.setattr(jl, "clients", lambda devices: [client])
    r: dict = {}
    gp.jax_checks(str(ck), r)
    assert r["jax_equal_cpu"] is True and r["jax_on_gpus"] is True, r
    assert r["jax_dma"] == "mapped" and r["jax_staging"] == "dma-mapped", r
    assert r["jax_dma_stats"]["staging"] == "dma-mapped" and r["jax_dma_stats"]["parts"] > 0, r
    assert r["jax_dma_stats"]["reused"] > 0 and r["jax_dma_stats"]["copied_bytes"] > 0, r
    assert r["jax_plain_stats"]["dma"] == "off" and r["jax_plain_stats"]["staging"] == "plain", r
    assert "jax_pinned_error" not in r, r.get("jax_pinned_error")
    if "jax_pinned_skipped" not in r:
        assert r["jax_pinned_in_kind"] is True and r["jax_pinned_equal_cpu"] is True, r
    assert client.maps > 0 and client.live == {}
