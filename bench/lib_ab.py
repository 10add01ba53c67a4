#!/usr/bin/env python3
"""Two builds of libshardload.so against each other on one Python contender, hot page cache.

    .venv/bin/python bench/lib_ab.py OLD.so NEW.so CONTENDER TP SCOPE [ROUNDS] [CKPT_DIR]

Each run is a fresh `python_peers.py --child` process (the same contender code, destination
allocation and timing as bench/python_peers.py), with SHARDLOAD_LIBRARY set to one build; the
builds alternate within each round, so slow phases of the machine land on both. Prints each
build's median and every run's seconds. CONTENDER: shardload.load or shardload.load_into; SCOPE:
all or rank0 (python_peers.py says what they mean). Build the old one from a worktree:
`git worktree add /tmp/old REV && cmake -S /tmp/old -B /tmp/old/build && cmake --build
/tmp/old/build --target shardload_shared`.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def warm(ckpt: str) -> None:
    """Reads the checkpoint's files once, so that every run finds them in the page cache."""
    for f in sorted(os.listdir(ckpt)):
        if f.endswith(".safetensors"):
            with open(os.path.join(ckpt, f), "rb") as fh:
                while fh.read(64 << 20):
                    pass


def run(lib: str, name: str, ckpt: str, tp: str, scope: str) -> float:
    """One child: it imports and allocates, says ready, loads on our go; its seconds."""
    env = dict(os.environ, SHARDLOAD_LIBRARY=os.path.abspath(lib))
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "python_peers.py"), "--child", name,
                          ckpt, tp, scope, "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, env=env)
    assert p.stdin is not None and p.stdout is not None
    if p.stdout.readline().strip() != "ready":
        raise SystemExit(f"lib_ab: {name} with {lib} did not start")
    p.stdin.write("go\n")
    p.stdin.flush()
    out = p.stdout.read()
    if p.wait() != 0:
        raise SystemExit(f"lib_ab: {name} with {lib} failed")
    return float(json.loads(out.strip().splitlines()[-1])["seconds"])


def main() -> None:
    if len(sys.argv) < 6:
        raise SystemExit(__doc__)
    old, new, name, tp, scope = sys.argv[1:6]
    rounds = int(sys.argv[6]) if len(sys.argv) > 6 else 7
    ckpt = sys.argv[7] if len(sys.argv) > 7 else "bench/work/tinyllama-1.1b"
    warm(ckpt)
    secs: dict[str, list[float]] = {old: [], new: []}
    for _ in range(rounds):
        for lib in (old, new):
            secs[lib].append(run(lib, name, ckpt, tp, scope))
    for label, lib in (("old", old), ("new", new)):
        v = secs[lib]
        print(f"{name} tp={tp} {scope} {label}: median {statistics.median(v):.3f} s; "
              + " ".join(f"{x:.3f}" for x in v))


if __name__ == "__main__":
    main()
