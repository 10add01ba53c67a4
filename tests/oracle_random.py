"""Random loads through the CLI against the numpy oracle (oracle_shards.py): a random model of
the oracle's dense, MoE and FP8 models, source and target dtype, layout, mesh (T, P, EP),
devices to load, and engine settings the systematic oracle leaves at their defaults: staging
budgets down to 16 KiB and requests down to 4 KiB (chunk boundaries inside rows and inside
elements: the checkpoints' tensors are not aligned to their element size), I/O mode and
threads; and, where the build has the CUDA stand-in (tests/fake_cudart.c, which performs async
copies only when they are fenced: a slot refilled too early gives wrong bytes), the cuda backend
on 1-3 fake GPUs with a random device-to-GPU map; and a third of the loads over HTTP, from a
loopback range server (tests/http_range_server.py, started and stopped here). Every loaded
device's parameters must have the oracle's XXH3 and size.

  python3 tests/oracle_random.py build/shardload [CASES] [SEED]

CASES defaults to 400 (about 15 s here), SEED to a fixed one, so a failure can be rerun:
each failure prints its case and the command."""
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_shards as o  # noqa: E402

# (name, architecture, source dtype): the oracle's models, and FP8 ones of per-tensor, per-channel
# and (DeepSeek-V3's) block scales
MODELS = [("llama", "llama", "BF16"), ("qwen2", "qwen2", "F32"), ("qwen3", "qwen3", "BF16"),
          ("qwen3", "qwen3", "F64"),
          ("mistral", "mistral", "F16"), ("mixtral", "mixtral", "BF16"),
          ("qwen2_moe", "qwen2_moe", "BF16"), ("deepseek_v3", "deepseek_v3", "BF16"),
          ("llama-pt", "llama", "BF16"), ("mixtral-ct", "mixtral", "BF16"),
          ("qwen2-fbgemm", "qwen2", "BF16"), ("deepseek_v3-ctblock", "deepseek_v3", "BF16")]
BLOCK = {"deepseek_v3-ctblock"}  # T = 4 would split o_proj below a block: T 1 or 2
STAGING = ["16K", "20K", "64K", "200K", "1M", "64"]
REQUEST = [None, "4K", "12K", "64K", "1M"]


def build(tmp, name, arch, src_dt, rng, shuffle):
    more = {k[0]: v for k, v in o.FP8_MORE.items()}
    cfg = dict(more.get(name) or o.ARCHS.get(arch) or o.MOE_ARCHS[arch], torch_dtype="bfloat16")
    path = os.path.join(tmp, "%s-%s" % (name, src_dt))
    os.mkdir(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    ck = o.checkpoint_tensors(arch, cfg, src_dt, rng, o.FP8_MORE_SCALE_DT.get(name))
    o.write_checkpoint(path, ck, 3, shuffle)
    return path, cfg, ck


def pick(r, name, arch, cfg, fake):
    """A random case: (layout, T, P, ep, target, devices or None, engine args, environment)."""
    moe = arch in o.MOE_ARCHS
    fp8 = "quantization_config" in cfg
    layout = "spmd" if r.random() < 0.25 and not fp8 else "tp"
    # (T > experts is refused, as in vLLM)
    T = r.choice([1, 2] if name in BLOCK else [1, 2, 4] if moe or fp8 else [1, 2, 4, 8])
    P = 1 if layout == "spmd" else r.choice([1, 1, 2, 3][:4 if cfg["num_hidden_layers"] >= 3 else 3])
    ep = layout == "tp" and moe and r.random() < 0.5
    target = r.choice(["BF16", "F32", "F16"])
    n = T * P
    devices = sorted(r.sample(range(n), r.randint(1, n))) if n > 1 and r.random() < 0.4 else None
    staging = r.choice(STAGING)
    request = r.choice(REQUEST)
    engine = ["--staging", staging, "--io", r.choice(["auto", "direct", "buffered"])]
    if request:
        engine += ["--request", request]
    if r.random() < 0.5:
        engine += ["--threads", str(r.choice([1, 2, 3, 8]))]
    env = {}
    if fake and r.random() < 0.4:
        if staging == "16K":  # cuda converts through a buffer of its own: 20 KiB at least
            engine[1] = "20K"
        gpus = r.randint(1, 3)
        engine += ["--device", "cuda", "--gpus", ",".join(str(r.randrange(gpus)) for _ in range(n))]
        env = {"SL_CUDART": fake, "FAKE_CUDA_GPUS": str(gpus)}
        if r.random() < 0.5:  # widening conversions by the stand-in's kernels (cuda_kernels.h)
            env["SL_CUDA_CONVERT"] = "gpu"
    return layout, T, P, ep, target, devices, engine, env


def serve(root):
    """The range server on root, and its base URL, once it accepts connections."""
    portfile = os.path.join(root, ".port")
    here = os.path.dirname(os.path.abspath(__file__))
    server = subprocess.Popen([sys.executable, os.path.join(here, "http_range_server.py"), root,
                               portfile], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (os.path.exists(portfile) and open(portfile).read().strip()):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise SystemExit("oracle_random: the range server did not start")
        time.sleep(0.05)
    return server, "http://127.0.0.1:%s/" % open(portfile).read().strip()


def check(exe, path, arch, cfg, ck, src_dt, case):
    """None, or what went wrong, with the command to rerun it."""
    layout, T, P, ep, target, devices, engine, env = case
    try:
        o.check(exe, path, arch, cfg, ck, layout, T, P, src_dt, target, ep, devices, engine, env)
    except AssertionError as e:
        cmd = (["%s=%s" % kv for kv in env.items()] + [exe, "load", path] +
               o.load_args(layout, T, P, target, ep, devices, engine))
        return "%s: %s" % (" ".join(cmd), e)
    return None


def main():
    exe = os.path.abspath(sys.argv[1])
    cases = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 20261202
    rng, shuffle, r = np.random.default_rng(seed), random.Random(seed), random.Random(seed)
    fake = os.environ.get("FAKE_CUDART") or os.path.join(os.path.dirname(exe), "tests",
                                                          "libfake_cudart.so")
    fake = fake if os.path.isfile(fake) else None
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        models = [(name, arch, src) + build(tmp, name, arch, src, rng, shuffle)
                  for name, arch, src in MODELS]
        server, url = serve(tmp)
        try:
            for k in range(cases):
                name, arch, src_dt, path, cfg, ck = r.choice(models)
                case = pick(r, name, arch, cfg, fake)
                if r.random() < 1 / 3:
                    path = url + os.path.basename(path)
                err = check(exe, path, arch, cfg, ck, src_dt, case)
                if err:
                    failed += 1
                    print("FAIL case %d (%s %s): %s" % (k, name, src_dt, err))
        finally:
            server.terminate()
            server.wait(timeout=10)
    print("%d passed, %d failed" % (cases - failed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
