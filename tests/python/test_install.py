"""`pip install .` into a fresh virtual environment builds the C core into the package, and
`import shardload` there works with NumPy alone: no torch, no JAX."""
from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(os.environ.get("SL_SKIP_SLOW") == "1", reason="SL_SKIP_SLOW=1")
def test_pip_install_into_a_fresh_venv(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    build = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", str(ROOT)], capture_output=True,
                       text=True, timeout=900, env=build,
                       cwd=tmp_path)  # not the source tree: the installed package is imported
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # shardload.jax (a subpackage) is in the wheel too, and imports JAX only when it loads
    code = ("import sys, shardload, shardload.jax._loader; "
            "assert 'torch' not in sys.modules and 'jax' not in sys.modules; "
            "print(shardload.__version__, shardload.plan(config=sys.argv[1], tp=8).devices[0].bytes)")
    r = subprocess.run([str(py), "-c", code, str(ROOT / "tests/configs/llama-3-8b.json")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0.1.0", "2008031232"]
