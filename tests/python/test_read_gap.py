"""read_gap="none" (CLI --read-gap none): a rank reads only the bytes its devices need. At tp 2,
o_proj and down_proj are split along their rows (each rank a half of every row), which the
default reads whole (gaps under 1 MiB are read to keep requests large); without gaps the rank
reads exactly its bytes (buffered reads; this checkpoint pads nothing and converts nothing, so
they equal its allocation), and its parameters are the same as the default load's."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import shardload
from sl_fixtures import TINY, cli, write_config  # noqa: F401  (cli is a fixture)

CFG = dict(TINY, vocab_size=1024)  # tp 2 divides it: nothing padded


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("gap")
    out = d / "ckpt"
    shardload.synth(write_config(d / "config.json", CFG), out, max_shard_size=1 << 20)
    return out


def test_no_gap_reads_exactly_the_devices_bytes(ckpt: Path) -> None:
    for rank in (0, 1):
        full = shardload.load(ckpt, tp=2, devices=[rank], io="buffered")
        exact = shardload.load(ckpt, tp=2, devices=[rank], io="buffered", read_gap="none")
        alloc = exact.stats["devices"][0]["allocated_bytes"]
        assert exact.stats["bytes_read"] == alloc, (exact.stats["bytes_read"], alloc)
        assert full.stats["bytes_read"] > 1.2 * alloc  # the row-split weights read whole
        assert exact.checksums(rank) == full.checksums(rank)
        # one request per half row, many in flight at once (slots hold several: rd_slot)
        assert exact.stats["read_requests"] > 10 * full.stats["read_requests"]
        assert exact.stats["read_depth_peak"] > 8, exact.stats["read_depth_peak"]
        # gaps up to 256 bytes read: o_proj's (half of its 512-byte rows), not down_proj's (512)
        some = shardload.load(ckpt, tp=2, devices=[rank], io="buffered", read_gap=257)
        assert alloc < some.stats["bytes_read"] < full.stats["bytes_read"]
        assert some.checksums(rank) == full.checksums(rank)


@pytest.mark.parametrize("bad,err", [(0, ValueError), ((1 << 20) + 1, ValueError),
                                     ("all", TypeError), (True, TypeError)])
def test_bad_read_gap(ckpt: Path, bad: object, err: type) -> None:
    with pytest.raises(err, match="read_gap"):
        shardload.load(ckpt, read_gap=bad)  # type: ignore[arg-type]


def test_cli_read_gap(ckpt: Path, cli: str) -> None:  # noqa: F811
    def run(*extra: str) -> dict:
        p = subprocess.run([cli, "load", str(ckpt), "--tp", "2", "--devices", "1", "--io",
                            "buffered", "--json", "--checksums", *extra], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)
    exact, full = run("--read-gap", "none"), run()
    assert exact["bytes_read"] == exact["devices"][0]["allocated_bytes"] < full["bytes_read"]
    assert exact["devices"][0]["params"] == full["devices"][0]["params"]
    assert exact["read_requests"] > full["read_requests"] > 0
    assert exact["read_depth_peak"] > full["read_depth_peak"] > 0
    for bad in ("64", "2MiB", "0B", "lots"):
        p = subprocess.run([cli, "load", str(ckpt), "--read-gap", bad], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2 and "--read-gap" in p.stderr, (bad, p.stderr)
