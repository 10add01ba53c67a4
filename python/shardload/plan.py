"""shardload.plan: what each mesh device holds, from a checkpoint or from a config alone."""
from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Union

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


class Plan:
    """The placement of a model on a mesh of tp * pp devices (SHARDING.md).

    ``devices[d]`` lists device d's parameters; ``total_bytes`` sums them, ``read_bytes`` is
    what a load reads when each checkpoint byte is read once (None from a config alone).
    ``ep`` says whether the experts are spread over the TP ranks (False for a dense model, even
    with ``ep=True``: the option changes none of its bytes).
    """

    def __init__(self, ck: Checkpoint | None, *, config: ConfigSource | None = None, tp: int = 1,
                 pp: int = 1, ep: bool = False, layout: str = "tp", dtype: Any = None,
                 rules: Any = None) -> None:
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
        self._h = ctypes.c_void_p()
        st = N.lib.sl_plan_build(ck.handle if ck else None, ctypes.byref(opts),
                                 ctypes.byref(self._h))
        self._take(st)

    @classmethod
    def from_boxes(cls, ck: Checkpoint, boxes: list[tuple[str, int, tuple[int, ...],
                                                          tuple[int, ...]]],
                   n_devices: int, dtype: Any = None,
                   targets: Mapping[str, int] | None = None) -> "Plan":
        """A plan whose device d holds, in order, the boxes (tensor, d, start, length) given
        for it: any sharding (sl_plan_build_boxes); the parameters keep checkpoint names.
        dtype: every box's target (None: each tensor's own dtype); or `targets`, a tensor's
        sl_dtype value (-1: its own) for each of its boxes."""
        if targets is not None and dtype is not None:
            raise ValueError("from_boxes takes a dtype for every box or targets per tensor, not both")
        arr = (N.Box * max(len(boxes), 1))()
        bad = [(n, v) for n, v in (targets or {}).items() if not -1 <= v < len(NAMES)]
        if bad:
            raise ValueError(f"tensor '{bad[0][0]}': target {bad[0][1]} is no sl_dtype")
        keep: list[Any] = []
        for i, (name, dev, start, length) in enumerate(boxes):
            s = (ctypes.c_uint64 * max(len(start), 1))(*start)
            n = (ctypes.c_uint64 * max(len(length), 1))(*length)
            b = name.encode("utf-8", "surrogateescape")
            keep += [s, n, b]
            arr[i] = N.Box(b, dev, len(start), s, n, -1 if targets is None else targets[name])
        self = cls.__new__(cls)
        self._h = ctypes.c_void_p()
        st = N.lib.sl_plan_build_boxes(ck.handle, arr, len(boxes), n_devices,
                                       target_value(dtype) if targets is None else BOX_DTYPES,
                                       ctypes.byref(self._h))
        self._take(st)
        return self

    def _take(self, st: int) -> None:
        """Reads the built plan into Python, or raises its error."""
        if st != 0:
            msg = N.lib.sl_plan_errmsg(self._h) if self._h else None
            self.close()
            N.raise_status(st, msg)
        self.layout = _LAYOUT_NAMES.get(N.lib.sl_plan_layout(self._h), "?")
        self.tp, self.pp = N.lib.sl_plan_tp(self._h), N.lib.sl_plan_pp(self._h)
        self.ep: bool = bool(N.lib.sl_plan_ep(self._h))   # False on a dense model, even if asked
        self.dtype: str = NAMES[N.lib.sl_plan_dtype(self._h)]
        self.devices: list[Device] = [self._device(d)
                                      for d in range(N.lib.sl_plan_device_count(self._h))]
        self.total_bytes: int = N.lib.sl_plan_total_bytes(self._h)
        rb = N.lib.sl_plan_read_bytes(self._h)
        self.read_bytes: int | None = None if rb == 2**64 - 1 else rb

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
                f"{len(self.devices)} devices, {self.total_bytes} bytes)")


def plan(path: Any = None, *, config: ConfigSource | None = None, tp: int = 1, pp: int = 1,
         ep: bool = False, layout: str = "tp", dtype: Any = None, rules: Any = None) -> Plan:
    """Plans a checkpoint (path) or, with path None, a model from its config alone. config: a
    config.json's path, a mapping of its keys, or a transformers config (its to_dict())."""
    if path is None:
        return Plan(None, config=config, tp=tp, pp=pp, ep=ep, layout=layout, dtype=dtype,
                    rules=rules)
    with opened(path) as ck:
        return Plan(ck, config=config, tp=tp, pp=pp, ep=ep, layout=layout, dtype=dtype,
                    rules=rules)
