"""The C core through ctypes: the library, the public structs and the function signatures.

ctypes releases the GIL around every call into the library, so loads from several threads run
in parallel. The structs mirror include/shardload.h; their sizes are checked against the
library's own (sl_struct_size) when it is loaded, so a binding out of step with the library fails
at import instead of corrupting memory.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_int, c_int32, c_int64,
                    c_size_t, c_uint32, c_uint64, c_void_p)
from pathlib import Path
from typing import Any

from .errors import error_class

PROGRESS_FN = CFUNCTYPE(None, c_void_p, c_uint64, c_uint64)


class TensorInfo(Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("ndim", c_uint32),
                ("shape", POINTER(c_uint64)), ("file", c_int32), ("offset", c_uint64),
                ("nbytes", c_uint64)]


class PlanOpts(Structure):
    _fields_ = [("tp", c_int32), ("pp", c_int32), ("layout", c_int), ("dtype", c_int32),
                ("config_path", c_char_p), ("rules_path", c_char_p), ("ep", c_int32),
                ("config_json", c_char_p), ("config_json_len", c_size_t),
                ("pp_partition", POINTER(c_int32)), ("n_pp_partition", c_int32)]


class ParamInfo(Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("ndim", c_uint32),
                ("shape", POINTER(c_uint64)), ("nbytes", c_uint64), ("offset", c_uint64)]


class LoadOpts(Structure):
    _fields_ = [("device", c_char_p), ("io", c_int), ("threads", c_int32),
                ("staging_bytes", c_uint64), ("request_bytes", c_uint64), ("dummy", c_int32),
                ("seed", c_uint64), ("numa", c_int32), ("gpus", POINTER(c_int32)),
                ("n_gpus", c_int32), ("dest", POINTER(c_void_p)), ("n_dest", c_int32),
                ("devices", POINTER(c_int32)), ("n_devices", c_int32),
                ("param_dest", POINTER(POINTER(c_void_p))), ("n_param_dest", c_int32),
                ("progress", PROGRESS_FN), ("progress_user", c_void_p),
                ("io_engine", c_char_p), ("gather_rows", c_uint64), ("pjrt_assembly", c_uint64),
                ("pjrt_dma_map", c_int32), ("cuda_convert", c_int32),
                ("pjrt_plugin", c_char_p), ("pjrt_api", c_void_p), ("pjrt_client", c_void_p),
                ("s3_endpoint", c_char_p), ("s3_region", c_char_p), ("s3_access_key", c_char_p),
                ("s3_secret_key", c_char_p), ("s3_session_token", c_char_p), ("s3_addressing", c_int32),
                ("remote_connections", c_int32), ("remote_range_bytes", c_uint64),
                ("remote_retries", c_int32), ("remote_backoff_ms", c_int32), ("remote_timeout_ms", c_int32),
                ("verify", c_int32), ("manifest_path", c_char_p), ("ca_bundle", c_char_p),
                ("read_gap", c_int64)]


class Box(Structure):
    _fields_ = [("tensor", c_char_p), ("device", c_int32), ("ndim", c_uint32),
                ("start", POINTER(c_uint64)), ("len", POINTER(c_uint64)), ("dtype", c_int32)]


class LoadStats(Structure):
    _fields_ = [("seconds", c_double), ("setup_seconds", c_double), ("bytes_read", c_uint64),
                ("checkpoint_bytes", c_uint64), ("io", c_char_p), ("engine", c_char_p),
                ("staging_peak", c_uint64), ("verified_files", c_int64),
                ("verified_bytes", c_uint64), ("read_requests", c_uint64),
                ("read_depth_peak", c_uint32), ("remote_retries", c_uint64),
                ("remote_restarts", c_uint64)]


_STRUCTS = {"sl_tensor_info": TensorInfo, "sl_plan_opts": PlanOpts, "sl_param_info": ParamInfo,
            "sl_load_opts": LoadOpts, "sl_load_stats": LoadStats, "sl_box": Box}

_P = c_void_p  # every handle is opaque
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "sl_status_str": (c_char_p, [c_int]),
    "sl_dtype_name": (c_char_p, [c_int]),
    "sl_dtype_bits": (c_uint32, [c_int]),
    "sl_struct_size": (c_size_t, [c_char_p]),
    "sl_xxh3": (c_uint64, [c_void_p, c_size_t]),
    "sl_checkpoint_open": (c_int, [c_char_p, POINTER(_P)]),
    "sl_checkpoint_open_opts": (c_int, [c_char_p, POINTER(LoadOpts), POINTER(_P)]),
    "sl_checkpoint_fetch": (c_int, [_P, c_char_p, c_char_p, c_char_p, c_size_t]),
    "sl_checkpoint_fetch_bytes": (c_int, [_P, c_char_p, POINTER(c_void_p), POINTER(c_size_t),
                                          c_char_p, c_size_t]),
    "sl_checkpoint_read": (c_int, [_P, c_int64, c_uint64, c_void_p, c_size_t, c_char_p, c_size_t]),
    "sl_free": (None, [c_void_p]),
    "sl_hf_resolve": (c_int, [c_char_p, c_char_p, c_char_p, c_size_t, c_char_p, c_size_t]),
    "sl_write_manifest": (c_int, [c_char_p, c_char_p, c_char_p, c_size_t]),
    "sl_cancel": (None, []),
    "sl_cancel_clear": (None, []),
    "sl_checkpoint_close": (None, [_P]),
    "sl_checkpoint_errmsg": (c_char_p, [_P]),
    "sl_checkpoint_warning_count": (c_int64, [_P]),
    "sl_checkpoint_warning": (c_char_p, [_P, c_int64]),
    "sl_checkpoint_dir": (c_char_p, [_P]),
    "sl_checkpoint_file_count": (c_int64, [_P]),
    "sl_checkpoint_file_path": (c_char_p, [_P, c_int64]),
    "sl_checkpoint_file_size": (c_uint64, [_P, c_int64]),
    "sl_checkpoint_metadata_count": (c_int64, [_P, c_int64]),
    "sl_checkpoint_metadata": (c_int, [_P, c_int64, c_int64, POINTER(c_char_p), POINTER(c_char_p)]),
    "sl_checkpoint_tensor_count": (c_int64, [_P]),
    "sl_checkpoint_tensor": (c_int, [_P, c_int64, POINTER(TensorInfo)]),
    "sl_checkpoint_total_bytes": (c_uint64, [_P]),
    "sl_plan_opts_init": (None, [POINTER(PlanOpts)]),
    "sl_plan_build": (c_int, [_P, POINTER(PlanOpts), POINTER(_P)]),
    "sl_plan_build_boxes": (c_int, [_P, POINTER(Box), c_int64, c_int32, c_int32, POINTER(_P)]),
    "sl_plan_free": (None, [_P]),
    "sl_plan_errmsg": (c_char_p, [_P]),
    "sl_plan_layout": (c_int, [_P]),
    "sl_plan_tp": (c_int32, [_P]),
    "sl_plan_pp": (c_int32, [_P]),
    "sl_plan_ep": (c_int32, [_P]),
    "sl_plan_dtype": (c_int, [_P]),
    "sl_plan_device_count": (c_int32, [_P]),
    "sl_plan_device_ranks": (c_int, [_P, c_int32, POINTER(c_int32), POINTER(c_int32)]),
    "sl_plan_stage_layers": (c_int, [_P, c_int32, POINTER(c_int64), POINTER(c_int64)]),
    "sl_plan_param_count": (c_int64, [_P, c_int32]),
    "sl_plan_param": (c_int, [_P, c_int32, c_int64, POINTER(ParamInfo)]),
    "sl_plan_device_bytes": (c_uint64, [_P, c_int32]),
    "sl_plan_total_bytes": (c_uint64, [_P]),
    "sl_plan_read_bytes": (c_uint64, [_P]),
    "sl_load_opts_init": (None, [POINTER(LoadOpts)]),
    "sl_cuda_gpu_count": (c_int32, []),
    "sl_cuda_set_runtime": (c_int, [c_char_p]),
    "sl_load": (c_int, [_P, _P, POINTER(LoadOpts), POINTER(_P)]),
    "sl_model_free": (None, [_P]),
    "sl_model_errmsg": (c_char_p, [_P]),
    "sl_model_stats": (c_int, [_P, POINTER(LoadStats)]),
    "sl_model_device_count": (c_int32, [_P]),
    "sl_model_device_index": (c_int32, [_P, c_int32]),
    "sl_model_device_allocated": (c_uint64, [_P, c_int32]),
    "sl_model_device_gpu": (c_int32, [_P, c_int32]),
    "sl_model_device_staging": (c_char_p, [_P, c_int32]),
    "sl_model_device_routes": (c_char_p, [_P, c_int32]),
    "sl_model_device_mem": (c_int, [_P, c_int32, POINTER(c_uint64), POINTER(c_uint64)]),
    "sl_model_param_ptr": (c_void_p, [_P, c_int32, c_int64]),
    "sl_model_param_xxh3": (c_int, [_P, c_int32, c_int64, POINTER(c_uint64)]),
    "sl_model_read_param": (c_int, [_P, c_int32, c_int64, c_uint64, c_void_p, c_uint64]),
    "sl_reshard": (c_int, [_P, _P, POINTER(LoadOpts), c_char_p, c_uint64, c_char_p, c_size_t]),
    "sl_synth": (c_int, [c_char_p, c_char_p, c_char_p, c_int32, c_uint64, c_uint64, c_char_p,
                         c_size_t]),
    "sl_synth_opts": (c_int, [POINTER(PlanOpts), c_char_p, c_uint64, c_uint64, c_char_p, c_size_t]),
}


def _library_path() -> str:
    """SHARDLOAD_LIBRARY, else the libshardload.so installed inside this package."""
    override = os.environ.get("SHARDLOAD_LIBRARY")
    if override:
        return override
    here = Path(__file__).resolve().parent
    for name in ("libshardload.so", "libshardload.so.0"):
        if (here / name).exists():
            return str(here / name)
    raise ImportError(f"shardload: libshardload.so is not in {here} (install the package with "
                      "`pip install .`, or set SHARDLOAD_LIBRARY to a built libshardload.so)")


def _load() -> ctypes.CDLL:
    lib = ctypes.CDLL(_library_path())
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    for cname, struct in _STRUCTS.items():
        want = lib.sl_struct_size(cname.encode())
        if want != ctypes.sizeof(struct):
            raise ImportError(f"shardload: {cname} is {want} bytes in {_library_path()} but "
                              f"{ctypes.sizeof(struct)} in this binding: library and package differ")
    return lib


lib = _load()
# The front end, like the CLI, reads SL_CUDART (the library reads no environment).
if os.environ.get("SL_CUDART"):
    lib.sl_cuda_set_runtime(os.fsencode(os.environ["SL_CUDART"]))


def text(b: bytes | None) -> str:
    """A string the library returned (UTF-8; undecodable bytes kept as surrogates)."""
    return "" if b is None else b.decode("utf-8", "surrogateescape")


def status_name(st: int) -> str:
    return text(lib.sl_status_str(st))


def raise_status(st: int, message: bytes | str | None) -> None:
    """Raises the exception of status st with the handle's message; nothing for SL_OK."""
    if st == 0:
        return
    msg = message if isinstance(message, str) else text(message)
    raise error_class(st)(status_name(st), msg or "out of memory")


def fspath(path: Any) -> bytes:
    """A path argument as the bytes the C core takes."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"expected a path (str or os.PathLike), got {type(path).__name__}")
    return os.fsencode(path)
