"""Contexts and devices."""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import pyopencl as cl

from . import _lib
from ._errors import InvalidArgumentError
from ._lib import lib


@dataclass(frozen=True)
class Device:
    """One OpenCL device as flashcl sees it, with the limits it plans with
    (what ``flashcl-info`` prints). ``selector`` ("P:D") picks it in
    :class:`Context`."""
    platform_index: int
    device_index: int
    name: str
    vendor: str
    platform: str
    version: str
    driver: str
    max_clock_mhz: int
    limits: Dict[str, int]

    @property
    def selector(self) -> str:
        return f"{self.platform_index}:{self.device_index}"


def _device(info: _lib.DeviceInfo) -> Device:
    lim = {name: int(getattr(info.limits, name)) for name, _ in _lib.DeviceLimits._fields_}
    return Device(info.platform_index, info.device_index, info.name.decode(errors="replace"),
                  info.vendor.decode(errors="replace"), info.platform.decode(errors="replace"),
                  info.version.decode(errors="replace"), info.driver.decode(errors="replace"),
                  info.max_clock_mhz, lim)


def devices() -> List[Device]:
    """Every OpenCL device of every platform, in the order "P:D" selectors count."""
    count = ctypes.c_size_t(0)
    _lib.check(lib.fcl_devices(None, 0, ctypes.byref(count)))
    infos = (_lib.DeviceInfo * max(count.value, 1))()
    _lib.check(lib.fcl_devices(infos, count.value, ctypes.byref(count)))
    return [_device(infos[i]) for i in range(count.value)]


class Context:
    """A device, its in-order queue and the kernels flashcl built for it.

    ``Context(selector)`` creates one as ``fcl_context_create`` does: None
    means $FLASHCL_DEVICE, else the first GPU, else the first device; "gpu",
    "cpu", "P:D" or a substring of the device's name pick another.
    ``Context.from_pyopencl(queue)`` wraps a queue the caller made (its
    context and device), so that flashcl enqueues on it and takes its
    buffers. Either way ``cl_context`` and ``queue`` are pyopencl objects of
    the same OpenCL handles the library uses, for making arrays.

    ``tuned=False`` plans every call by the rules (no tuning database).
    """

    def __init__(self, selector: Optional[str] = None, *, tuned: bool = True):
        ptr = ctypes.c_void_p()
        status = lib.fcl_context_create(selector.encode() if selector else None,
                                        ctypes.byref(ptr))
        self._finish_init(ptr, status, tuned)
        self.cl_context = cl.Context.from_int_ptr(lib.fcl_context_cl_context(ptr), retain=True)
        self.queue = cl.CommandQueue.from_int_ptr(lib.fcl_context_cl_queue(ptr), retain=True)

    @classmethod
    def from_pyopencl(cls, queue: "cl.CommandQueue", *, tuned: bool = True) -> "Context":
        """Wraps the caller's in-order pyopencl queue (and its context and device)."""
        if not isinstance(queue, cl.CommandQueue):
            raise InvalidArgumentError(f"from_pyopencl takes a pyopencl.CommandQueue, "
                                       f"not {type(queue).__name__}")
        self = cls.__new__(cls)
        ptr = ctypes.c_void_p()
        status = lib.fcl_context_wrap(queue.context.int_ptr, queue.device.int_ptr,
                                      queue.int_ptr, ctypes.byref(ptr))
        self._finish_init(ptr, status, tuned)
        self.cl_context = queue.context
        self.queue = queue
        return self

    def _finish_init(self, ptr: ctypes.c_void_p, status: int, tuned: bool) -> None:
        self._ptr = None
        if status != _lib.SUCCESS:
            message = (lib.fcl_context_last_error(ptr) or b"").decode(errors="replace")
            lib.fcl_context_release(ptr)
            _lib.raise_status(status, message)
        self._ptr = ptr.value
        if not tuned:
            _lib.check(lib.fcl_context_use_tuned_plans(self._ptr, 0), self._ptr)
        info = _lib.DeviceInfo()
        _lib.check(lib.fcl_context_device(self._ptr, ctypes.byref(info)), self._ptr)
        self.device: Device = _device(info)
        self._limits = _lib.DeviceLimits()
        ctypes.pointer(self._limits)[0] = info.limits

    def __del__(self) -> None:
        ptr = getattr(self, "_ptr", None)
        if ptr:
            self._ptr = None
            try:
                self.queue.finish()
            except Exception:  # the interpreter may be shutting down
                pass
            lib.fcl_context_release(ptr)

    def __repr__(self) -> str:
        return f"flashcl.Context({self.device.name!r}, {self.device.selector})"

    @property
    def tuning(self) -> Dict[str, Any]:
        """Whether tuned plans are used, how many buckets, from which file."""
        t = _lib.TuningInfo()
        _lib.check(lib.fcl_context_tuning(self._ptr, ctypes.byref(t)), self._ptr)
        return {"enabled": bool(t.enabled), "plans": t.plans,
                "source": t.source.decode(errors="replace"),
                "file_name": t.file_name.decode(errors="replace")}

    def finish(self) -> None:
        """Waits for everything enqueued on the context's queue."""
        self.queue.finish()


_default: Optional[Context] = None
_wrapped: Dict[int, Context] = {}
_lock = threading.Lock()


def default_context() -> Context:
    """The context numpy inputs run on when no ctx is given (created once)."""
    global _default
    with _lock:
        if _default is None:
            _default = Context()
        return _default


def context_for_queue(queue: "cl.CommandQueue") -> Context:
    """The (cached) flashcl context wrapping a caller's queue."""
    ctx = _wrapped.get(queue.int_ptr)
    if ctx is None or ctx.queue != queue:
        with _lock:
            ctx = Context.from_pyopencl(queue)
            _wrapped[queue.int_ptr] = ctx
    return ctx


def peaks(ctx: Optional[Context] = None) -> Dict[str, float]:
    """The device's measured copy bandwidth (GB/s, bytes read + written) and
    fp32 FMA rate (TFLOP/s): the roofline's ceilings. Blocks (about a second)."""
    ctx = ctx or default_context()
    p = _lib.Peaks()
    _lib.check(lib.fcl_measure_peaks(ctx._ptr, ctypes.byref(p)), ctx._ptr)
    return {"copy_gbps": p.copy_gbps, "fma_tflops": p.fma_tflops}
