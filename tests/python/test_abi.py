"""The ctypes mirrors of the public header's structs (shardload/_native.py) have the C layout:
every field at its offsetof, every struct its sizeof, as the compiler lays out include/shardload.h.
The package's import compares only the sizes with the library's; a field in another place than
the header's (same size, padding moved) shifts the fields after it, and a load would pass the C
library, say, a flag where it reads a plugin path."""
from __future__ import annotations

import shutil
import subprocess
from ctypes import Structure, sizeof
from pathlib import Path

import pytest

from shardload import _native

ROOT = Path(__file__).resolve().parents[2]
MIRRORS: dict[str, type[Structure]] = {
    "sl_tensor_info": _native.TensorInfo, "sl_plan_opts": _native.PlanOpts,
    "sl_param_info": _native.ParamInfo, "sl_load_opts": _native.LoadOpts, "sl_box": _native.Box,
    "sl_load_stats": _native.LoadStats,
}


def c_layout(tmp_path: Path) -> dict[str, int]:
    """"struct" -> sizeof and "struct.field" -> offsetof, from a program the C compiler builds."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler")
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "shardload.h"', "int main(void) {"]
    for c_name, py in MIRRORS.items():
        lines.append(f'    printf("{c_name} %zu\\n", sizeof({c_name}));')
        for f in py._fields_:
            lines.append(f'    printf("{c_name}.{f[0]} %zu\\n", offsetof({c_name}, {f[0]}));')
    lines += ["    return 0;", "}"]
    src, exe = tmp_path / "layout.c", tmp_path / "layout"
    src.write_text("\n".join(lines) + "\n")
    r = subprocess.run([cc, "-std=c11", "-I", str(ROOT / "include"), str(src), "-o", str(exe)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, "a mirrored field is not in the header:\n" + r.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30, check=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


def test_mirrors_match_the_header(tmp_path: Path) -> None:
    c = c_layout(tmp_path)
    wrong = []
    for c_name, py in MIRRORS.items():
        for f in py._fields_:
            got = getattr(py, f[0]).offset
            if got != c[f"{c_name}.{f[0]}"]:
                wrong.append(f"{c_name}.{f[0]}: ctypes offset {got}, C {c[c_name + '.' + f[0]]}")
        if sizeof(py) != c[c_name]:
            wrong.append(f"{c_name}: ctypes size {sizeof(py)}, C {c[c_name]} (a field missing at the end?)")
    assert not wrong, "\n".join(wrong)
