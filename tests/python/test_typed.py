"""The package is typed: mypy --strict passes on it (ctypes' callback decorators aside)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "python"


def test_mypy_strict() -> None:
    pytest.importorskip("mypy")
    pkg = SRC / "shardload"  # the source tree: mypy run inside site-packages sees other modules
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--ignore-missing-imports",
                        "--disable-error-code", "untyped-decorator", "--no-incremental",
                        str(pkg)], capture_output=True, text=True, timeout=300, cwd=SRC)
    assert r.returncode == 0, r.stdout + r.stderr


# Every bench script, its body checked against the package's types: gpu_python.py and
# gpu_report.py run once per GPU lease (a call to a private method with an old signature cost one),
# the others once per `make bench`, whose report step is the last thing a long run does.


def test_bench_scripts_check() -> None:
    pytest.importorskip("mypy")
    bench = SRC.parent / "bench"
    env = dict(os.environ, MYPYPATH=str(SRC))
    ini = Path(__file__).resolve().parent / "mypy_bench.ini"
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ini), "--no-incremental",
                        *sorted(str(f) for f in bench.glob("*.py"))],
                       capture_output=True, text=True, timeout=300, cwd=bench, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
