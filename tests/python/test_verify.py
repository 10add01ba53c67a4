"""verify= / manifest= (issue 17 item 4): every file's SHA-256 checked in the load's own pass, the
bytes equal an unverified load; a flipped byte in any file is a LoadError naming it; for load and
load_into alike."""
from __future__ import annotations

import hashlib
import shutil
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
    assert Path(man).read_text() == _manifest(tmp_path / "rs", tmp_path / "want").read_text()
    with shardload.load(tmp_path / "rs", tp=2, manifest=man) as m:
        assert m.stats["verified_files"] == 2
    assert shardload.write_manifest(tmp_path / "rs", "other.sha256").endswith("other.sha256")
    with pytest.raises(shardload.ArgumentError):
        shardload.write_manifest(tmp_path / "rs", "a/b")
    (tmp_path / "empty").mkdir()
    with pytest.raises(shardload.CheckpointError) as e:
        shardload.write_manifest(tmp_path / "empty")
    assert "no *.safetensors files" in e.value.message
