"""Exceptions: one per fcl_status, all under flashcl.Error."""
from __future__ import annotations

from typing import Callable, Dict, Type

# The library's names of its statuses (fcl_status_str), set by _lib when it
# loads the library: this module needs nothing of it otherwise.
_status_name: Callable[[int], str] = lambda status: f"fcl_status {status}"


def use_status_names(name: Callable[[int], str]) -> None:
    """Names statuses with `name` (the library's fcl_status_str)."""
    global _status_name
    _status_name = name


class Error(RuntimeError):
    """A flashcl call failed. ``status`` is the library's fcl_status (an int),
    ``status_name`` its name (e.g. "FCL_ERROR_INVALID_SHAPE") and ``message``
    the library's explanation (the bad argument, a build log, an OpenCL
    call). Errors the Python layer finds before calling the library carry the
    status the library would have returned."""

    status: int = -1

    def __init__(self, message: str, status: int = -1):
        self.status = status if status >= 0 else type(self).status
        self.status_name = _status_name(self.status) if self.status >= 0 else "FCL_STATUS_UNKNOWN"
        self.message = message
        super().__init__(f"{self.status_name}: {message}" if message else self.status_name)


class InvalidArgumentError(Error, ValueError):
    """A bad value, dtype, array type or buffer (FCL_ERROR_INVALID_ARGUMENT)."""
    status = 1


class InvalidShapeError(Error, ValueError):
    """Sizes that are zero, mismatched or inconsistent (FCL_ERROR_INVALID_SHAPE)."""
    status = 2


class BufferTooSmallError(Error, ValueError):
    """A buffer smaller than the shape needs (FCL_ERROR_BUFFER_TOO_SMALL)."""
    status = 3


class UnsupportedError(Error):
    """Valid, but this device or algorithm cannot run it (FCL_ERROR_UNSUPPORTED)."""
    status = 4


class OutOfMemoryError(Error, MemoryError):
    """An allocation failed or scratch exceeds the limit (FCL_ERROR_OUT_OF_MEMORY)."""
    status = 5


class DeviceNotFoundError(Error):
    """No OpenCL device matched the selector (FCL_ERROR_DEVICE_NOT_FOUND)."""
    status = 6


class BuildFailedError(Error):
    """A kernel failed to compile; the message holds the log (FCL_ERROR_BUILD_FAILED)."""
    status = 7


class OpenCLError(Error):
    """Another OpenCL error; the message names the call (FCL_ERROR_OPENCL)."""
    status = 8


class CLBlastError(Error):
    """CLBlast (the naive algorithm's GEMMs) failed (FCL_ERROR_CLBLAST)."""
    status = 9


_BY_STATUS: Dict[int, Type[Error]] = {c.status: c for c in (
    InvalidArgumentError, InvalidShapeError, BufferTooSmallError, UnsupportedError,
    OutOfMemoryError, DeviceNotFoundError, BuildFailedError, OpenCLError, CLBlastError)}


def error_for(status: int, message: str) -> Error:
    return _BY_STATUS.get(status, Error)(message, status)
