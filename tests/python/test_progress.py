"""progress=None: one tqdm bar on a terminal, for shardload.load and shardload.jax.load alike
(JAX's load is many C loads, one per group: still one bar, ending at the plan's bytes), and
nothing at all when stderr is not a terminal; progress=True: a bar wherever stderr goes;
progress=False: none. Each load runs in a subprocess whose stderr is a
pseudo-terminal."""
from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from sl_fixtures import tiny_ckpt, tiny_config  # noqa: F401 - fixtures

pytest.importorskip("tqdm")

LOADS = {
    "load": "import shardload; shardload.load(sys.argv[1], tp=2, staging=4 << 20, progress=P)",
    # groups of 64 KiB (CPU devices adopt the buffers, so groups are otherwise 1 GiB: one here)
    "jax": ("import jax, numpy as np, shardload.jax as sj, shardload.jax._loader as jl; "
            "from jax.sharding import Mesh; jl.ADOPTED_GROUP = 64 << 10; sj.load(sys.argv[1], Mesh(np.array(jax.devices()[:1]), ('model',)), "
            "staging=2 << 20, stats=st, progress=P); print(st['groups'], st['read_bytes'])"),
}


def _run(code: str, ckpt: Path, tty: bool, progress: str = "None") -> tuple[str, str]:
    """stdout and stderr of `code` (its progress= P) run with stderr on a pseudo-terminal (tty)
    or a pipe."""
    argv = [sys.executable, "-c", f"import sys; st = {{}}; P = {progress}; " + code, str(ckpt)]
    if not tty:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout, r.stderr
    master, slave = pty.openpty()
    # a terminal of 120 columns: on one of 0 (a fresh pty's size) tqdm draws nothing
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    err = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed its end: all is read
            break
        if not chunk:
            break
        err += chunk
    os.close(master)
    out, _ = p.communicate(timeout=10)
    assert p.returncode == 0, err.decode(errors="replace")
    return out, err.decode(errors="replace")


@pytest.mark.parametrize("front", LOADS)
@pytest.mark.parametrize("progress, tty", [("None", True), ("True", False)])
def test_one_bar(tiny_ckpt: Path, front: str, progress: str, tty: bool) -> None:
    """None: a bar on a terminal; True: a bar wherever stderr goes."""
    out, err = _run(LOADS[front], tiny_ckpt, tty=tty, progress=progress)
    label = "shardload.jax" if front == "jax" else "shardload"
    bars = [line for line in err.replace("\r", "\n").splitlines() if line.startswith(label + ":")]
    assert bars, err
    assert "100%" in bars[-1], bars[-1]
    if front == "jax":
        groups = int(out.split()[0])
        assert groups > 1, out  # several C loads, yet one bar: every line is the same bar's
        assert {line.startswith("shardload.jax:") for line in bars} == {True}
        assert not [line for line in err.splitlines() if line.startswith("shardload:")], err


@pytest.mark.parametrize("front", LOADS)
@pytest.mark.parametrize("progress, tty", [("None", False), ("False", True)])
def test_no_bar(tiny_ckpt: Path, front: str, progress: str, tty: bool) -> None:
    """None: nothing when stderr is not a terminal; False: nothing on a terminal either."""
    _, err = _run(LOADS[front], tiny_ckpt, tty=tty, progress=progress)
    assert "shardload" not in err and "%" not in err, err


def test_odd_stderr_and_falsy_callables(tiny_ckpt: Path) -> None:
    """progress=None with stderr closed (None) or an object without isatty: no bar, no error; a
    callable that is falsy (an empty list subclass) is still called."""
    code = ("import sys, shardload\n"
            "class Sink:\n    def write(self, s): return len(s)\n    def flush(self): pass\n"
            "class Recorder(list):\n    def __call__(self, done, total): self.append((done, total))\n"
            "for err in (None, Sink()):\n    sys.stderr = err\n    shardload.load(sys.argv[1], tp=2)\n"
            "r = Recorder()\nshardload.load(sys.argv[1], tp=2, progress=r)\n"
            "print(len(r) > 0 and r[-1][0] == r[-1][1] > 0)\n")
    r = subprocess.run([sys.executable, "-c", code, str(tiny_ckpt)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stdout + r.stderr
