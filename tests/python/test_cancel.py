"""Ctrl-C and shardload.cancel() stop a load or a reshard inside the C call, not after it."""
from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import shardload
from sl_fixtures import TINY, tiny_ckpt, tiny_config, write_config  # noqa: F401 - fixtures

STAGING = 64 << 10   # small slots: many read requests, so a stop has many chances to be seen


@pytest.fixture(autouse=True)
def _sigint_raises() -> Iterator[None]:
    """Python's own SIGINT handler for these tests: a process started with SIGINT ignored (a
    background job of a non-interactive shell, as `make test &` in a script) keeps it ignored,
    and no KeyboardInterrupt would ever be raised."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)


class _Interrupter:
    """A slow progress callback that sends this process SIGINT at its first call and records
    the last (done, total): a stop inside the C call leaves done < total."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, done: int, total: int) -> None:
        if not self.calls:
            _sigint()
        self.calls.append((done, total))
        time.sleep(0.01)   # the load outlasts the main thread's wait for the signal


def test_ctrl_c_stops_a_load_inside_the_c_call(tiny_ckpt: Path) -> None:
    stop = _Interrupter()
    with pytest.raises(KeyboardInterrupt):
        shardload.load(tiny_ckpt, tp=2, staging=STAGING, progress=stop)
    done, total = stop.calls[-1]
    assert total > 0 and done < total, f"the load ran to the end ({done} of {total} bytes)"
    with shardload.load(tiny_ckpt, tp=2, staging=STAGING) as m:   # the request was withdrawn
        assert m.stats["bytes_read"] > 0


@pytest.fixture(scope="module")
def mid_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 120 MB: a reshard of it with small staging lasts long enough to be interrupted."""
    cfg = dict(TINY, hidden_size=1024, intermediate_size=4096, num_hidden_layers=4,
               num_attention_heads=16, num_key_value_heads=4, head_dim=64)
    d = tmp_path_factory.mktemp("mid")
    out = d / "ck"
    shardload.synth(write_config(d / "config.json", cfg), out, max_shard_size=32 << 20)
    return out


def test_ctrl_c_stops_a_reshard_and_removes_its_files(mid_ckpt: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    started = threading.Event()

    def watch() -> None:   # SIGINT once the reshard has begun writing
        end = time.monotonic() + 60
        while time.monotonic() < end and not any(out.iterdir()):
            time.sleep(0.002)
        started.set()
        _sigint()

    threading.Thread(target=watch, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        shardload.reshard(mid_ckpt, out, tp=4, staging=STAGING)
    assert started.is_set()
    assert sorted(p.name for p in out.iterdir()) == [], "an interrupted reshard left files"
    shardload.reshard(mid_ckpt, out, tp=4, staging=STAGING)   # and the next one runs
    assert len(list(out.glob("model-rank-*-part-*.safetensors"))) >= 4


def test_cancel_from_another_thread_raises_cancelled(tiny_ckpt: Path) -> None:
    asked: list[threading.Thread] = []

    def progress(done: int, total: int) -> None:
        if not asked:
            asked.append(threading.Thread(target=shardload.cancel))
            asked[0].start()
            asked[0].join()

    try:
        with pytest.raises(shardload.CancelledError):
            shardload.load(tiny_ckpt, tp=4, staging=STAGING, progress=progress)
        with pytest.raises(shardload.CancelledError):   # the request holds ...
            shardload.load(tiny_ckpt, tp=1, staging=STAGING)
    finally:
        shardload.clear_cancel()                         # ... until withdrawn
    with shardload.load(tiny_ckpt, tp=1, staging=STAGING) as m:
        assert m.stats["bytes_read"] > 0


def test_ctrl_c_stops_a_jax_load_inside_the_c_call(tiny_ckpt: Path) -> None:
    jax = pytest.importorskip("jax")
    import numpy as np
    from jax.sharding import Mesh

    import shardload.jax as sjax
    mesh = Mesh(np.array(jax.devices()[:1]), ("model",))   # vocab 1001 splits no further
    stop = _Interrupter()
    with pytest.raises(KeyboardInterrupt):
        sjax.load(tiny_ckpt, mesh, staging=4 << 20, progress=stop)
    done, total = stop.calls[-1]
    assert total > 0 and done < total, f"the load ran to the end ({done} of {total} bytes)"
    assert sjax.load(tiny_ckpt, mesh, staging=4 << 20)   # the request was withdrawn


def test_cancel_stops_checkpoint_read(mid_ckpt: Path) -> None:
    """Checkpoint.read of one tensor checks for a stop between its chunks: after cancel() it
    raises CancelledError naming the file (it read to the end whatever was asked before), and
    reads again once the request is withdrawn."""
    ck = shardload.open(mid_ckpt)
    t = max(ck.tensors, key=lambda t: t.nbytes)
    shardload.cancel()
    try:
        with pytest.raises(shardload.CancelledError, match=r"\.safetensors: cancelled"):
            ck.read(t.name)
    finally:
        shardload.clear_cancel()
    assert ck.read(t.name).nbytes == t.nbytes


def test_ctrl_c_during_checkpoint_read(mid_ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during Checkpoint.read is seen while the C call runs (on a worker thread, as
    load's): the library is asked to stop, the read fails at its next chunk (SL_E_CANCELLED),
    and KeyboardInterrupt goes on. The C read is made to start late, once SIGINT has landed."""
    import shardload._native as N
    ck = shardload.open(mid_ckpt)
    t = max(ck.tensors, key=lambda t: t.nbytes)
    real = N.lib
    statuses: list[int] = []

    class Slow:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def sl_checkpoint_read(self, *args: object) -> int:
            _sigint()
            time.sleep(0.5)   # the main thread's wait sees the signal and calls sl_cancel
            statuses.append(int(real.sl_checkpoint_read(*args)))
            return statuses[-1]
    monkeypatch.setattr(N, "lib", Slow())
    with pytest.raises(KeyboardInterrupt):
        ck.read(t.name)
    assert statuses == [34]   # SL_E_CANCELLED: the C read stopped, not the wait alone
    monkeypatch.setattr(N, "lib", real)
    assert ck.read(t.name).nbytes == t.nbytes   # the request was withdrawn
