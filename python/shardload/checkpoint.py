"""shardload.open / shardload.inspect: a validated checkpoint and its listing."""
from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import _interrupt
from . import _native as N
from . import _remote
from ._dtypes import NAMES, element_shape, numpy_dtype


@dataclass(frozen=True)
class Tensor:
    """One checkpoint tensor: where its bytes are, and what they hold."""
    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str
    offset: int          # absolute byte offset in file
    nbytes: int


def hub_cache() -> str:
    """The Hugging Face hub cache folder, found as huggingface_hub finds it."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return os.environ[var]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "huggingface", "hub")


def _resolve(path: Any) -> bytes:
    """A checkpoint path as bytes: hf://org/name[@revision] becomes its snapshot folder in the
    hub cache (the C core resolves it; no network), anything else is taken as given."""
    raw = N.fspath(path)
    if not raw.startswith(b"hf://"):
        return raw
    out, err = ctypes.create_string_buffer(4096), ctypes.create_string_buffer(1024)
    st = N.lib.sl_hf_resolve(raw, os.fsencode(hub_cache()), out, len(out), err, len(err))
    if st != 0:
        N.raise_status(st, err.value)
    return out.value


class Checkpoint:
    """A safetensors file or Hugging Face directory, every header read and validated.

    Holds the C handle until close() (or garbage collection); plan() and load() reuse it.
    path may be an http(s):// or s3:// URL (docs/remote.md): S3 settings come from the AWS
    environment and files, or s3_endpoint=, s3_region=, s3_profile= and ca_bundle= (the CLI's
    --s3-endpoint, --s3-region, --s3-profile and --ca-bundle). A bucket in another region than the
    one asked is opened once more in the region S3 names, with a warning (Checkpoint.warnings). load(), plan(), reshard() and shardload.jax
    take an open Checkpoint in place of a path, with the settings it was opened with.
    """

    def __init__(self, path: Any, *, s3_endpoint: str | None = None,
                 s3_profile: str | None = None, ca_bundle: Any = None,
                 s3_region: str | None = None) -> None:
        self._h = ctypes.c_void_p()
        self._config: bytes | None = None   # a remote checkpoint's config.json, once fetched
        self._fetch_lock = threading.Lock()   # plans from several threads fetch config.json once
        raw = _resolve(path)
        self.remote = _remote.is_url(raw)
        if self.remote:
            bundle = os.fsdecode(N.fspath(ca_bundle)) if ca_bundle is not None else None
            opts = _remote.open_opts(raw, s3_endpoint, s3_profile, bundle, s3_region)
            st = N.lib.sl_checkpoint_open_opts(raw, ctypes.byref(opts), ctypes.byref(self._h))
        else:
            st = N.lib.sl_checkpoint_open(raw, ctypes.byref(self._h))
        if st != 0:
            msg = N.lib.sl_checkpoint_errmsg(self._h) if self._h else None
            self.close()
            N.raise_status(st, msg)
        lib, h = N.lib, self._h
        self.files: list[str] = [N.text(lib.sl_checkpoint_file_path(h, f))
                                 for f in range(lib.sl_checkpoint_file_count(h))]
        self.path = self._shown_url(raw) if self.remote else os.fsdecode(N.fspath(path))
        self.total_bytes: int = lib.sl_checkpoint_total_bytes(h)
        self.warnings: list[str] = [N.text(lib.sl_checkpoint_warning(h, i))
                                    for i in range(lib.sl_checkpoint_warning_count(h))]
        self.metadata: dict[str, dict[str, str]] = {f: self._file_metadata(i)
                                                    for i, f in enumerate(self.files)}
        self.tensors: list[Tensor] = self._tensors()
        self._names: dict[str, Tensor] | None = None   # name -> tensor, for read()
        self._file_index: dict[str, int] | None = None   # path -> file number, for read()

    def _shown_url(self, raw: bytes) -> str:
        """A URL as the C names show it (docs/remote.md): without "user:password@" nor an http(s)
        query (a SAS signature), both credentials: the one file's name, or the directory's
        (sl_checkpoint_dir) and a '/'. The URL given stays with the C handle only."""
        http = not raw.lower().startswith(b"s3://")   # an s3:// key may hold '?' and '#'
        if (raw.split(b"?")[0].split(b"#")[0] if http else raw).endswith(b".safetensors") and self.files:
            return self.files[0]
        return N.text(N.lib.sl_checkpoint_dir(self._h)) + "/"

    def _file_metadata(self, f: int) -> dict[str, str]:
        out: dict[str, str] = {}
        k, v = ctypes.c_char_p(), ctypes.c_char_p()
        i = 0
        while N.lib.sl_checkpoint_metadata(self._h, f, i, ctypes.byref(k), ctypes.byref(v)) == 0:
            out[N.text(k.value)] = N.text(v.value)
            i += 1
        return out

    def _tensors(self) -> list[Tensor]:
        info = N.TensorInfo()
        out = []
        for i in range(N.lib.sl_checkpoint_tensor_count(self._h)):
            N.lib.sl_checkpoint_tensor(self._h, i, ctypes.byref(info))
            out.append(Tensor(N.text(info.name), NAMES[info.dtype],
                              tuple(info.shape[k] for k in range(info.ndim)),
                              self.files[info.file], info.offset, info.nbytes))
        return out

    @property
    def handle(self) -> ctypes.c_void_p:
        if not self._h:
            raise ValueError("checkpoint is closed")
        return self._h

    def fetch_config(self) -> bytes:
        """A remote checkpoint's config.json, fetched once and held in memory: the planner reads
        it from there (sl_plan_opts.config_json)."""
        with self._fetch_lock:   # plans from other threads wait for the whole text
            if self._config is None:
                buf, n = ctypes.c_void_p(), ctypes.c_size_t()
                err = ctypes.create_string_buffer(1024)
                st = N.lib.sl_checkpoint_fetch_bytes(self.handle, b"config.json", ctypes.byref(buf),
                                                     ctypes.byref(n), err, len(err))
                if st != 0:
                    N.raise_status(st, err.value)
                try:
                    self._config = ctypes.string_at(buf, n.value)
                finally:
                    N.lib.sl_free(buf)
            return self._config

    def read(self, name: str) -> np.ndarray:
        """One tensor's bytes as a new NumPy array of its dtype and shape (raw bits where NumPy
        has none; packed sub-byte types as their bytes), read from its file or URL with the
        checkpoint's checks: a file changed since the open raises SL_E_CHANGED naming it. Ctrl-C
        and shardload.cancel() stop it within 64 MiB (CancelledError after cancel())."""
        t = self._by_name().get(name)
        if t is None:
            raise KeyError(f"checkpoint has no tensor {name!r}")
        out = np.empty(element_shape(t.dtype, t.shape, t.nbytes), numpy_dtype(t.dtype))
        self._read_into(t, 0, out)
        return out

    def _read_bytes(self, name: str, offset: int, nbytes: int) -> np.ndarray:
        """Bytes [offset, offset + nbytes) of one tensor's data (within it), as read does."""
        t = self._by_name()[name]
        if offset < 0 or nbytes < 0 or offset + nbytes > t.nbytes:
            raise ValueError(f"tensor '{name}': bytes [{offset}, +{nbytes}) are outside its "
                             f"{t.nbytes}")
        out = np.empty(nbytes, np.uint8)
        self._read_into(t, offset, out)
        return out

    def _read_into(self, t: Tensor, offset: int, out: np.ndarray) -> None:
        err = ctypes.create_string_buffer(1024)
        file, h = self._file_of(t), self.handle
        st = _interrupt.call(lambda: N.lib.sl_checkpoint_read(h, file, t.offset + offset,
                                                              out.ctypes.data, out.nbytes, err,
                                                              len(err)))
        if st != 0:
            N.raise_status(st, err.value)

    def _file_of(self, t: Tensor) -> int:
        """t's file number; a dict, not files.index: reading every tensor of a checkpoint of
        many files would be quadratic in them."""
        if self._file_index is None:
            self._file_index = {f: i for i, f in enumerate(self.files)}
        return self._file_index[t.file]

    def _by_name(self) -> dict[str, Tensor]:
        if self._names is None:
            self._names = {t.name: t for t in self.tensors}
        return self._names

    @property
    def _config_name(self) -> bytes:
        """What messages about the checkpoint's own config.json call it: <dir>/config.json (for
        a URL, the URL without credentials)."""
        return bytes(N.lib.sl_checkpoint_dir(self.handle)) + b"/config.json"

    def close(self) -> None:
        if getattr(self, "_h", None):
            N.lib.sl_checkpoint_close(self._h)
            self._h = ctypes.c_void_p()

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Checkpoint({self.path!r}, {len(self.files)} files, {len(self.tensors)} tensors, "
                f"{self.total_bytes} bytes)")


def open(path: Any, *, s3_endpoint: str | None = None,  # noqa: A001 - the API's name
         s3_profile: str | None = None, ca_bundle: Any = None,
         s3_region: str | None = None) -> Checkpoint:
    """Opens and validates a checkpoint (a .safetensors file, a directory, or an http(s):// or
    s3:// URL: docs/remote.md; ca_bundle: a PEM file of the CAs to trust for https; s3_region: the
    bucket's region, as --s3-region)."""
    return Checkpoint(path, s3_endpoint=s3_endpoint, s3_profile=s3_profile, ca_bundle=ca_bundle,
                      s3_region=s3_region)


@contextmanager
def opened(path: Any) -> Iterator[Checkpoint]:
    """path as an open Checkpoint: one the caller opened is used as it is and stays open (its
    remote settings with it); a path is opened here and closed after."""
    if isinstance(path, Checkpoint):
        path.handle   # a closed one is refused here, by name, not as a NULL in C
        yield path
        return
    with Checkpoint(path) as ck:
        yield ck


def inspect(path: Any) -> dict[str, Any]:
    """What `shardload inspect PATH --json` prints, as a dict."""
    with Checkpoint(path) as ck:
        return {"files": ck.files,
                "tensors": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape),
                             "file": t.file, "offset": t.offset, "nbytes": t.nbytes}
                            for t in ck.tensors],
                "total_bytes": ck.total_bytes, "metadata": ck.metadata,
                "warnings": ck.warnings}
