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
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import python_peers as peers  # noqa: E402  (its child, handshake and page-cache warming)


def run(lib: str, name: str, ckpt: str, tp: str, scope: str) -> float:
    """One child with SHARDLOAD_LIBRARY=lib (inherited): it imports and allocates, says ready,
    loads on our go; its seconds."""
    os.environ["SHARDLOAD_LIBRARY"] = os.path.abspath(lib)
    argv = [sys.executable, os.path.join(HERE, "python_peers.py"), "--child", name, ckpt, tp,
            scope, "0"]
    rc, out, err, _, _, _ = peers.run_child(argv, 600, lambda: None, True)
    if rc != 0:
        raise SystemExit(f"lib_ab: {name} with {lib} failed: {err.strip()[-300:]}")
    return float(json.loads(out.strip().splitlines()[-1])["seconds"])


def main() -> None:
    if len(sys.argv) < 6:
        raise SystemExit(__doc__)
    old, new, name, tp, scope = sys.argv[1:6]
    rounds = int(sys.argv[6]) if len(sys.argv) > 6 else 7
    ckpt = os.path.abspath(sys.argv[7] if len(sys.argv) > 7 else "bench/work/tinyllama-1.1b")
    peers.warm(peers.ckpt_files(ckpt))   # once: every run finds the files in the page cache
    builds = {"old": old, "new": new}   # by label: the same file twice is an A/A run
    secs: dict[str, list[float]] = {label: [] for label in builds}
    for _ in range(rounds):
        for label, lib in builds.items():
            secs[label].append(run(lib, name, ckpt, tp, scope))
    for label, v in secs.items():
        print(f"{name} tp={tp} {scope} {label}: median {statistics.median(v):.3f} s; "
              + " ".join(f"{x:.3f}" for x in v))


if __name__ == "__main__":
    main()
