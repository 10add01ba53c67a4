"""safetensors dtypes: names, sl_dtype values, and their NumPy and PyTorch counterparts.

bf16 and the f8 types are ml_dtypes types in NumPy when ml_dtypes is installed; without it their
arrays hold the raw bits as unsigned integers of the same width (uint16, uint8). Packed sub-byte
types (F4, F6_*) are returned as raw uint8 bytes in either case.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import _native as N


def _names() -> list[str]:
    """The library's dtype table, in sl_dtype order (sl_dtype_name is NULL past its end)."""
    out: list[str] = []
    while (name := N.lib.sl_dtype_name(len(out))) is not None:
        out.append(N.text(name))
    return out


NAMES = _names()
VALUE = {n: i for i, n in enumerate(NAMES)}

_ALIASES = {"bf16": "BF16", "bfloat16": "BF16", "f16": "F16", "fp16": "F16", "float16": "F16",
            "half": "F16", "f32": "F32", "fp32": "F32", "float32": "F32", "float": "F32"}
TARGETS = ("F32", "F16", "BF16")  # what a plan may convert to
CONVERTS = ("F32", "F16", "BF16", "F64")  # what it converts from (the C core's sl_dtype_converts)
BOX_DTYPES = -2  # SL_BOX_DTYPES: sl_plan_build_boxes takes each box's target

_NUMPY_PLAIN = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16,
                "U16": np.uint16, "F16": np.float16, "I32": np.int32, "U32": np.uint32,
                "F32": np.float32, "C64": np.complex64, "F64": np.float64, "I64": np.int64,
                "U64": np.uint64}
_ML = {"BF16": "bfloat16", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn",
       "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
       "F8_E5M2FNUZ": "float8_e5m2fnuz"}
_RAW = {"BF16": np.uint16, "F8_E5M2": np.uint8, "F8_E4M3": np.uint8, "F8_E8M0": np.uint8,
        "F8_E4M3FNUZ": np.uint8, "F8_E5M2FNUZ": np.uint8, "F4": np.uint8, "F6_E2M3": np.uint8,
        "F6_E3M2": np.uint8}
_TORCH = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
          "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32",
          "F32": "float32", "C64": "complex64", "F64": "float64", "I64": "int64",
          "U64": "uint64", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn",
          "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
          "F8_E5M2FNUZ": "float8_e5m2fnuz"}


def packed(name: str) -> bool:
    """Sub-byte types: elements do not map to whole bytes."""
    return name in ("F4", "F6_E2M3", "F6_E3M2")


def target_value(dtype: Any, none_is: str = "the config's torch_dtype") -> int:
    """The sl_dtype a plan converts to: -1 for None (none_is says what that means, for the
    message)."""
    if dtype is None:
        return -1
    name = getattr(dtype, "name", None) if not isinstance(dtype, str) else dtype
    if isinstance(dtype, type):  # a scalar type (np.float32, jnp.bfloat16): its dtype has the name
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
    if name is None:
        name = str(dtype)
    name = str(name).removeprefix("torch.")
    canon = _ALIASES.get(name.lower(), name.upper())
    if canon not in TARGETS:
        raise ValueError(f"dtype {dtype!r}: expected one of bf16, f16, f32 (or None for {none_is})")
    return VALUE[canon]


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a parameter's elements (raw bits where NumPy has no such type)."""
    if name in _NUMPY_PLAIN:
        return np.dtype(_NUMPY_PLAIN[name])
    if name in _ML and not packed(name):
        try:
            import ml_dtypes
            dt: np.dtype = np.dtype(getattr(ml_dtypes, _ML[name]))
            return dt
        except (ImportError, AttributeError):
            pass
    return np.dtype(_RAW[name])


def raw_numpy_dtype(name: str) -> np.dtype:
    """An integer dtype of the same width, for zero-copy hand-over to torch."""
    if name in _RAW:
        return np.dtype(_RAW[name])
    if name == "BOOL":
        return np.dtype(np.bool_)
    return np.dtype(_NUMPY_PLAIN[name])


def torch_dtype(name: str) -> Any:
    import torch
    attr = _TORCH.get(name)
    if attr is None or not hasattr(torch, attr):
        raise TypeError(f"dtype {name} has no torch counterpart in torch {torch.__version__}")
    return getattr(torch, attr)


def element_shape(name: str, shape: tuple[int, ...], nbytes: int) -> tuple[int, ...]:
    """The array shape: the parameter's, or its bytes for packed sub-byte types."""
    return (nbytes,) if packed(name) else shape
