"""hf://org/name[@revision] in the Python package (issue 17 item 3): resolved by the C core in the
hub cache that huggingface_hub would use (HF_HUB_CACHE, HF_HOME, ...), for open, plan and load;
the loaded bytes equal those of the same files in a plain folder; wrong references raise the
family's exception naming the reference."""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

import shardload
from sl_fixtures import tiny_ckpt, tiny_config  # noqa: F401  (pytest fixtures)

C1 = "a" * 40
C2 = "b" * 40


def _snapshot(model: Path, commit: str, src: Path) -> None:
    """src's files as the hub client stores them: blobs named by sha256, links in snapshots/."""
    (model / "blobs").mkdir(parents=True, exist_ok=True)
    snap = model / "snapshots" / commit
    snap.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        h = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, model / "blobs" / h)
        os.symlink(f"../../blobs/{h}", snap / f.name)


@pytest.fixture()
def hub(tmp_path: Path, tiny_ckpt: Path, tiny_config: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> Path:
    other = tmp_path / "other"
    shardload.synth(tiny_config, other, seed=7)
    model = tmp_path / "hub" / "models--org--tiny"
    _snapshot(model, C1, tiny_ckpt)
    _snapshot(model, C2, other)
    (model / "refs").mkdir()
    (model / "refs" / "main").write_text(C1 + "\n")
    (model / "refs" / "v2").write_text(C2)
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path


def _sums(path: str | Path) -> list[dict[str, int]]:
    with shardload.load(path, tp=2) as m:
        return [m.checksums(d) for d in range(2)]


def test_revisions_load_the_snapshot_bytes(hub: Path, tiny_ckpt: Path) -> None:  # noqa: F811
    ref_a, ref_b = _sums(tiny_ckpt), _sums(hub / "other")
    assert ref_a != ref_b
    assert _sums("hf://org/tiny") == ref_a
    assert _sums("hf://org/tiny@v2") == ref_b
    assert _sums(f"hf://org/tiny@{C2}") == ref_b
    ck = shardload.open("hf://org/tiny@v2")
    assert all(f"/snapshots/{C2}/" in f for f in ck.files)
    ck.close()
    assert shardload.plan("hf://org/tiny", tp=2).devices[0].bytes > 0


def test_cache_found_like_huggingface_hub(hub: Path, tiny_ckpt: Path,  # noqa: F811
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE")
    (hub / "home").mkdir()
    os.symlink(hub / "hub", hub / "home" / "hub")
    monkeypatch.setenv("HF_HOME", str(hub / "home"))
    assert shardload.hub_cache() == str(hub / "home" / "hub")
    assert _sums("hf://org/tiny") == _sums(tiny_ckpt)


@pytest.mark.parametrize("ref, cls, text", [
    ("hf://org/nope", shardload.CheckpointError, "hf://org/nope: not in the Hugging Face cache"),
    ("hf://org/tiny@v9", shardload.CheckpointError, "no revision 'v9'"),
    ("hf://org/tiny@" + "c" * 40, shardload.CheckpointError, "is not in the cache"),
    ("hf://../x", shardload.ArgumentError, "the model must be org/name or name"),
    ("hf://org/tiny@../../x", shardload.ArgumentError, "the revision must be"),
])
def test_wrong_references(hub: Path, ref: str, cls: type, text: str) -> None:
    with pytest.raises(cls) as e:
        shardload.load(ref, tp=2)
    assert text in str(e.value) and "\n" not in str(e.value)
