"""DLPack capsules over memory the library owns, for torch and NumPy, host or CUDA.

A capsule ("dltensor", DLPack's legacy ABI that every consumer accepts) points at a parameter
in place. Its DLManagedTensor keeps a reference to the owner (the loaded model's native handle)
until the consumer calls the deleter, so the memory outlives every tensor made from it.
"""
from __future__ import annotations

import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int32, c_int64, c_uint8, c_uint16,
                    c_uint64, c_void_p, py_object)
from typing import Any

KDL_CPU, KDL_CUDA = 1, 2
_INT, _UINT, _FLOAT, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 4, 5, 6

# safetensors dtype -> (DLPack type code, bits). f8 and packed types travel as uint8 bits:
# consumers disagree on DLPack's f8 codes, and torch's .view(dtype) restores them for free.
_CODES = {"BOOL": (_BOOL, 8), "U8": (_UINT, 8), "I8": (_INT, 8), "I16": (_INT, 16),
          "U16": (_UINT, 16), "F16": (_FLOAT, 16), "BF16": (_BFLOAT, 16), "I32": (_INT, 32),
          "U32": (_UINT, 32), "F32": (_FLOAT, 32), "C64": (_COMPLEX, 64), "F64": (_FLOAT, 64),
          "I64": (_INT, 64), "U64": (_UINT, 64)}


def code_of(dtype: str) -> tuple[int, int]:
    return _CODES.get(dtype, (_UINT, 8))


class _DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class _DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class _DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", _DLDevice), ("ndim", c_int32),
                ("dtype", _DLDataType), ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)),
                ("byte_offset", c_uint64)]


class _DLManaged(Structure):
    pass


_DELETER = CFUNCTYPE(None, POINTER(_DLManaged))
_DLManaged._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", c_void_p),
                       ("deleter", _DELETER)]

_live: dict[int, tuple[Any, ...]] = {}  # id -> (managed struct, shape array, owner)
_next_id = [1]


@_DELETER
def _delete(managed: Any) -> None:
    _live.pop(managed.contents.manager_ctx or 0, None)


_NAME = b"dltensor"
_api = ctypes.pythonapi
_api.PyCapsule_New.restype = py_object
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [c_void_p, c_char_p]
_api.PyCapsule_GetPointer.restype = c_void_p
_api.PyCapsule_GetPointer.argtypes = [c_void_p, c_char_p]


@CFUNCTYPE(None, c_void_p)
def _capsule_dtor(capsule: int) -> None:
    """A capsule never consumed (still named "dltensor") frees its tensor itself."""
    if _api.PyCapsule_IsValid(capsule, _NAME):
        ptr = _api.PyCapsule_GetPointer(capsule, _NAME)
        managed = ctypes.cast(ptr, POINTER(_DLManaged))
        managed.contents.deleter(managed)


_api.PyCapsule_New.argtypes = [c_void_p, c_char_p, type(_capsule_dtor)]


def capsule(ptr: int, dtype: str, shape: tuple[int, ...], device: tuple[int, int],
            owner: Any) -> Any:
    """A DLPack capsule viewing ptr (a C-contiguous array), keeping owner alive while used."""
    code, bits = code_of(dtype)
    dims = (c_int64 * max(len(shape), 1))(*shape)
    m = _DLManaged()
    m.dl_tensor = _DLTensor(ptr or None, _DLDevice(*device), len(shape),
                            _DLDataType(code, bits, 1), dims, None, 0)
    key = _next_id[0]
    _next_id[0] += 1
    m.manager_ctx = key
    m.deleter = _delete
    _live[key] = (m, dims, owner)
    return _api.PyCapsule_New(ctypes.addressof(m), _NAME, _capsule_dtor)


class DLPackView:
    """An object with __dlpack__ / __dlpack_device__, for np.from_dlpack and torch.from_dlpack."""

    def __init__(self, ptr: int, dtype: str, shape: tuple[int, ...], device: tuple[int, int],
                 owner: Any) -> None:
        self._args = (ptr, dtype, shape, device, owner)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        if copy:
            raise BufferError("shardload hands out views only (copy=True not supported)")
        return capsule(*self._args)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._args[3]
