"""Random loads over MPI against one process: a random model, mesh and engine settings of
oracle_random.py (which checks one process against the numpy oracle), loaded by 2-4 ranks on
this host with --dist cooperative or independent and 1 or more devices per rank; every device's
checksum and allocation must equal the single-process load's; where the build has the CUDA
stand-in (tests/fake_cudart.c), some loads go to fake GPUs, as in oracle_random, so that
received pieces too are copied asynchronously out of staging. A budget too small for
cooperative's slots is refused with the least --staging that holds them; the case is then
loaded at that value. Skips (77) without mpirun or without MPI in the build.

  python3 tests/oracle_random_mpi.py build/shardload [CASES] [SEED]

CASES defaults to 40 (about 30 s here), SEED to a fixed one; each failure prints its command."""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_random as R  # noqa: E402
import oracle_shards as o  # noqa: E402

# Containers often have no usable network interface: shared memory and self are enough here.
ENV = dict(os.environ, OMPI_MCA_btl="self,vader", OMPI_MCA_plm_rsh_agent="",
           OMPI_MCA_rmaps_base_oversubscribe="1")
MPIRUN = ["timeout", "120", "mpirun", "--allow-run-as-root", "--oversubscribe"]


def devices(out):
    """(index, allocated bytes, [(parameter, XXH3)]) of each device in a --json report; a report
    without the checksums is an error, not an empty list."""
    rep = json.loads(out.strip().splitlines()[-1])
    return [(d["index"], d["allocated_bytes"], [(q["name"], q["xxh3"]) for q in d["params"]])
            for d in rep["devices"]]


def ranks(r, n):
    """(ranks, devices per rank) for a mesh of n devices: 2 to 4 ranks, or None."""
    ks = [k for k in range(1, n + 1) if n % k == 0 and 2 <= n // k <= 4]
    if not ks:
        return None
    k = r.choice(ks)
    return n // k, k


def run_case(exe, path, args, np_, k, dist, env):
    """None, or what went wrong, with the command (env: more environment variables)."""
    env = dict(ENV, **env)
    ref = subprocess.run([exe, "load", path] + args, capture_output=True, text=True, env=env)
    cmd = MPIRUN + ["-np", str(np_), exe, "load", path] + args + ["--dist", dist,
                                                                  "--devices-per-rank", str(k)]
    got = subprocess.run(cmd, capture_output=True, text=True, env=env)
    least = re.search(r"--dist cooperative over \d+ ranks: .* \(--staging (\d+K)\)", got.stderr)
    if got.returncode and least:
        cmd[cmd.index("--staging") + 1] = least.group(1)
        got = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if ref.returncode or got.returncode:
        cmd = ["%s=%s" % kv for kv in env.items() if kv[0].startswith(("SL_CUDART", "SL_CUDA_CONVERT", "FAKE"))] + cmd
        return "%s: exit %d (one process: %d): %s%s" % (" ".join(cmd), got.returncode,
                                                         ref.returncode, ref.stderr[-300:],
                                                         got.stderr[-300:])
    a, b = devices(ref.stdout), devices(got.stdout)
    if a != b:
        return "%s: devices differ from one process's:\n  %s\n  %s" % (" ".join(cmd), a, b)
    return None


def main():
    exe = os.path.abspath(sys.argv[1])
    cases = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 20261202
    if not shutil.which("mpirun"):
        print("skip: no mpirun")
        sys.exit(77)
    rng, shuffle, r = np.random.default_rng(seed), random.Random(seed), random.Random(seed)
    fake = os.path.join(os.path.dirname(exe), "tests", "libfake_cudart.so")
    fake = fake if os.path.isfile(fake) else None
    failed = done = 0
    with tempfile.TemporaryDirectory() as tmp:
        models = [(name, arch, src) + R.build(tmp, name, arch, src, rng, shuffle)
                  for name, arch, src in R.MODELS]
        probe = subprocess.run(MPIRUN + ["-np", "1", exe, "load", models[0][3], "--dist",
                                         "cooperative"], capture_output=True, text=True, env=ENV)
        if "built without it" in probe.stderr:
            print("skip: built without MPI")
            sys.exit(77)
        while done < cases:
            name, arch, src_dt, path, cfg, ck = r.choice(models)
            layout, T, P, ep, target, _, engine, env = R.pick(r, name, arch, cfg, fake)
            split = ranks(r, T * P)
            if split is None:
                continue
            done += 1
            args = o.load_args(layout, T, P, target, ep, None, engine) + ["--checksums", "--json"]
            err = run_case(exe, path, args, split[0], split[1],
                           r.choice(["cooperative", "independent"]), env)
            if err:
                failed += 1
                print("FAIL case %d (%s %s): %s" % (done, name, src_dt, err))
    print("%d passed, %d failed" % (cases - failed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
