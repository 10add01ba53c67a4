"""The benchmark scripts' contenders still run against this package (make bench is not part of
make test, so an API change would otherwise break them unseen): bench/jax_peers.py's child
process for shardload.jax and device_put on a tiny checkpoint (a vocabulary 8 divides: the
bench's mesh has 8 devices on one axis), the same tensors loaded."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import shardload
from sl_fixtures import TINY, write_config

pytest.importorskip("jax")
pytest.importorskip("safetensors")
BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_jax_peers_contenders_run(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    shardload.synth(write_config(tmp_path / "config.json", dict(TINY, vocab_size=1024)), ck)
    spec = importlib.util.spec_from_file_location("jax_peers", BENCH / "jax_peers.py")
    assert spec is not None and spec.loader is not None
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    got = {how: peers.run(str(ck), how) for how in ("shardload.jax", "device_put")}
    assert all("error" not in r for r in got.values()), got
    assert got["shardload.jax"]["tensors"] == got["device_put"]["tensors"] > 0
    assert got["shardload.jax"]["held"] == got["device_put"]["held"] > 0
