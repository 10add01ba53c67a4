"""shardload.jax.load in a real multi-process JAX job: two processes on loopback
(jax.distributed, 4 CPU devices each, a global (2, 4) mesh), each loading only its addressable
devices. Every shard is checked against the oracle, the global arrays against a reduction XLA
runs over both processes, and the bytes each process read against what its devices need: with
the rows split between the processes each reads about half the checkpoint, and the two halves
together cover it; with the default rule (replicated across the processes) each reads all of it,
or, with dist="cooperative", half, the rest gathered over the devices; with the columns split,
each reads every row whole by default and exactly its half with read_gap="none"
(tests/python/jax_multihost_worker.py is one process)."""
from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

from sl_fixtures import HERE  # noqa: E402  (puts tests/ on the path, for the oracle)
import oracle_shards as oracle  # noqa: E402

# Tensors large enough that a process's half of each is a read of its own (halves of 64 KiB to
# 2 MiB), not merged with the other half as a small gap would be.
CONFIG = dict(oracle.ARCHS["llama"], hidden_size=512, intermediate_size=2048, vocab_size=4096,
              num_hidden_layers=2, torch_dtype="bfloat16")
SEED = 7  # jax_multihost_worker.py regenerates the values from it


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_job(path: Path) -> list[dict]:
    port = free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    procs = [subprocess.Popen([sys.executable, str(HERE / "jax_multihost_worker.py"), str(port),
                               str(pid), str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for pid in (0, 1)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, err[-4000:]
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def test_two_processes_read_their_own_halves(tmp_path: Path) -> None:
    """dist="independent": each process reads what its devices hold; dist="cooperative": what is
    replicated across the processes is read in halves and gathered over the devices."""
    ck = oracle.checkpoint_tensors("llama", CONFIG, "BF16", np.random.default_rng(SEED))
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    oracle.write_checkpoint(str(tmp_path), ck, 3, random.Random(3))
    files = sum(f.stat().st_size for f in tmp_path.glob("*.safetensors"))
    data = sum(a.nbytes for _, a in ck.values())
    r0, r1 = run_job(tmp_path)
    print(f"bytes read by process 0 / 1 (checkpoint files {files:,}):")
    for case in ("halves", "tiles", "default", "coop-default", "coop-halves", "cols", "cols-exact"):
        print(f"  {case}: {r0[case]['read']:,} / {r1[case]['read']:,} "
              f"(plans: {r0[case]['plan_read']:,} / {r1[case]['plan_read']:,})")
    for r in (r0, r1):
        # the default rule needs every byte on each process; all its tensors but the rotary cache
        assert r["default"]["tensors"] == len(ck) - 1
        assert r["default"]["shards"] == 4 * (len(ck) - 1)
        assert data - 2**16 <= r["default"]["read"] <= files + 2**16
        for case in ("halves", "tiles"):
            assert r[case]["tensors"] == len(ck)
            assert r[case]["shards"] == 4 * len(ck)
            # the engine read what the plan needs and little more: gaps too small to skip
            # (docs/engine.md, "Read once"), rounded to 4 KiB, in each group's C load
            assert r[case]["plan_read"] <= r[case]["read"] <= 1.05 * r[case]["plan_read"], \
                (case, r[case])
            # a process reads its half, not the other process's (small tensors' halves merge)
            assert r[case]["read"] <= 0.56 * files, (case, r[case], files)
    for r in (r0, r1):
        # columns split between the processes: the default reads each row whole; read_gap="none"
        # reads exactly what the process's devices hold, the same shards
        assert r["cols"]["shards"] == r["cols-exact"]["shards"] == 4 * len(ck)
        assert r["cols-exact"]["plan_read"] == r["cols"]["plan_read"] <= 0.56 * files
        assert r["cols-exact"]["read"] == r["cols-exact"]["plan_read"], r["cols-exact"]
        assert r["cols"]["read"] >= 0.9 * files, r["cols"]
        # a request per row piece, many in flight (slots hold several: docs/engine.md step 3)
        assert r["cols-exact"]["requests"] > 10 * r["cols"]["requests"] > 0, r
        assert r["cols-exact"]["depth"] > 8, r["cols-exact"]
    for case in ("halves", "tiles", "coop-default"):  # between them, every byte
        assert r0[case]["read"] + r1[case]["read"] >= data, case
    for r in (r0, r1):
        # cooperative: the default rule's tensors are read in halves, one per process (1-D ones
        # too: 512 / 2), and gathered to the same shardings as the independent load's
        coop = r["coop-default"]
        assert coop["tensors"] == r["default"]["tensors"] and coop["shards"] == r["default"]["shards"]
        assert coop["specs"] == r["default"]["specs"] and coop["gathered"] == coop["tensors"]
        assert coop["groups"] >= 10, coop
        # (o/down's column tiles of a half are read as whole rows of that half, more gaps)
        assert coop["plan_read"] <= coop["read"] <= 1.1 * coop["plan_read"], coop
        assert coop["read"] <= 0.56 * files, (coop, files)
        assert r["coop-into"] == {"shards": coop["shards"], "tensors": coop["tensors"]}
        # already split between the processes: read as the independent load reads, nothing moved
        assert r["coop-halves"]["gathered"] == 0
        assert r["coop-halves"]["plan_read"] == r["halves"]["plan_read"]
        assert r["coop-halves"]["read"] <= 0.56 * files
