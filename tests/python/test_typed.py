"""The package is typed: mypy --strict passes on it (ctypes' callback decorators aside)."""
from __future__ import annotations

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
