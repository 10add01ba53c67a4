"""shardload.load / shardload.load_into: run a plan on devices and hand out zero-copy views."""
from __future__ import annotations

import ctypes
import os
import resource
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from . import _dlpack, _interrupt
from . import _native as N
from ._dtypes import element_shape, numpy_dtype, raw_numpy_dtype, torch_dtype
from .checkpoint import Checkpoint, opened
from .errors import DeviceError, UnsupportedError
from .plan import ConfigSource, Param, Plan, PPPartition

_IO = {"auto": 0, "direct": 1, "buffered": 2}
Progress = Callable[[int, int], None] | None | bool


class _Native:
    """Owns one sl_model; every view made from it holds a reference, so the weights live until
    the last view is gone, whatever happens to the Model object."""

    def __init__(self, h: ctypes.c_void_p) -> None:
        self.h = h

    def __del__(self) -> None:
        if self.h:
            N.lib.sl_model_free(self.h)
            self.h = ctypes.c_void_p()


class _HostBuffer:
    """nbytes of host memory at ptr, as NumPy's array interface, keeping the owner alive."""

    def __init__(self, ptr: int, nbytes: int, owner: _Native) -> None:
        self.owner = owner
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "version": 3,
                                    "data": (ptr, False)}


def _tqdm_installed() -> bool:
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return True


def wants_bar(progress: Progress) -> bool:
    """Whether `progress` asks for a tqdm bar: True always (tqdm must be installed), None when
    stderr is a terminal and tqdm is installed."""
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be None, a bool or a callable (done, total), got "
                        f"{type(progress).__name__}")
    if progress is True:
        if not _tqdm_installed():
            raise ImportError("progress=True draws a tqdm bar: pip install tqdm")
        return True
    return progress is None and _stderr_is_terminal() and _tqdm_installed()


def _stderr_is_terminal() -> bool:
    """sys.stderr may be None (a process started with stderr closed) or any object with write."""
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError, OSError):  # none, no isatty, closed
        return False


class _ProgressBridge:
    """The C progress callback: forwards to the user's callable (or a tqdm bar) and keeps the
    first exception it raises, re-raised once the load returns."""

    def __init__(self, progress: Progress, label: str) -> None:
        self.fn: Callable[[int, int], None] | None = None
        self.bar: Any = None
        self.error: BaseException | None = None
        if callable(progress):
            self.fn = progress
        elif wants_bar(progress):
            from tqdm import tqdm
            self.bar = tqdm(total=0, unit="B", unit_scale=True, desc=label)
        # (not `self.bar`: a tqdm bar of total 0 is falsy, and the bar was never updated)
        # (`is not None`: a callable object may be falsy, an empty list subclass say)
        self.c = (N.PROGRESS_FN(self._call) if (self.fn is not None or self.bar is not None)
                  else N.PROGRESS_FN())

    def _call(self, _user: Any, done: int, total: int) -> None:
        if self.error is not None:
            return
        try:
            if self.fn is not None:
                self.fn(done, total)
            else:
                self.bar.total = total
                self.bar.update(done - self.bar.n)
        except BaseException as e:  # noqa: BLE001 - re-raised after the load
            self.error = e

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.error is not None:
            raise self.error


def _int_list(name: str, v: Iterable[int] | None) -> list[int] | None:
    if v is None:
        return None
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        raise TypeError(f"{name} must be a list of ints, got {type(v).__name__}")
    out = list(v)
    for x in out:
        if isinstance(x, bool) or not isinstance(x, int):
            raise TypeError(f"{name} must be a list of ints, got {x!r}")
        if not -2**31 <= x < 2**31:  # the C core checks the range; ctypes would wrap first
            raise ValueError(f"{name}: {x} is out of range")
    return out


ReadGap = int | str | None


def read_gap_value(read_gap: ReadGap) -> int:
    """sl_load_opts.read_gap for read_gap=: None (0) reads gaps under 1 MiB between needed
    ranges, so requests stay large; "none" (-1) reads only the bytes the devices need; an int
    reads gaps under that many bytes (1 to 1 MiB)."""
    if read_gap is None:
        return 0
    if read_gap == "none":
        return -1
    if isinstance(read_gap, bool) or not isinstance(read_gap, int):
        raise TypeError(f"read_gap must be None, 'none' or an int, got {read_gap!r}")
    if not 1 <= read_gap <= 1 << 20:
        raise ValueError(f"read_gap {read_gap}: give 1 to 1048576 bytes, 'none' or None")
    return read_gap


def _load_opts(device: str, io: str, staging: int, threads: int, dummy: bool,
               seed: int, read_gap: ReadGap = None) -> N.LoadOpts:
    if device not in ("cpu", "cuda", "pjrt"):
        raise ValueError(f"device {device!r}: expected 'cpu', 'cuda' or 'pjrt'")
    if io not in _IO:
        raise ValueError(f"io {io!r}: expected 'auto', 'direct' or 'buffered'")
    # the highs: what the C fields hold (ctypes would wrap a larger value into another), threads
    # as the CLI's --threads
    for what, v, low, high in (("staging", staging, 1, 2**64 - 1), ("threads", threads, 0, 256),
                               ("seed", seed, 0, 2**64 - 1)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{what} must be an int, got {type(v).__name__}")
        if v < low:
            raise ValueError(f"{what} must be at least {low}, got {v}")
        if v > high:
            raise ValueError(f"{what} must be at most {high}, got {v}")
    o = N.LoadOpts()
    N.lib.sl_load_opts_init(ctypes.byref(o))
    o.device, o.io, o.staging_bytes = device.encode(), _IO[io], staging
    o.threads, o.dummy, o.seed = threads, int(bool(dummy)), seed
    o.read_gap = read_gap_value(read_gap)
    return o


def _set_list(o: N.LoadOpts, keep: list[Any], field: str, count: str,
              values: list[int] | None) -> None:
    if values is None:
        return
    arr = (ctypes.c_int32 * max(len(values), 1))(*values)
    keep.append(arr)
    setattr(o, field, ctypes.cast(arr, ctypes.POINTER(ctypes.c_int32)))
    setattr(o, count, len(values))


def _set_verify(o: N.LoadOpts, keep: list[Any], verify: bool, manifest: Any) -> None:
    """verify=True, or a manifest alone, sets opts.verify: the C core checks the bytes while they
    stream (manifest XXH3 blocks: the blocks read; else every file's SHA-256)."""
    if not isinstance(verify, bool):
        raise TypeError(f"verify must be a bool, got {type(verify).__name__}")
    if manifest is not None:
        keep.append(N.fspath(manifest))
        o.manifest_path = keep[-1]
    o.verify = int(verify or manifest is not None)


def _run(ck: Checkpoint | None, plan: Plan, o: N.LoadOpts, progress: Progress) -> _Native:
    bridge = _ProgressBridge(progress, "shardload")
    o.progress = bridge.c
    h = ctypes.c_void_p()
    st = _interrupt.call(lambda: N.lib.sl_load(ck.handle if ck else None, plan.handle,
                                               ctypes.byref(o), ctypes.byref(h)))
    native = _Native(h)
    if st != 0:
        N.raise_status(st, N.lib.sl_model_errmsg(h) if h else None)
    bridge.finish()
    return native


class Model:
    """Loaded weights: the mesh devices this process holds, each parameter a view in place."""

    def __init__(self, native: _Native, plan: Plan, device: str) -> None:
        self._native: _Native | None = native
        self.plan = plan
        self.device = device
        h = native.h
        self.devices: list[int] = [N.lib.sl_model_device_index(h, k)
                                   for k in range(N.lib.sl_model_device_count(h))]
        self._local = {d: k for k, d in enumerate(self.devices)}
        self.stats: dict[str, Any] = self._stats()

    def _h(self) -> _Native:
        """The weights' owner. A method keeps it in a local for as long as it uses its handle:
        a close() from another thread (or the GC) then cannot free the model under a C call."""
        native = self._native   # read once: a close() may come between two reads
        if native is None:
            raise ValueError("model is closed (views made before close() stay valid)")
        return native

    def _stats(self) -> dict[str, Any]:
        native = self._h()
        h = native.h
        s = N.LoadStats()
        N.lib.sl_model_stats(h, ctypes.byref(s))
        moved = s.bytes_read if s.bytes_read else sum(
            N.lib.sl_model_device_allocated(h, k) for k in range(len(self.devices)))
        after = s.seconds - s.setup_seconds
        devs = []
        for k, d in enumerate(self.devices):
            entry: dict[str, Any] = {"index": d,
                                     "allocated_bytes": N.lib.sl_model_device_allocated(h, k)}
            gpu = N.lib.sl_model_device_gpu(h, k)
            if gpu >= 0:
                entry["gpu"] = gpu
            staging = N.lib.sl_model_device_staging(h, k)
            if staging is not None:   # pjrt: "dma-mapped", cuda: "page-locked", or "plain (why)"
                entry["staging"] = N.text(staging)
            routes = N.lib.sl_model_device_routes(h, k)
            if routes is not None:    # pjrt: the ways in; cuda: where it converted
                entry["routes"] = N.text(routes)
            before, after_ = ctypes.c_uint64(0), ctypes.c_uint64(0)
            # cuda, and pjrt where its plugin reports memory: the device's free memory (asked of
            # no cpu device: the call's refusal would be written over the model's message)
            if self.device != "cpu" and N.lib.sl_model_device_mem(h, k, ctypes.byref(before),
                                                                   ctypes.byref(after_)) == 0:
                entry["mem_free_before"], entry["mem_free_after"] = before.value, after_.value
            devs.append(entry)
        return {"seconds": s.seconds, "setup_seconds": s.setup_seconds,
                "bytes_read": s.bytes_read,
                "gbps": moved / s.seconds / 1e9 if s.seconds > 0 else 0.0,
                "gbps_after_setup": moved / after / 1e9 if after > 0 else 0.0,
                "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "io": N.text(s.io), "engine": N.text(s.engine), "staging_peak": s.staging_peak,
                "verified_files": s.verified_files, "verified_bytes": s.verified_bytes,
                "read_requests": s.read_requests, "read_depth_peak": s.read_depth_peak,
                "remote_retries": s.remote_retries, "remote_restarts": s.remote_restarts,
                "devices": devs}

    def _local_of(self, d: int) -> int:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"mesh device must be an int, got {type(d).__name__}")
        if d not in self._local:
            raise IndexError(f"mesh device {d} is not loaded here (loaded: {self.devices})")
        return self._local[d]

    def params(self, d: int) -> tuple[Param, ...]:
        """The parameters of mesh device d, in buffer order."""
        self._local_of(d)
        return self.plan.devices[d].params

    def _ptr(self, native: _Native, d: int, i: int) -> int:
        return N.lib.sl_model_param_ptr(native.h, self._local_of(d), i) or 0

    def _host_array(self, d: int, i: int, p: Param, raw: bool) -> np.ndarray:
        dt = raw_numpy_dtype(p.dtype) if raw else numpy_dtype(p.dtype)
        shape = element_shape(p.dtype, p.shape, p.nbytes)
        if p.nbytes == 0:
            return np.zeros(shape, dt)
        native = self._h()
        buf = np.asarray(_HostBuffer(self._ptr(native, d, i), p.nbytes, native))
        return buf.view(dt).reshape(shape)

    def numpy(self, d: int) -> dict[str, np.ndarray]:
        """Zero-copy NumPy views of mesh device d's parameters (host devices only)."""
        if self.device != "cpu":
            ways = (".read(d, name) or .checksums(d)" if self.device == "pjrt"
                    else ".torch(d), .dlpack(d, name) or .read(d, name)")
            raise DeviceError("SL_E_DEVICE", f"device {d} is {self.device} memory: NumPy cannot "
                              f"view it; use {ways}")
        return {p.name: self._host_array(d, i, p, False) for i, p in enumerate(self.params(d))}

    def torch(self, d: int) -> dict[str, Any]:
        """Zero-copy torch tensors of mesh device d (CPU, or CUDA on the device's GPU)."""
        import torch
        out = {}
        for i, p in enumerate(self.params(d)):
            if self.device == "cpu":
                t = torch.from_numpy(self._host_array(d, i, p, True))
            else:
                from torch.utils.dlpack import from_dlpack
                t = from_dlpack(self._view(d, i, p))
            tdt = torch_dtype(p.dtype)
            out[p.name] = t if t.dtype == tdt else t.view(tdt)
        return out

    def _view(self, d: int, i: int, p: Param) -> _dlpack.DLPackView:
        if self.device == "pjrt":
            raise DeviceError("SL_E_DEVICE", f"device {d} holds PJRT buffers, which have no "
                              "address to view; use .read(d, name) or .checksums(d)")
        k, native = self._local_of(d), self._h()
        gpu = N.lib.sl_model_device_gpu(native.h, k)
        dev = (_dlpack.KDL_CUDA, gpu) if gpu >= 0 else (_dlpack.KDL_CPU, 0)
        shape = element_shape(p.dtype, p.shape, p.nbytes)
        return _dlpack.DLPackView(self._ptr(native, d, i), p.dtype, shape, dev, native)

    def dlpack(self, d: int, name: str) -> Any:
        """A DLPack capsule of one parameter, in place (f8 and packed types as uint8 bits)."""
        for i, p in enumerate(self.params(d)):
            if p.name == name:
                return self._view(d, i, p).__dlpack__()
        raise KeyError(f"mesh device {d} has no parameter {name!r}")

    def read(self, d: int, name: str) -> np.ndarray:
        """A host copy of one parameter, from any backend."""
        for i, p in enumerate(self.params(d)):
            if p.name == name:
                out = np.empty(element_shape(p.dtype, p.shape, p.nbytes), numpy_dtype(p.dtype))
                native = self._h()
                st = N.lib.sl_model_read_param(native.h, self._local_of(d), i, 0,
                                               out.ctypes.data, p.nbytes)
                if st != 0:
                    N.raise_status(st, N.lib.sl_model_errmsg(native.h))
                return out
        raise KeyError(f"mesh device {d} has no parameter {name!r}")

    def checksums(self, d: int) -> dict[str, int]:
        """XXH3-64 of every parameter of mesh device d, as `load --checksums` prints them."""
        native, k = self._h(), self._local_of(d)
        out = {}
        v = ctypes.c_uint64()
        for i, p in enumerate(self.params(d)):
            st = N.lib.sl_model_param_xxh3(native.h, k, i, ctypes.byref(v))
            if st != 0:
                N.raise_status(st, N.lib.sl_model_errmsg(native.h))
            out[p.name] = v.value
        return out

    def close(self) -> None:
        """Drops this object's hold on the weights; views already made keep them alive."""
        self._native = None

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._native is None else f"devices {self.devices}"
        return f"Model({self.device}, {state}, plan {self.plan!r})"


def load(path: Any = None, *, tp: int = 1, pp: int = 1, ep: bool = False, layout: str = "tp",
         dtype: Any = None, device: str = "cpu", gpus: Iterable[int] | None = None,
         devices: Iterable[int] | None = None, io: str = "auto", staging: int = 64 << 20,
         threads: int = 0, dummy: bool = False, seed: int = 1234,
         config: ConfigSource | None = None,
         rules: Any = None, progress: Progress = None, pjrt_plugin: Any = None,
         verify: bool = False, manifest: Any = None, read_gap: ReadGap = None,
         pp_partition: PPPartition | None = None) -> Model:
    """Plans path for a tp x pp mesh and loads the devices this process wants (all by default).

    config: the model's config.json (default: the checkpoint's own), as a path, a mapping of its
    keys or a transformers config (to_dict()); the planner reads all three alike and checks the
    checkpoint against it. With dummy=True and no path the plan comes from config alone and no
    file is read.
    verify=True checks the bytes in the same pass, against manifest (a sha256sum file; passing
    manifest= alone turns verify on). A manifest that write_manifest or --write-manifest wrote
    also carries XXH3 hashes of 1 MiB blocks, and then only the blocks read are hashed and
    checked; else every file's SHA-256 is checked (every byte read), against the manifest, the
    Hugging Face cache's blob names or an S3 object's stored SHA-256. A mismatch is a LoadError
    (SL_E_INTEGRITY).
    device="pjrt" puts each parameter in a PJRT buffer through the plugin at pjrt_plugin
    (e.g. XLA's CPU plugin xla_cpu_pjrt.so); its bytes come back with .read and .checksums.
    read_gap="none" reads only the bytes the devices need (a rank's rows of a weight split along
    its rows are then read apart, in many small requests); by default gaps under 1 MiB are read.
    pp_partition: the layers of each pipeline stage, as plan()'s.
    """
    o = _load_opts(device, io, staging, threads, dummy, seed, read_gap)
    keep: list[Any] = []
    if (pjrt_plugin is not None) != (device == "pjrt"):
        raise ValueError("pjrt_plugin= goes with device='pjrt', and device='pjrt' needs it")
    if pjrt_plugin is not None:
        keep.append(os.fsencode(pjrt_plugin))
        o.pjrt_plugin = keep[-1]
    _set_list(o, keep, "gpus", "n_gpus", _int_list("gpus", gpus))
    if gpus is not None and device != "cuda":
        raise ValueError(f"gpus= goes with device='cuda' (the device is {device!r})")
    _set_list(o, keep, "devices", "n_devices", _int_list("devices", devices))
    _set_verify(o, keep, verify, manifest)
    if path is None and not dummy:
        raise ValueError("load needs a checkpoint path (or dummy=True with config=)")
    if path is None:
        plan = Plan(None, config=config, tp=tp, pp=pp, ep=ep, layout=layout, dtype=dtype,
                    rules=rules, pp_partition=pp_partition)
        return Model(_run(None, plan, o, progress), plan, device)
    with opened(path) as ck:
        plan = Plan(ck, config=config, tp=tp, pp=pp, ep=ep, layout=layout, dtype=dtype,
                    rules=rules, pp_partition=pp_partition)
        return Model(_run(ck, plan, o, progress), plan, device)


def _is_torch_tensor(t: Any) -> bool:
    """Whether t is a torch.Tensor, subclasses included (vLLM's BasevLLMParameter and the
    parameter classes of its quantized layers); torch imported by the caller or not at all."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(t, torch.Tensor)


def _tensor_ptr(name: str, t: Any, p: Param) -> tuple[int, str]:
    """The address of an engine tensor that must receive parameter p, checked, and where it is
    ("cpu" or "cuda:N")."""
    want_np = numpy_dtype(p.dtype)
    if isinstance(t, np.ndarray):
        if not t.flags.c_contiguous or not t.flags.writeable:
            raise ValueError(f"parameter '{name}': array is not C-contiguous and writeable")
        ok_dtype = t.dtype in (want_np, raw_numpy_dtype(p.dtype))
        where, ptr, nbytes = "cpu", t.ctypes.data, t.nbytes
    elif _is_torch_tensor(t):
        if not t.is_contiguous():
            raise ValueError(f"parameter '{name}': tensor is not contiguous")
        ok_dtype = t.dtype == torch_dtype(p.dtype)
        where, ptr, nbytes = str(t.device), t.data_ptr(), t.numel() * t.element_size()
        if t.device.type == "cuda":
            where = f"cuda:{t.device.index if t.device.index is not None else 0}"
    else:
        raise TypeError(f"parameter '{name}': expected a torch.Tensor or numpy.ndarray, got "
                        f"{type(t).__name__}")
    if tuple(t.shape) != p.shape:
        raise ValueError(f"parameter '{name}': shape {tuple(t.shape)}, plan has {p.shape}")
    if not ok_dtype:
        raise ValueError(f"parameter '{name}': dtype {t.dtype}, plan has {p.dtype}")
    if where != "cpu" and not where.startswith("cuda:"):
        raise UnsupportedError("SL_E_UNSUPPORTED", f"parameter '{name}': {where} tensor; "
                               "load_into fills cpu and cuda tensors")
    if nbytes != p.nbytes:
        raise ValueError(f"parameter '{name}': {nbytes} bytes, plan has {p.nbytes}")
    return ptr, where


def _dest_table(plan: Plan, rank: int, tensors: Mapping[str, Any]) -> list[tuple[int, str]]:
    params = plan.devices[rank].params
    names = {p.name for p in params}
    missing = [p.name for p in params if p.name not in tensors]
    extra = sorted(n for n in tensors if n not in names)
    if missing:
        raise ValueError(f"tensors: no tensor for parameter '{missing[0]}' of rank {rank} "
                         f"({len(missing)} missing)")
    if extra:
        raise ValueError(f"tensors: '{extra[0]}' is not a parameter of rank {rank} "
                         f"({len(extra)} extra)")
    ptrs = [_tensor_ptr(p.name, tensors[p.name], p) for p in params]
    places = sorted({w for _, w in ptrs})
    if len(places) > 1:
        raise ValueError(f"tensors of rank {rank} are on {', '.join(places)}: one device holds "
                         "them all")
    return ptrs


def load_into(path: Any, tensors: Mapping[str, Any], *, tp: int = 1, pp: int = 1,
              ep: bool = False, rank: int = 0, layout: str = "tp", dtype: Any = None,
              io: str = "auto", staging: int = 64 << 20, threads: int = 0,
              config: ConfigSource | None = None,
              rules: Any = None, progress: Progress = None, verify: bool = False,
              manifest: Any = None, read_gap: ReadGap = None,
              pp_partition: PPPartition | None = None) -> dict[str, Any]:
    """Fills an engine's own tensors (name -> tensor of mesh device `rank`) in place.

    Every name, shape, dtype and device is checked before any byte is read; no second copy of
    the weights is made. Returns the load's stats. pp_partition: as plan()'s (an engine run
    with VLLM_PP_LAYER_PARTITION passes it on).
    """
    if not isinstance(tensors, Mapping):
        raise TypeError(f"tensors must be a mapping name -> tensor, got {type(tensors).__name__}")
    o = _load_opts("cpu", io, staging, threads, False, 1234, read_gap)
    keep: list[Any] = []
    _set_verify(o, keep, verify, manifest)
    with opened(path) as ck:
        plan = Plan(ck, config=config, tp=tp, pp=pp, ep=ep, layout=layout, dtype=dtype,
                    rules=rules, pp_partition=pp_partition)
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise TypeError(f"rank must be an int, got {type(rank).__name__}")
        if not 0 <= rank < len(plan.devices):
            raise ValueError(f"rank {rank!r}: expected 0 <= rank < {len(plan.devices)}")
        dests = _dest_table(plan, rank, tensors)
        where = dests[0][1] if dests else "cpu"
        _set_list(o, keep, "devices", "n_devices", [rank])
        if where != "cpu":  # mesh device `rank` on the tensors' GPU
            o.device = b"cuda"
            _set_list(o, keep, "gpus", "n_gpus", [int(where[5:])] * (rank + 1))
        row = (ctypes.c_void_p * max(len(dests), 1))(*(ptr for ptr, _ in dests))
        table = (ctypes.POINTER(ctypes.c_void_p) * (rank + 1))()
        table[rank] = ctypes.cast(row, ctypes.POINTER(ctypes.c_void_p))
        o.param_dest, o.n_param_dest = table, rank + 1
        model = Model(_run(ck, plan, o, progress), plan, "cpu" if where == "cpu" else "cuda")
        stats = model.stats
        model.close()
        return stats
