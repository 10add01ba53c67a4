"""shardload: load safetensors checkpoints straight into each device's tensor-parallel,
pipeline-parallel or SPMD shard, zero-copy into NumPy and PyTorch.

A thin layer over the C library (libshardload.so, shipped inside this package): the planner,
the I/O engines and the device backends are the C core's; this package only turns arguments into
options and memory into views. NumPy is required; torch, ml_dtypes and tqdm are used when
installed.
"""
from __future__ import annotations

from . import _native
from ._interrupt import cancel, clear_cancel
from .checkpoint import Checkpoint, Tensor, hub_cache, inspect, open
from .errors import (ArgumentError, CancelledError, CheckpointError, DeviceError, Error,
                     FormatError, LoadError, PlanError, UnsupportedError)
from .model import Model, load, load_into
from .plan import ConfigSource, Device, Param, Plan, PPPartition, plan
from .tools import reshard, synth, write_manifest

__version__ = "0.1.0"


def cuda_gpu_count() -> int:
    """GPUs the CUDA runtime sees (0 without a runtime or a GPU)."""
    return int(_native.lib.sl_cuda_gpu_count())


__all__ = ["ArgumentError", "CancelledError", "Checkpoint", "CheckpointError", "ConfigSource",
           "Device", "DeviceError", "Error",
           "FormatError", "LoadError", "Model", "PPPartition", "Param", "Plan", "PlanError", "Tensor",
           "UnsupportedError", "cancel", "clear_cancel", "cuda_gpu_count", "hub_cache", "inspect", "load", "load_into", "open", "plan",
           "reshard", "synth", "write_manifest", "__version__"]
