"""shardload.reshard / shardload.synth: the CLI's writers."""
from __future__ import annotations

import ctypes
import os
from typing import Any

from . import _interrupt
from . import _native as N
from .checkpoint import opened
from .model import _load_opts
from .plan import ConfigSource, PPPartition, Plan, _plan_opts

_ERRLEN = 1024


def _size(name: str, v: int | None) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{name} must be a byte count >= 0, got {v!r}")
    return v


def reshard(path: Any, out: Any, *, tp: int = 1, pp: int = 1, ep: bool = False,
            layout: str = "tp", dtype: Any = None, config: ConfigSource | None = None,
            rules: Any = None, max_part_size: int | None = None, staging: int = 64 << 20,
            io: str = "auto", threads: int = 0, write_manifest: bool = False,
            pp_partition: PPPartition | None = None) -> None:
    """Writes per-device pre-sharded files (model-rank-{d}-part-{p}.safetensors) into out, as
    the CLI's reshard (ep: --ep, pp_partition: --pp-partition, as plan()'s); write_manifest=True
    then writes out/SHA256SUMS of them (as write_manifest(out), the CLI's --write-manifest), for
    load(out, manifest=) later."""
    if not isinstance(write_manifest, bool):
        raise TypeError(f"write_manifest must be a bool, got {type(write_manifest).__name__}")
    o = _load_opts("cpu", io, staging, threads, False, 1234)
    err = ctypes.create_string_buffer(_ERRLEN)
    with opened(path) as ck:
        plan = Plan(ck, config=config, tp=tp, pp=pp, ep=ep, layout=layout, dtype=dtype,
                    rules=rules, pp_partition=pp_partition)
        part = _size("max_part_size", max_part_size)
        st = _interrupt.call(lambda: N.lib.sl_reshard(ck.handle, plan.handle, ctypes.byref(o),
                                                      N.fspath(out), part, err, _ERRLEN))
        plan.close()
    N.raise_status(st, err.value)
    if write_manifest:
        _manifest(out, None)


def synth(config: ConfigSource, out: Any, *, dtype: Any = None, seed: int = 1234,
          max_shard_size: int | None = None, rules: Any = None) -> None:
    """Writes a synthetic Hugging Face checkpoint of config's shapes (random values from seed);
    config is a config.json's path, a mapping of its keys or a transformers config, and out's
    config.json is that config as parsed, with torch_dtype saying what the files hold."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an int from 0 to 2**64 - 1, got {seed!r}")
    if config is None:
        raise TypeError("synth needs a config: a config.json's path, a dict or a transformers config")
    opts = _plan_opts(None, config, dtype, rules)   # synth takes its config, dtype and rules
    err = ctypes.create_string_buffer(_ERRLEN)
    args = (ctypes.byref(opts), N.fspath(out), seed, _size("max_shard_size", max_shard_size), err, _ERRLEN)
    st = _interrupt.call(lambda: N.lib.sl_synth_opts(*args))
    N.raise_status(st, err.value)


def write_manifest(folder: Any, name: str | None = None) -> str:
    """Writes folder/name (default SHA256SUMS), a sha256sum file of the checkpoint files a load
    of folder reads, with XXH3 lines of 1 MiB blocks (a load checks the blocks it reads), for
    load(..., manifest=) later; returns its path."""
    return _manifest(folder, name)


def _manifest(folder: Any, name: str | None) -> str:
    """write_manifest's work, by another name: reshard's write_manifest flag hides the function."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    err = ctypes.create_string_buffer(_ERRLEN)
    args = (N.fspath(folder), name.encode() if name is not None else None, err, _ERRLEN)
    st = _interrupt.call(lambda: N.lib.sl_write_manifest(*args))
    N.raise_status(st, err.value)
    return os.path.join(os.fsdecode(N.fspath(folder)), name or "SHA256SUMS")
