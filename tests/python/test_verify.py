"""verify= / manifest= (issue 17 item 4): every file's SHA-256 checked in the load's own pass, the
bytes equal an unverified load; a flipped byte in any file is a LoadError naming it; for load and
load_into alike. With write_manifest's XXH3 blocks, a load of some devices reads and checks only
the blocks it needs: a flipped byte in one of them is caught, naming the byte range, one in a
block far from every needed byte is not read at all; a stale manifest is refused."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

import shardload
from sl_fixtures import tiny_ckpt, tiny_config  # noqa: F401  (pytest fixtures)


def _manifest(ck: Path, out: Path) -> Path:
    out.write_text("".join(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n"
                           for f in sorted(ck.glob("*.safetensors"))))
    return out


def test_verified_load_equals_plain(tiny_ckpt: Path, tmp_path: Path) -> None:  # noqa: F811
    man = _manifest(tiny_ckpt, tmp_path / "SHA256SUMS")
    files = sorted(tiny_ckpt.glob("*.safetensors"))
    with shardload.load(tiny_ckpt, tp=2) as plain, \
            shardload.load(tiny_ckpt, tp=2, manifest=man, staging=1 << 20) as checked:
        assert [checked.checksums(d) for d in range(2)] == [plain.checksums(d) for d in range(2)]
        s = checked.stats
        assert s["verified_files"] == len(files)
        assert s["verified_bytes"] == sum(f.stat().st_size for f in files)
        assert plain.stats["verified_files"] == 0


def test_flipped_byte_in_each_file(tiny_ckpt: Path, tmp_path: Path) -> None:  # noqa: F811
    man = _manifest(tiny_ckpt, tmp_path / "SHA256SUMS")
    for f in sorted(tiny_ckpt.glob("*.safetensors")):
        bad = tmp_path / f"bad-{f.stem}"
        shutil.copytree(tiny_ckpt, bad)
        data = bytearray((bad / f.name).read_bytes())
        data[-1] ^= 0x40
        (bad / f.name).write_bytes(bytes(data))
        with pytest.raises(shardload.LoadError) as e:
            shardload.load(bad, tp=2, manifest=man)
        assert e.value.status == "SL_E_INTEGRITY"
        assert f"{bad / f.name}: SHA-256" in e.value.message and "\n" not in e.value.message
        shardload.load(bad, tp=2).close()   # unverified, the same damage loads


def test_load_into_verifies(tiny_ckpt: Path, tmp_path: Path) -> None:  # noqa: F811
    plan = shardload.plan(tiny_ckpt, tp=2, dtype="f32")
    tensors = {q.name: np.zeros(q.shape, np.float32) for q in plan.devices[1].params}
    with pytest.raises(TypeError):
        shardload.load_into(tiny_ckpt, tensors, tp=2, rank=1, dtype="f32", verify=1)  # type: ignore[arg-type]
    with pytest.raises(shardload.ArgumentError) as e:
        shardload.load_into(tiny_ckpt, tensors, tp=2, rank=1, dtype="f32", verify=True)
    assert "knows no SHA-256" in e.value.message
    stats = shardload.load_into(tiny_ckpt, tensors, tp=2, rank=1, dtype="f32",
                                manifest=_manifest(tiny_ckpt, tmp_path / "M"))
    ref = shardload.load(tiny_ckpt, tp=2, devices=[1], dtype="f32").numpy(1)
    assert all(np.array_equal(tensors[k], ref[k]) for k in ref)
    assert stats["verified_files"] == len(list(tiny_ckpt.glob("*.safetensors")))


def test_write_manifest(tiny_ckpt: Path, tmp_path: Path) -> None:  # noqa: F811
    shardload.reshard(tiny_ckpt, tmp_path / "rs", tp=2)
    man = shardload.write_manifest(tmp_path / "rs")
    assert man == str(tmp_path / "rs" / "SHA256SUMS")
    sha_lines = [ln for ln in Path(man).read_text().splitlines(True) if not ln.startswith("#")]
    config = hashlib.sha256((tmp_path / "rs" / "config.json").read_bytes()).hexdigest()
    assert "".join(sha_lines) == (_manifest(tmp_path / "rs", tmp_path / "want").read_text()
                                  + f"{config}  config.json\n")   # checked whole by a load
    with shardload.load(tmp_path / "rs", tp=2, manifest=man) as m:
        assert m.stats["verified_files"] == 2
    assert shardload.write_manifest(tmp_path / "rs", "other.sha256").endswith("other.sha256")
    with pytest.raises(shardload.ArgumentError):
        shardload.write_manifest(tmp_path / "rs", "a/b")
    (tmp_path / "empty").mkdir()
    with pytest.raises(shardload.CheckpointError) as e:
        shardload.write_manifest(tmp_path / "empty")
    assert "no *.safetensors files" in e.value.message


# vocab 16000 x hidden 512 in bf16: a 16 MB embedding in one file, of which device 0 of 4 holds
# the first quarter (vocab-parallel rows)
MID = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
       "intermediate_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 2,
       "num_hidden_layers": 1, "vocab_size": 16000, "tie_word_embeddings": False,
       "torch_dtype": "bfloat16", "rms_norm_eps": 1e-05, "head_dim": 64}
EMBED = "model.embed_tokens.weight"


@pytest.fixture(scope="module")
def mid_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MID in files of at most 24 MB, with a block manifest."""
    d = tmp_path_factory.mktemp("mid")
    (d / "config.json").write_text(json.dumps(MID))
    shardload.synth(d / "config.json", d / "ck", max_shard_size=24 << 20)
    shardload.write_manifest(d / "ck")
    return d / "ck"


def _embed_range(ck: Path) -> tuple[Path, int, int]:
    """The file holding the embedding, and its data's absolute [start, end)."""
    for f in sorted(ck.glob("*.safetensors")):
        raw = f.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        hdr = json.loads(raw[8:8 + n])
        if EMBED in hdr:
            a, b = hdr[EMBED]["data_offsets"]
            return f, 8 + n + a, 8 + n + b
    raise AssertionError("no embedding")


def _flipped(ck: Path, dst: Path, name: str, off: int) -> Path:
    shutil.copytree(ck, dst)
    with open(dst / name, "r+b") as fh:
        fh.seek(off)
        b = fh.read(1)
        fh.seek(off)
        fh.write(bytes([b[0] ^ 0x10]))
    return dst


def test_blocks_partial_load(mid_ckpt: Path) -> None:
    man = mid_ckpt / "SHA256SUMS"
    files = sorted(mid_ckpt.glob("*.safetensors"))
    total = sum(f.stat().st_size for f in files)
    with shardload.load(mid_ckpt, tp=4, devices=[0], io="buffered") as plain, \
            shardload.load(mid_ckpt, tp=4, devices=[0], io="buffered", manifest=man) as checked:
        assert checked.checksums(0) == plain.checksums(0)
        s = checked.stats
        # every byte read was hashed and checked, and the load read only part of the files
        assert s["verified_bytes"] == s["bytes_read"] < total
        assert s["verified_files"] == len(files)


def test_blocks_flip_needed_and_unneeded(mid_ckpt: Path, tmp_path: Path) -> None:
    man = mid_ckpt / "SHA256SUMS"
    f, start, end = _embed_range(mid_ckpt)
    assert end - start == 16000 * 512 * 2
    # row 0 of the embedding: device 0 reads it (only a partial read of the file touches it)
    bad = _flipped(mid_ckpt, tmp_path / "needed", f.name, start + 100)
    with pytest.raises(shardload.LoadError) as e:
        shardload.load(bad, tp=4, devices=[0], manifest=man)
    assert e.value.status == "SL_E_INTEGRITY" and "\n" not in e.value.message
    m = re.search(rf"{re.escape(str(bad / f.name))}: bytes \[(\d+), (\d+)\) \(block \d+\) have XXH3",
                  e.value.message)
    assert m and int(m.group(1)) <= start + 100 < int(m.group(2)), e.value.message
    # half-way through the embedding: only device 2 needs it; device 0's reads end within two
    # blocks and a merge gap (1 MiB each) of its rows [0, 4000) or of the tensors around it,
    # more than 3 MiB away, so that block is never read and the load succeeds, checked
    bad = _flipped(mid_ckpt, tmp_path / "unneeded", f.name, start + (end - start) // 2)
    with shardload.load(bad, tp=4, devices=[0], manifest=man) as m0, \
            shardload.load(mid_ckpt, tp=4, devices=[0]) as ref:
        assert m0.checksums(0) == ref.checksums(0)
        assert m0.stats["verified_bytes"] == m0.stats["bytes_read"]
    # the devices that need it catch it
    with pytest.raises(shardload.LoadError) as e:
        shardload.load(bad, tp=4, devices=[2], manifest=man)
    assert e.value.status == "SL_E_INTEGRITY" and f"{bad / f.name}: bytes [" in e.value.message


def test_blocks_stale_and_partial_manifest(mid_ckpt: Path, tmp_path: Path) -> None:
    text = (mid_ckpt / "SHA256SUMS").read_text()
    f = sorted(mid_ckpt.glob("*.safetensors"))[0]
    size = f.stat().st_size
    stale = tmp_path / "stale"
    stale.write_text(text.replace(f"#xxh3-blocks {size} ", f"#xxh3-blocks {size + 4096} ", 1))
    with pytest.raises(shardload.LoadError) as e:
        shardload.load(mid_ckpt, tp=2, manifest=stale)
    assert e.value.status == "SL_E_INTEGRITY" and "stale" in e.value.message
    assert f"{size + 4096} bytes, it has {size}" in e.value.message
    # the block lines of one file dropped: refused (its SHA-256 line alone is not used)
    out, skip = [], False
    for ln in text.splitlines(True):
        if ln.startswith("#xxh3-blocks"):
            skip = ln.rstrip("\n").endswith(f.name)
        if skip and ln.startswith("#"):
            continue
        out.append(ln)
    part = tmp_path / "part"
    part.write_text("".join(out))
    with pytest.raises(shardload.ArgumentError) as e:
        shardload.load(mid_ckpt, tp=2, manifest=part)
    assert f"{f.name}: the manifest has XXH3 blocks for other files" in e.value.message
    # the sha256sum lines alone: whole files by SHA-256 again
    sha = tmp_path / "sha"
    sha.write_text("".join(ln for ln in text.splitlines(True) if not ln.startswith("#")))
    with shardload.load(mid_ckpt, tp=4, devices=[0], manifest=sha) as m:
        assert m.stats["verified_bytes"] == sum(g.stat().st_size for g in mid_ckpt.glob("*.safetensors"))
