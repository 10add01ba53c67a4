#!/usr/bin/env python3
"""remote.py - the remote-source part of `make bench` (issue 17 item 6; bench/remote.sh runs it).

The same checkpoint loaded by shardload from local files (page cache warm), from the loopback HTTP
server of the tests (tests/http_range_server.py) and from moto's S3 server on loopback (SigV4
checked), and read by runai-model-streamer from the same S3 objects (SafetensorsStreamer, cpu), in
rotated order per round. Every shardload run's checksums are compared with the local load's.

  remote.py CKPT_DIR SHARDLOAD OUT.jsonl OUT.md     (BENCH_ROUNDS, default 3; BENCH_TP, default 2)

Both servers are Python: their speed, not the loader's, bounds these figures (docs/remote.md).
"""
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "tests")
VPY = sys.executable


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_url(url, proc, secs=30):
    t = time.time()
    while time.time() - t < secs:
        if proc.poll() is not None:
            raise RuntimeError("server exited: %s" % url)
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except Exception:   # noqa: BLE001 - not up yet
            time.sleep(0.1)
    raise RuntimeError("server did not start: " + url)


def sums(js):
    return re.findall(r'"xxh3":"([0-9a-f]+)"', js)


def sl_load(sl, src, tp, env=None, extra=()):
    cmd = [sl, "load", src, "--tp", str(tp), "--checksums", "--json", *extra]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), r.stderr.strip()))
    j = json.loads(r.stdout)
    return {"seconds": j["seconds"], "wall": wall, "bytes": j["bytes_read"], "sums": sums(r.stdout)}


RUNAI = r"""
import sys, time, json
from runai_model_streamer import SafetensorsStreamer
t = time.perf_counter(); n = 0
with SafetensorsStreamer() as st:
    for f in sys.argv[1:]:
        st.stream_file(f, device="cpu")
        for name, x in st.get_tensors():
            n += x.numel() * x.element_size()
print(json.dumps({"seconds": time.perf_counter() - t, "bytes": n}))
"""


def runai(urls, env):
    t = time.perf_counter()
    r = subprocess.run([VPY, "-c", RUNAI, *urls], capture_output=True, text=True, env=env, timeout=900)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError("runai-model-streamer: " + (r.stderr.strip().splitlines() or ["?"])[-1])
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return {"seconds": j["seconds"], "wall": wall, "bytes": j["bytes"]}


def main():
    ck, sl, out_jsonl, out_md = sys.argv[1:5]
    rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
    tp = int(os.environ.get("BENCH_TP", "2").split()[0])
    shards = sorted(f for f in os.listdir(ck) if f.endswith(".safetensors"))
    root, name = os.path.dirname(os.path.abspath(ck)), os.path.basename(os.path.abspath(ck))
    procs, tmp = [], tempfile.mkdtemp(prefix="sl_bench_remote.")
    rows, notes = [], []
    try:
        hp = os.path.join(tmp, "http.port")
        procs.append(subprocess.Popen([VPY, os.path.join(TESTS, "http_range_server.py"), root, hp]))
        while not os.path.exists(hp):
            time.sleep(0.05)
        http = "http://127.0.0.1:%s" % open(hp).read()
        mport = free_port()
        s3e = "http://127.0.0.1:%d" % mport
        env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="1000000000")
        procs.append(subprocess.Popen([os.path.join(os.path.dirname(VPY), "moto_server"), "-H", "127.0.0.1",
                                       "-p", str(mport)], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        wait_url(s3e + "/moto-api/", procs[-1])
        setup = [VPY, os.path.join(TESTS, "s3_setup.py"), s3e]
        keys = os.path.join(tmp, "keys")
        subprocess.run(setup + ["user", keys], check=True)
        subprocess.run(setup + ["upload", "bench", name, ck], check=True)
        subprocess.run(setup + ["auth", "0"], check=True)
        key, secret = open(keys).read().split()
        s3env = dict(os.environ, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret, AWS_ENDPOINT_URL=s3e,
                     AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
                     RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING="0", AWS_SHARED_CREDENTIALS_FILE=os.devnull)
        ref = sl_load(sl, ck, tp)
        contenders = [
            ("shardload local", lambda: sl_load(sl, ck, tp)),
            ("shardload http", lambda: sl_load(sl, "%s/%s/" % (http, name), tp)),
            ("shardload s3", lambda: sl_load(sl, "s3://bench/%s/" % name, tp, env=s3env)),
            ("runai-model-streamer s3", lambda: runai(["s3://bench/%s/%s" % (name, f) for f in shards], s3env)),
        ]
        for r in range(rounds):
            for k in range(len(contenders)):
                who, fn = contenders[(k + r) % len(contenders)]
                try:
                    res = fn()
                except Exception as e:   # noqa: BLE001 - reported, the others go on
                    notes.append("%s, round %d: %s" % (who, r + 1, e))
                    continue
                if "sums" in res and res.pop("sums") != ref["sums"]:
                    notes.append("%s, round %d: checksums differ from the local load" % (who, r + 1))
                rows.append(dict(res, who=who, round=r + 1, tp=tp))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
    with open(out_jsonl, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    total = sum(os.path.getsize(os.path.join(ck, f)) for f in shards)
    lines = ["## Remote sources (bench/remote.py, issue 17 item 6)", "",
             "%s (%d files, %.1f MB), tp %d, %d rounds in rotated order; loopback servers: "
             "tests/http_range_server.py (Python) and moto's S3 server (Python, SigV4 checked). "
             "The servers bound these figures; the local load is from the page cache." %
             (name, len(shards), total / 1e6, tp, rounds), "",
             "| contender | median s (load) | median s (process) | GB/s |", "|---|---|---|---|"]
    for who, _ in contenders:
        rs = [x for x in rows if x["who"] == who]
        if not rs:
            lines.append("| %s | not run | | |" % who)
            continue
        s = statistics.median(x["seconds"] for x in rs)
        w = statistics.median(x["wall"] for x in rs)
        lines.append("| %s | %.3f | %.3f | %.3f |" % (who, s, w, total / s / 1e9))
    if notes:
        lines += ["", "Notes:"] + ["- " + n for n in notes]
    with open(out_md, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
