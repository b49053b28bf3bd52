"""Arrays to buffers and layouts: numpy arrays (uploaded once per call, views
of one base uploaded together so their strides go to the library as they are)
and pyopencl arrays (passed as they are, no copy)."""
from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from . import _lib
from ._context import Context
from ._errors import InvalidArgumentError, InvalidShapeError

DTYPE_CODES = {"f32": 0, "f16": 1, "bf16": 2}

try:  # bfloat16 as numpy knows it, where installed
    import ml_dtypes  # type: ignore
    BFLOAT16: Optional[np.dtype] = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - optional
    BFLOAT16 = None

# Axis order of a tensor's array: positions of (batch, token, head, column);
# None where the array has no such axis (a ragged batch has no batch axis).
AXES = {"bshd": (0, 1, 2, 3), "bhsd": (0, 2, 1, 3)}
RAGGED_AXES = (None, 0, 1, 2)


def is_device_array(x: Any) -> bool:
    return isinstance(x, cla.Array)


def storage_code(x: Any, name: str, dtype: Optional[str]) -> int:
    """The fcl_dtype of an array: float32, float16, ml_dtypes.bfloat16, or
    uint16 holding bfloat16 bits when dtype="bf16"."""
    if dtype is not None and dtype not in DTYPE_CODES:
        raise InvalidArgumentError(f"dtype must be one of f32, f16, bf16, not {dtype!r}")
    dt = np.dtype(x.dtype)
    if dt == np.float32:
        code = 0
    elif dt == np.float16:
        code = 1
    elif BFLOAT16 is not None and dt == BFLOAT16:
        code = 2
    elif dt == np.uint16 and dtype == "bf16":
        return 2
    elif dt == np.uint16:
        raise InvalidArgumentError(f"{name} is uint16: pass dtype='bf16' if it holds bfloat16 bits")
    else:
        raise InvalidArgumentError(f"{name} has dtype {dt}; flashcl takes float32, float16 and "
                                   f"bfloat16 (ml_dtypes.bfloat16, or uint16 with dtype='bf16')")
    if dtype is not None and DTYPE_CODES[dtype] != code:
        raise InvalidArgumentError(f"{name} is {dt}, not the dtype={dtype!r} asked for")
    return code


def element_strides(x: Any, axes: Sequence[Optional[int]]) -> Optional[List[int]]:
    """Strides in elements for (batch, token, head); None if the library's
    layouts cannot express the array (head_dim not contiguous, negative or
    fractional strides, two elements at one address)."""
    item = x.dtype.itemsize
    shape, strides = x.shape, x.strides
    if x.flags.c_contiguous:  # the common case: no overlap to look for
        return [0 if a is None or shape[a] == 1 else strides[a] // item for a in axes[:3]]
    c = axes[3]
    if shape[c] > 1 and strides[c] != item:
        return None
    out = []
    for a in axes[:3]:
        if a is None or shape[a] == 1:
            out.append(0)
            continue
        s = strides[a]
        if s <= 0 or s % item:
            return None
        out.append(s // item)
    # no two elements at one address: each stride spans the smaller axes' extent
    spans = sorted((s, shape[a]) for s, a in zip(out, axes[:3]) if a is not None and s)
    extent = shape[c]
    for s, n in spans:
        if s < extent:
            return None
        extent = s * (n - 1) + extent
    return out


class Tensor:
    """A tensor as the library takes it: a buffer handle and its layout."""
    __slots__ = ("mem", "layout")

    def __init__(self, mem: int, layout: _lib.TensorLayout):
        self.mem = mem
        self.layout = layout


def device_tensor(ctx: Context, x: Any, name: str, axes: Sequence[Optional[int]]) -> Tensor:
    """A pyopencl array as it is: its buffer, offset and strides."""
    if not isinstance(x, cla.Array):
        raise InvalidArgumentError(f"{name} is a {type(x).__name__}: pass pyopencl arrays for "
                                   f"every tensor of a call whose q is one (or numpy for all)")
    if x.context.int_ptr != ctx.cl_context.int_ptr:
        raise InvalidArgumentError(f"{name} is an array of another OpenCL context than the call's")
    strides = element_strides(x, axes)
    item = x.dtype.itemsize
    if strides is None or x.offset % item:
        raise InvalidArgumentError(
            f"{name}'s strides {x.strides} (bytes) are not a layout flashcl can read in place: "
            f"the last axis must be contiguous, the others positive and not overlapping")
    if x.base_data is None:
        raise InvalidShapeError(f"{name} is empty")
    return Tensor(x.base_data.int_ptr,
                  _lib.TensorLayout(x.offset // item, strides[0], strides[1], strides[2]))


class HostUploads:
    """The numpy inputs of one call, uploaded once each: views of one base
    array (a packed QKV projection, a transposed [B,H,N,d]) share one upload
    and go to the library with their strides."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.buffers: List[cl.Buffer] = []
        self._by_base: Dict[int, Tuple[cl.Buffer, int]] = {}
        self._spans: Dict[int, Tuple[cl.Buffer, Any]] = {}

    def _upload(self, lo: int, nbytes: int) -> cl.Buffer:
        host = (ctypes.c_char * nbytes).from_address(lo)
        buf = cl.Buffer(self.ctx.cl_context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                        hostbuf=host)
        self.buffers.append(buf)
        self._spans[buf.int_ptr] = (buf, host)
        return buf

    def writable(self, mem: int) -> Tuple[cl.Buffer, Any]:
        """An upload and the host memory it was copied from, to copy it back."""
        return self._spans[mem]

    def tensor(self, x: np.ndarray, name: str, axes: Sequence[Optional[int]]) -> Tensor:
        if x.size == 0:
            raise InvalidShapeError(f"{name} is empty (shape {x.shape})")
        strides = element_strides(x, axes)
        if strides is None:
            x = np.ascontiguousarray(x)
            strides = element_strides(x, axes)
            assert strides is not None
        item = x.dtype.itemsize
        addr = x.__array_interface__["data"][0]
        root = x
        while isinstance(root.base, np.ndarray):
            root = root.base
        if root.flags.c_contiguous and root.nbytes <= 2 * _span(x):
            lo, nbytes, key = root.__array_interface__["data"][0], root.nbytes, id(root)
        else:
            lo, nbytes, key = addr, _span(x), -addr - 1
        if (addr - lo) % item:
            x = np.ascontiguousarray(x)
            return self.tensor(x, name, axes)
        found = self._by_base.get(key)
        if found is None:
            found = (self._upload(lo, nbytes), lo)
            self._by_base[key] = found
        buf, base = found
        return Tensor(buf.int_ptr, _lib.TensorLayout((addr - base) // item, *strides))

    def small(self, x: np.ndarray) -> cl.Buffer:
        """A small auxiliary array (ALiBi slopes, a block table), contiguous."""
        x = np.ascontiguousarray(x)
        return self._upload(x.__array_interface__["data"][0], x.nbytes)


def _span(x: np.ndarray) -> int:
    return sum((n - 1) * s for n, s in zip(x.shape, x.strides)) + x.dtype.itemsize


def output_layout(shape: Sequence[int], axes: Sequence[Optional[int]]) -> _lib.TensorLayout:
    """Element strides of a C-contiguous array of `shape` in the axis order `axes`."""
    strides = [0] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        acc *= shape[i]
    s = [0 if a is None or shape[a] == 1 else strides[a] for a in axes[:3]]
    return _lib.TensorLayout(0, s[0], s[1], s[2])


def as_int32_host(x: Any, name: str) -> np.ndarray:
    """Host int32 values (cu_seqlens, cache lengths) from a list, numpy or a
    pyopencl array (read back: a wait on its queue)."""
    if isinstance(x, cla.Array):
        x = x.get()
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{name} must hold integers, not {a.dtype}")
    if a.size and (a.min() < -2**31 or a.max() >= 2**31):
        raise InvalidArgumentError(f"{name} has values outside int32")
    return np.ascontiguousarray(a, dtype=np.int32)
