"""shardload.plan: what each mesh device holds, from a checkpoint or from a config alone."""
from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from operator import index
from typing import Any, Protocol, SupportsIndex, Union

import numpy as np

from . import _native as N
from ._dtypes import BOX_DTYPES, NAMES, target_value
from .checkpoint import Checkpoint, opened


class _ToDict(Protocol):
    """A transformers PretrainedConfig, or anything else with its to_dict()."""
    def to_dict(self) -> Mapping[str, Any]: ...


class _ToJsonString(Protocol):
    def to_json_string(self) -> str: ...


# What config= takes: a config.json's path, its contents as a mapping, or a transformers config.
ConfigSource = Union[str, bytes, os.PathLike[str], os.PathLike[bytes], Mapping[str, Any],
                     _ToDict, _ToJsonString]

# What pp_partition= takes: the layers of each pipeline stage, as a sequence of ints or as
# vLLM's VLLM_PP_LAYER_PARTITION writes them ("10,12,10").
PPPartition = Union[Iterable[SupportsIndex], str]


def _json_value(v: Any) -> Any:
    """json.dumps's fallback: a torch.dtype (a dict's torch_dtype; transformers' to_dict writes
    it as a string already) is its name, a nested config object its to_dict()."""
    if type(v).__module__ == "torch" and type(v).__name__ == "dtype":
        return str(v).removeprefix("torch.")
    if callable(getattr(v, "to_dict", None)):
        return v.to_dict()
    raise TypeError(f"config: a {type(v).__name__} value is not JSON serializable")


def _config_text(config: Any) -> bytes:
    """config (a mapping, or an object with to_dict() or to_json_string()) as config.json text,
    for sl_plan_opts.config_json: the planner then reads it as it reads a file."""
    if isinstance(config, Mapping):
        obj: Any = config
    elif callable(getattr(config, "to_dict", None)):
        obj = config.to_dict()
    elif callable(getattr(config, "to_json_string", None)):
        text = config.to_json_string()
        if not isinstance(text, str):
            raise TypeError(f"config.to_json_string() returned {type(text).__name__}, not str")
        return text.encode("utf-8")
    else:
        raise TypeError("config must be a path to a config.json, a mapping of its keys, or a "
                        f"transformers config (to_dict()), got {type(config).__name__}")
    if not isinstance(obj, Mapping):
        raise TypeError(f"config.to_dict() returned {type(obj).__name__}, not a mapping")
    try:
        return json.dumps(dict(obj), allow_nan=False, default=_json_value).encode("utf-8")
    except ValueError as e:   # NaN or infinity: not JSON, and not a size
        raise ValueError(f"config: {e}") from None


def _config_opts(ck: Checkpoint | None, config: Any) -> tuple[bytes | None, bytes | None]:
    """config= as sl_plan_opts (config_path, config_json): a path is the planner's to read;
    anything else, and a remote checkpoint's own config.json, is text in memory."""
    if config is None:
        if ck is not None and ck.remote:
            return ck._config_name, ck.fetch_config()
        return None, None
    if isinstance(config, (str, bytes, os.PathLike)):
        return N.fspath(config), None
    return None, _config_text(config)


def _plan_opts(ck: Checkpoint | None, config: Any, dtype: Any, rules: Any) -> N.PlanOpts:
    """sl_plan_opts with the config (a path, or text kept on the struct for the C call), the
    target dtype and the rule table; the mesh fields are the caller's."""
    opts = N.PlanOpts()
    N.lib.sl_plan_opts_init(ctypes.byref(opts))
    opts.dtype = target_value(dtype)
    path, text = _config_opts(ck, config)
    opts.config_path = path
    opts.config_json, opts.config_json_len = text, len(text) if text is not None else 0
    opts.rules_path = N.fspath(rules) if rules is not None else None
    setattr(opts, "_keep", text)   # the text opts points to lives as long as opts
    return opts

_LAYOUTS = {"tp": 0, "spmd": 1}
_LAYOUT_NAMES = {0: "tp", 1: "spmd", 2: "boxes"}


@dataclass(frozen=True)
class Param:
    """One parameter of a device: packed at offset in the device's buffer."""
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    offset: int


@dataclass(frozen=True)
class Device:
    index: int
    tp_rank: int
    pp_rank: int
    bytes: int
    params: tuple[Param, ...]

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"device {self.index} has no parameter {name!r}")


_MESH_MAX = 65536


def _check_mesh(tp: int, pp: int, ep: bool, layout: str) -> None:
    for what, v in (("tp", tp), ("pp", pp)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{what} must be an int, got {type(v).__name__}")
        if v < 1:
            raise ValueError(f"{what} must be >= 1, got {v}")
        if v > _MESH_MAX:  # ctypes would wrap it into the C field: another mesh
            raise ValueError(f"{what} must be at most {_MESH_MAX} (as the CLI's --{what}), got {v}")
    if layout not in _LAYOUTS:
        raise ValueError(f"layout {layout!r}: expected 'tp' or 'spmd'")
    if not isinstance(ep, bool):
        raise TypeError(f"ep must be a bool, got {type(ep).__name__}")


_INT32_MAX = 2**31 - 1


def _pp_partition(v: PPPartition | None) -> list[int] | None:
    """pp_partition= as a list of ints for sl_plan_opts.pp_partition, read as vLLM reads
    VLLM_PP_LAYER_PARTITION (int() of each comma-separated entry) when it is text. Its length,
    signs and sum are the planner's to check (one entry per stage, none negative, summing to
    num_hidden_layers), in the message it gives."""
    if v is None:
        return None
    if isinstance(v, str):
        try:
            return [int(x) for x in v.split(",")]
        except ValueError:
            raise ValueError(f"pp_partition {v!r}: not a comma-separated list of layer counts "
                             "(vLLM's VLLM_PP_LAYER_PARTITION form, 10,12,10)") from None
    if isinstance(v, (bytes, Mapping, AbstractSet)) or not isinstance(v, Iterable):
        raise TypeError(f"pp_partition must be a sequence of ints or a string like '10,12,10', "
                        f"got {type(v).__name__}")
    out = []
    for x in v:   # any integer type (NumPy's too: a partition worked out with NumPy), no bool
        try:
            if isinstance(x, (bool, np.bool_)):
                raise TypeError
            x = index(x)
        except TypeError:
            raise TypeError(f"pp_partition entries must be ints, got {type(x).__name__} ({x!r})") from None
        if abs(x) > _INT32_MAX:   # ctypes would wrap it into another count
            raise ValueError(f"pp_partition entry {x} is not a count of layers")
        out.append(x)
    return out


def _set_pp_partition(opts: N.PlanOpts, v: PPPartition | None) -> None:
    """opts.pp_partition from pp_partition= (the array kept on opts for the C call)."""
    part = _pp_partition(v)
    if part is None:
        return
    arr = (ctypes.c_int32 * max(len(part), 1))(*part)
    opts.pp_partition = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int32))
    opts.n_pp_partition = len(part)
    setattr(opts, "_keep_pp", arr)


_BOX_FIELDS = [str(f[0]) for f in N.Box._fields_]
_BOX: np.dtype[Any] = np.dtype({
    "names": _BOX_FIELDS,
    "formats": [np.uintp, np.int32, np.uint32, np.uintp, np.uintp, np.int32],
    "offsets": [getattr(N.Box, f).offset for f in _BOX_FIELDS],
    "itemsize": ctypes.sizeof(N.Box)})


def _box_array(boxes: list[tuple[str, int, tuple[int, ...], tuple[int, ...]]],
               targets: Mapping[str, int] | None) -> tuple[np.ndarray, list[Any]]:
    """The boxes as an array of sl_box, filled column by column (a JAX load of an MoE checkpoint
    has 150,000 boxes: one ctypes struct and two arrays each cost 1.2 s), and what its pointers
    point into (alive until the plan is built): each tensor's name once, every start and length
    in one array."""
    n = len(boxes)
    names = list(dict.fromkeys(b[0] for b in boxes))
    blob = ctypes.create_string_buffer(b"".join(x.encode("utf-8", "surrogateescape") + b"\0"
                                                for x in names))
    at, off = {}, ctypes.addressof(blob)
    for x in names:
        at[x] = off
        off += len(x.encode("utf-8", "surrogateescape")) + 1
    ndim = np.fromiter((len(b[2]) for b in boxes), np.int64, n)
    if n and any(len(b[3]) != len(b[2]) for b in boxes):
        raise ValueError("a box's start and length differ in length")
    total = int(ndim.sum())
    dims, lens = np.zeros(max(total, 1), np.uint64), np.zeros(max(total, 1), np.uint64)
    try:  # operator.index: NumPy would truncate 1.7 and parse "8"
        dims[:total] = np.fromiter((index(v) for b in boxes for v in b[2]), np.uint64, total)
        lens[:total] = np.fromiter((index(v) for b in boxes for v in b[3]), np.uint64, total)
    except (OverflowError, TypeError) as e:
        raise ValueError(f"a box's start or length is not a count of elements: {e}") from e
    first = (np.cumsum(ndim) - ndim).astype(np.uint64) * np.uint64(8)
    arr = np.zeros(max(n, 1), _BOX)
    arr["tensor"][:n] = np.fromiter((at[b[0]] for b in boxes), np.uintp, n)
    try:
        arr["device"][:n] = np.fromiter((index(b[1]) for b in boxes), np.int32, n)
    except (OverflowError, TypeError) as e:
        raise ValueError(f"a box's device is not a mesh device's index: {e}") from e
    arr["ndim"][:n] = ndim
    arr["start"][:n] = np.uint64(dims.ctypes.data) + first
    arr["len"][:n] = np.uint64(lens.ctypes.data) + first
    arr["dtype"][:n] = (-1 if targets is None else
                        np.fromiter((targets[b[0]] for b in boxes), np.int32, n))
    return arr, [blob, dims, lens]


class Plan:
    """The placement of a model on a mesh of tp * pp devices (SHARDING.md).

    ``devices[d]`` lists device d's parameters; ``total_bytes`` sums them, ``read_bytes`` is
    what a load reads when each checkpoint byte is read once (None from a config alone).
    ``ep`` says whether the experts are spread over the TP ranks (False for a dense model or at
    ``tp=1``, even with ``ep=True``: the option changes none of their bytes).
    ``pp_partition`` is the number of decoder layers each pipeline stage holds, stage s the
    layers after those of the stages before it: the ``pp_partition=`` given (a sequence, or
    vLLM's VLLM_PP_LAYER_PARTITION text "10,12,10"), else vLLM's default split; ``()`` for a
    plan from boxes.
    ``describe=False`` leaves ``devices`` empty (the plan is checked and totalled; ``device(d)``
    reads one device), where reading every device's parameters would cost more than the plan.
    """

    def __init__(self, ck: Checkpoint | None, *, config: ConfigSource | None = None, tp: int = 1,
                 pp: int = 1, ep: bool = False, layout: str = "tp", dtype: Any = None,
                 rules: Any = None, describe: bool = True,
                 pp_partition: PPPartition | None = None) -> None:
        _check_mesh(tp, pp, ep, layout)
        if ck is not None and not isinstance(ck, Checkpoint):
            raise TypeError(f"Plan takes an open Checkpoint (shardload.open) or None, got "
                            f"{type(ck).__name__}: shardload.plan(path) plans a path")
        if ck is None and config is None:
            raise ValueError("plan needs a checkpoint path or config= (a config.json, a dict or "
                             "a transformers config)")
        opts = _plan_opts(ck, config, dtype, rules)
        opts.tp, opts.pp, opts.layout = tp, pp, _LAYOUTS[layout]
        opts.ep = 1 if ep else 0
        _set_pp_partition(opts, pp_partition)
        self._h = ctypes.c_void_p()
        st = N.lib.sl_plan_build(ck.handle if ck else None, ctypes.byref(opts),
                                 ctypes.byref(self._h))
        self._take(st, describe)

    @classmethod
    def from_boxes(cls, ck: Checkpoint, boxes: list[tuple[str, int, tuple[int, ...],
                                                          tuple[int, ...]]],
                   n_devices: int, dtype: Any = None,
                   targets: Mapping[str, int] | None = None, describe: bool = True) -> "Plan":
        """A plan whose device d holds, in order, the boxes (tensor, d, start, length) given
        for it: any sharding (sl_plan_build_boxes); the parameters keep checkpoint names.
        dtype: every box's target (None: each tensor's own dtype); or `targets`, a tensor's
        sl_dtype value (-1: its own) for each of its boxes. describe=False leaves `devices`
        empty (the plan is checked, its totals read): reading 150,000 parameters into Python
        costs a second."""
        if targets is not None and dtype is not None:
            raise ValueError("from_boxes takes a dtype for every box or targets per tensor, not both")
        bad = [(n, v) for n, v in (targets or {}).items() if not -1 <= v < len(NAMES)]
        if bad:
            raise ValueError(f"tensor '{bad[0][0]}': target {bad[0][1]} is no sl_dtype")
        arr, keep = _box_array(boxes, targets)
        self = cls.__new__(cls)
        self._h = ctypes.c_void_p()
        st = N.lib.sl_plan_build_boxes(ck.handle, arr.ctypes.data_as(ctypes.POINTER(N.Box)),
                                       len(boxes), n_devices,
                                       target_value(dtype) if targets is None else BOX_DTYPES,
                                       ctypes.byref(self._h))
        del keep  # the plan copied the names and boxes it keeps
        self._take(st, describe)
        return self

    def _take(self, st: int, describe: bool = True) -> None:
        """Reads the built plan into Python (its devices' parameters unless not `describe`),
        or raises its error."""
        if st != 0:
            msg = N.lib.sl_plan_errmsg(self._h) if self._h else None
            self.close()
            N.raise_status(st, msg)
        self.layout = _LAYOUT_NAMES.get(N.lib.sl_plan_layout(self._h), "?")
        self.tp, self.pp = N.lib.sl_plan_tp(self._h), N.lib.sl_plan_pp(self._h)
        self.ep: bool = bool(N.lib.sl_plan_ep(self._h))   # False on a dense model or at tp 1, even if asked
        self.dtype: str = NAMES[N.lib.sl_plan_dtype(self._h)]
        self.pp_partition: tuple[int, ...] = self._stages()
        self.devices: list[Device] = [self._device(d) for d in
                                      range(N.lib.sl_plan_device_count(self._h) if describe else 0)]
        self.total_bytes: int = N.lib.sl_plan_total_bytes(self._h)
        rb = N.lib.sl_plan_read_bytes(self._h)
        self.read_bytes: int | None = None if rb == 2**64 - 1 else rb

    def _stages(self) -> tuple[int, ...]:
        """The layers of each pipeline stage, as the planner placed them (sl_plan_stage_layers)."""
        first, count, out = ctypes.c_int64(), ctypes.c_int64(), []
        for s in range(self.pp):
            if N.lib.sl_plan_stage_layers(self._h, s, ctypes.byref(first), ctypes.byref(count)):
                return ()   # a plan from boxes: no layers
            out.append(count.value)
        return tuple(out)

    def device(self, d: int) -> Device:
        """Device d's parameters, read from the plan (what ``devices[d]`` holds)."""
        n = N.lib.sl_plan_device_count(self.handle)
        if not 0 <= d < n:
            raise IndexError(f"device {d}: the plan has {n} devices")
        return self._device(d)

    def _device(self, d: int) -> Device:
        tp_rank, pp_rank = ctypes.c_int32(), ctypes.c_int32()
        N.lib.sl_plan_device_ranks(self._h, d, ctypes.byref(tp_rank), ctypes.byref(pp_rank))
        info = N.ParamInfo()
        params = []
        for i in range(N.lib.sl_plan_param_count(self._h, d)):
            N.lib.sl_plan_param(self._h, d, i, ctypes.byref(info))
            params.append(Param(N.text(info.name), NAMES[info.dtype],
                                tuple(info.shape[k] for k in range(info.ndim)), info.nbytes,
                                info.offset))
        return Device(d, tp_rank.value, pp_rank.value, N.lib.sl_plan_device_bytes(self._h, d),
                      tuple(params))

    @property
    def handle(self) -> ctypes.c_void_p:
        if not self._h:
            raise ValueError("plan is closed")
        return self._h

    def close(self) -> None:
        if getattr(self, "_h", None):
            N.lib.sl_plan_free(self._h)
            self._h = ctypes.c_void_p()

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Plan(layout={self.layout!r}, tp={self.tp}, pp={self.pp}, dtype={self.dtype}, "
                f"{N.lib.sl_plan_device_count(self._h) if self._h else len(self.devices)} devices, "
                f"{self.total_bytes} bytes)")


def plan(path: Any = None, *, config: ConfigSource | None = None, tp: int = 1, pp: int = 1,
         ep: bool = False, layout: str = "tp", dtype: Any = None, rules: Any = None,
         pp_partition: PPPartition | None = None) -> Plan:
    """Plans a checkpoint (path) or, with path None, a model from its config alone. config: a
    config.json's path, a mapping of its keys, or a transformers config (its to_dict()).
    pp_partition: the layers of each pipeline stage (10, 12, 10), or vLLM's
    VLLM_PP_LAYER_PARTITION text ("10,12,10"); the package reads no such variable itself:
    pass pp_partition=os.environ.get("VLLM_PP_LAYER_PARTITION") or None to follow it (vLLM,
    like the CLI, takes an empty value for unset; "" here is no list of counts)."""
    if path is None:
        return Plan(None, config=config, tp=tp, pp=pp, ep=ep, layout=layout, dtype=dtype,
                    rules=rules, pp_partition=pp_partition)
    with opened(path) as ck:
        return Plan(ck, config=config, tp=tp, pp=pp, ep=ep, layout=layout, dtype=dtype,
                    rules=rules, pp_partition=pp_partition)
