"""One process of a 2-process JAX job on CPU (tests/python/test_jax_multihost.py starts two):
jax.distributed over loopback, 4 CPU devices each, a global (2, 4) mesh ("data", "model") whose
row p is process p's devices. For each sharding case it loads the checkpoint with
shardload.jax.load, checks every addressable shard against the oracle bit for bit, checks the
global arrays with a jitted reduction that runs over both processes' shards, and reports the
bytes this process's engine read (stats["bytes_read"]) and its plan's. Prints one JSON line.

Usage: jax_multihost_worker.py PORT PROCESS_ID CHECKPOINT"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, PartitionSpec as P  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the oracle
import oracle_shards as oracle  # noqa: E402
import shardload.jax as sj  # noqa: E402
import shardload.jax._shardings as jsh  # noqa: E402

SEED = 7  # the values test_jax_multihost.py wrote
COLS = [(r"norm\.weight$|inv_freq$", P("data")), (r".", P(None, "data"))]


def word_sum(a: jax.Array) -> int:
    """The sum mod 2**32 of the array's 16- or 32-bit words, computed by XLA over the whole
    global array (both processes' shards): equal to the oracle's only if every shard is right."""
    bits = jnp.uint32 if a.dtype.itemsize == 4 else jnp.uint16
    return int(jax.jit(lambda x: jnp.sum(jax.lax.bitcast_convert_type(x, bits)
                                         .astype(jnp.uint32)))(a))


def oracle_word_sum(w: np.ndarray) -> int:
    return int(np.sum(w.view(np.uint32 if w.itemsize == 4 else np.uint16).astype(np.uint32),
                      dtype=np.uint32))


def check(arrays: dict, want: dict, dst: str | None) -> int:
    shards = 0
    for name, a in arrays.items():
        w = want[name] if dst is None else oracle.convert(want[name], "BF16", dst)
        assert a.shape == w.shape, name
        for s in a.addressable_shards:
            assert s.device.process_index == jax.process_index(), (name, s.device)
            got = np.asarray(s.data).view(np.uint8)
            assert np.array_equal(got, np.ascontiguousarray(w[s.index]).view(np.uint8)), \
                (name, s.device, s.index)
            shards += 1
        assert word_sum(a) == oracle_word_sum(w), name
    return shards


def read_shardings(mesh: Mesh) -> None:
    """What dist="cooperative" reads with: the axes a sharding replicates across processes
    ("data" here) added, minor, to the first dimension they divide; else the sharding as it is."""
    from jax.sharding import NamedSharding
    cases = [(P(), (4, 6), ("data",), ()), (P(), (3, 6), (), ("data",)), (P(), (3, 5), (), ()),
             (P(None, "model"), (6, 8), ("data",), ("model",)),
             (P("model"), (8,), ("model", "data")), (P("model"), (4,), ("model",)),
             (P("data", "model"), (4, 8), ("data",), ("model",))]
    for spec, shape, *want in cases:
        got = jsh.read_sharding(NamedSharding(mesh, spec), shape)
        norm = [jsh.axes(e) for e in got.spec] + [()] * (len(shape) - len(got.spec))
        assert norm == want, (spec, shape, got.spec)


def main() -> None:
    port, pid, path = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=pid, initialization_timeout=60)
    assert jax.device_count() == 8 and jax.local_device_count() == 4
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
    assert all(d.process_index == pid for d in mesh.devices[pid])
    cfg = json.loads((path / "config.json").read_text())
    want = {k: v[1] for k, v in
            oracle.checkpoint_tensors("llama", cfg, "BF16", np.random.default_rng(SEED)).items()}
    read_shardings(mesh)
    cases = {
        # rows split between the processes, replicated over each one's 4 devices
        "halves": ([(r".", P("data"))], None, "independent"),
        # each process's half of the rows, in 4 column tiles (1-D: 4 tiles, replicated over data)
        "tiles": ([(r"norm\.weight$|inv_freq$", P("model")), (r".", P("data", "model"))], "F32",
                  "independent"),
        # the default spmd rule on the last axis: every process needs every byte
        "default": (None, None, "independent"),
        # the same, each byte read by one process and gathered over the devices
        "coop-default": (None, None, "cooperative"),
        # nothing replicated across processes: nothing to gather
        "coop-halves": ([(r".", P("data"))], None, "cooperative"),
        # each process's half of every row: read whole by default (the other half is a small
        # gap), exactly its own bytes with read_gap="none" (buffered reads: no page rounding)
        "cols": (COLS, None, "independent"),
        "cols-exact": (COLS, None, "independent"),
    }
    report = {}
    for case, (rules, dst, dist) in cases.items():
        # many groups (a load that gathers keeps its groups within the staging bound, 512 KiB
        # at 2 MiB): a tensor is gathered while later groups load, its parts deleted under them
        stats: dict = {}
        exact = {"read_gap": "none", "io": "buffered"} if case == "cols-exact" else {}
        arrays = sj.load(path, mesh, rules, dtype=None if dst is None else "float32",
                         stats=stats, dist=dist, staging=(2 << 20) if dist == "cooperative"
                         else (64 << 20), **exact)
        assert stats["read_bytes"] == sj.plan(path, mesh, rules, dist=dist).read_bytes, case
        report[case] = {"read": stats["bytes_read"], "plan_read": stats["read_bytes"],
                        "requests": stats["read_requests"], "depth": stats["read_depth_peak"],
                        "shards": check(arrays, want, dst), "tensors": len(arrays),
                        "gathered": stats["gathered_tensors"], "groups": stats["groups"],
                        "specs": sorted({str(a.sharding.spec) for a in arrays.values()})}
        if case == "coop-default":  # load_into takes dist too: the same shards, f32 on the way
            like = {n: jax.ShapeDtypeStruct(a.shape, jnp.float32, sharding=a.sharding)
                    for n, a in arrays.items()}
            del arrays
            into = sj.load_into(path, like, dist="cooperative")
            report["coop-into"] = {"shards": check(into, want, "F32"), "tensors": len(into)}
            del into
            continue
        del arrays
    print(json.dumps(report), flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
