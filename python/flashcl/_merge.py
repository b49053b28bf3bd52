"""Merging attention states computed over disjoint sets of keys."""
from __future__ import annotations

import ctypes
from typing import Any, Optional, Sequence, Union

import numpy as np
import pyopencl.array as cla

from . import _lib
from ._arrays import AXES, Tensor
from ._attention import Array, _Call, _returns
from ._context import Context
from ._errors import InvalidArgumentError, InvalidShapeError
from ._lib import lib


def merge_states(o_parts: Union[Array, Sequence[np.ndarray]], lse_parts: Union[Array, Any], *,
                 ctx: Optional[Context] = None, dtype: Optional[str] = None,
                 out: Optional[Array] = None, info: bool = False) -> Any:
    """Merges P partial attention states of the same query rows, each over its
    own disjoint set of keys (a split cache, a shared prefix and a suffix):
    ``lse = log(sum_p exp(lse_p))``, ``o = sum_p exp(lse_p - lse) o_p`` exactly.

    ``o_parts``: ``[P, batch, seqlen, heads, head_dim]`` (any strides with
    head_dim contiguous), or a list of P numpy arrays ``[batch, seqlen, heads,
    head_dim]``; ``lse_parts``: float32 ``[P, batch, heads, seqlen]`` (or a
    list), as :func:`attention` returns LSE. A part whose LSE is -inf weighs
    nothing; a row whose parts are all empty gets zeros and LSE -inf.
    Returns ``(o, lse)``."""
    if isinstance(o_parts, (list, tuple)):
        if not all(isinstance(x, np.ndarray) for x in o_parts):
            raise InvalidArgumentError("a list of parts must be numpy arrays; stack pyopencl "
                                       "parts into one [P, batch, seqlen, heads, head_dim] array")
        o_parts = np.stack(o_parts)
    if isinstance(lse_parts, (list, tuple)):
        lse_parts = np.stack([np.asarray(x) for x in lse_parts])
    if len(getattr(o_parts, "shape", ())) != 5:
        raise InvalidShapeError("o_parts must be [parts, batch, seqlen, heads, head_dim]")
    p, b, n, h, d = (int(x) for x in o_parts.shape)
    if tuple(lse_parts.shape) != (p, b, h, n) or np.dtype(lse_parts.dtype) != np.float32:
        raise InvalidShapeError(f"lse_parts must be float32 [parts, batch, heads, seqlen] = "
                                f"{(p, b, h, n)}, not {lse_parts.dtype} {tuple(lse_parts.shape)}")
    call = _Call(o_parts, ctx, dtype)
    desc = _lib.MergeDesc()
    lib.fcl_merge_desc_init(ctypes.byref(desc), p, b, n, h, d)
    desc.dtype = call.code
    item = o_parts.dtype.itemsize
    sizes = _lib.MergeSizes()
    why = ctypes.create_string_buffer(512)
    _lib.check(lib.fcl_merge_buffer_sizes(ctypes.byref(desc), ctypes.byref(sizes), why, 512),
               why=why.value)
    if call.device:  # part p is the first part's view moved by the part stride
        if p > 1 and (o_parts.strides[0] <= 0 or o_parts.strides[0] % item):
            raise InvalidArgumentError(f"o_parts' part stride {o_parts.strides[0]} (bytes) must "
                                       f"be positive, in whole elements")
        to = call.input(o_parts[0], "o_parts", AXES["bshd"])
        part_stride = o_parts.strides[0] // item if p > 1 else 0
    else:
        o_parts = np.ascontiguousarray(o_parts)
        to = Tensor(call.uploads.small(o_parts).int_ptr, _lib.TensorLayout())
        part_stride = 0  # back to back
    desc.o_parts = to.layout
    desc.o_part_stride = part_stride
    if call.device:
        if not isinstance(lse_parts, cla.Array) or not lse_parts.flags.c_contiguous \
                or lse_parts.offset:
            raise InvalidArgumentError("lse_parts must be a contiguous pyopencl array at "
                                       "offset 0")
        lse_mem = lse_parts.base_data.int_ptr
    else:
        lse_mem = call.uploads.small(np.asarray(lse_parts, np.float32)).int_ptr
    tout, o = call.output((b, n, h, d), AXES["bshd"], "out", out)
    tl, lse = call.output((b, h, n), (0, 2, 1, None), "lse", None, lse=True)
    desc.o = tout.layout
    ri = call.run(lib.fcl_merge_states, ctypes.byref(desc), to.mem, lse_mem, tout.mem, tl.mem,
                  info=info)
    return _returns(call, o, lse, ri)
