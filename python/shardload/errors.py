"""Exceptions: one family per stage of the C core's sl_status values (docs/errors.md)."""
from __future__ import annotations


class Error(Exception):
    """A failure reported by the C core.

    ``status`` is the stable ``SL_E_*`` name and ``message`` the library's one-line message,
    which names the file, tensor or parameter involved.
    """

    def __init__(self, status: str, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class FormatError(Error):
    """A malformed safetensors file (SAFETENSORS.md section 2 and the strictness policy)."""


class CheckpointError(Error):
    """The checkpoint as a whole: index, missing or duplicate files and tensors."""


class PlanError(Error):
    """Config, rule table, shapes or divisibility: the model cannot be placed on this mesh."""


class LoadError(Error):
    """Reading failed, or a file changed while it was read."""


class DeviceError(Error):
    """A device backend failed (allocation, CUDA runtime) or cannot do what was asked."""


class ArgumentError(Error, ValueError):
    """The C core refused an argument (SL_E_INVALID_ARG); also a ValueError."""


class UnsupportedError(Error):
    """Not built in or not available here (SL_E_UNSUPPORTED)."""


class CancelledError(Error):
    """Stopped by sl_cancel (SL_E_CANCELLED); the unfinished files were removed."""


# Status value -> (name, exception class). Values are stable in shardload.h.
_FAMILY: dict[int, type[Error]] = {}
for _v in range(1, 12):
    _FAMILY[_v] = FormatError
for _v in (20, 21, 22):
    _FAMILY[_v] = CheckpointError
for _v in (40, 41, 42, 43, 44):
    _FAMILY[_v] = PlanError
_FAMILY.update({30: LoadError, 31: LoadError, 50: LoadError, 52: LoadError, 51: DeviceError,
                32: ArgumentError, 33: UnsupportedError, 34: CancelledError})


def error_class(status: int) -> type[Error]:
    """The exception class for a status value."""
    return _FAMILY.get(status, Error)
