"""The attention calls, in flash-attn's and PyTorch's names.

Every call takes either numpy arrays (copied to the device and the results
copied back into new numpy arrays or ``out=``) or pyopencl arrays (no copy:
the call is enqueued on q's queue, or ctx's when ``ctx=`` is given, and
returns pyopencl arrays, or writes ``out=``). Semantics, the library's (include/flashcl.h):

* Shapes: q, o, dout, dq ``[batch, seqlen_q, heads_q, head_dim]`` and k, v,
  dk, dv ``[batch, seqlen_k, heads_kv, head_dim]`` with ``layout="bshd"``
  (flash-attn's); ``layout="bhsd"`` is PyTorch's ``[batch, heads, seqlen,
  head_dim]``. Any strides whose last axis is contiguous go through as
  they are (a transpose, one of the views of a packed QKV projection).
* LSE: float32 ``[batch, heads_q, seqlen_q]`` (ragged: ``[heads_q,
  total_q]``), the natural log of each row's softmax denominator over the
  scaled (soft-capped, biased) logits.
* Masks are aligned to the bottom-right corner, as flash-attn's: query i
  sees key j iff ``i + Nk - Nq - window_left <= j <= i + Nk - Nq +
  window_right`` (-1: unbounded); ``causal`` is ``window_right = 0``. A
  query that sees no key outputs zeros and LSE = -inf.
* Grouped-query attention: heads_q a multiple of heads_kv; query head h
  reads key/value head ``h // (heads_q // heads_kv)`` (MQA: heads_kv = 1).
* Logits: ``l = softmax_scale * q.k`` (default ``1/sqrt(head_dim)``), then
  ``softcap * tanh(l / softcap)`` when ``softcap > 0``, then ``l -
  slope_h * |i + Nk - Nq - j|`` with ALiBi slopes (``[heads_q]`` or
  ``[batch, heads_q]`` float32).
* Failed calls raise :class:`flashcl.Error`; every argument is checked
  before anything is enqueued, and an ``out=`` buffer is untouched or whole.
"""
from __future__ import annotations

import ctypes
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from . import _lib
from ._arrays import (AXES, RAGGED_AXES, HostUploads, Tensor, as_int32_host,
                      device_tensor, element_strides, is_device_array, output_layout, storage_code)
from ._context import Context, context_for_queue, default_context
from ._errors import InvalidArgumentError, InvalidShapeError
from ._lib import lib

Array = Union[np.ndarray, cla.Array]
ALGOS = {"flash": 0, "naive": 1}


def run_info_dict(info: _lib.RunInfo) -> Dict[str, Any]:
    """fcl_run_info as a dict: ms, bytes_model, bytes_counted, flops, plan, chunks."""
    return {"ms": info.ms, "bytes_model": info.bytes_model,
            "bytes_counted": info.bytes_counted, "flops": info.flops,
            "plan": plan_dict(info.plan), "chunks": info.chunks,
            "tuned": bool(info.plan.tuned)}


def plan_dict(p: _lib.Plan) -> Dict[str, Any]:
    d: Dict[str, Any] = {name: int(getattr(p, name)) for name, _ in _lib.Plan._fields_}
    d["kernel"] = lib.fcl_flash_kernel_name(p.kernel).decode()
    d["merge"] = lib.fcl_split_merge_name(p.merge).decode()
    return d


class _Call:
    """One call's context, mode (numpy or pyopencl) and the buffers it made."""

    def __init__(self, q: Any, ctx: Optional[Context], dtype: Optional[str]):
        self.device = is_device_array(q)
        if self.device:
            if ctx is None:
                if q.queue is None:
                    raise InvalidArgumentError("q has no queue: give it one or pass ctx=")
                ctx = context_for_queue(q.queue)
            self.queue = ctx.queue  # q's own queue unless ctx= names another
        elif isinstance(q, np.ndarray):
            ctx = ctx or default_context()
            self.queue = ctx.queue
            self.uploads = HostUploads(ctx)
        else:
            raise InvalidArgumentError(f"q is a {type(q).__name__}: flashcl takes numpy arrays "
                                       f"or pyopencl.array.Array")
        if ctx is not None and not isinstance(ctx, Context):
            raise InvalidArgumentError(f"ctx must be a flashcl.Context, not {type(ctx).__name__}")
        self.ctx = ctx
        self.code = storage_code(q, "q", dtype)
        self.np_dtype = q.dtype
        self.dtype_arg = dtype
        self.results: list = []  # (device buffer, host array) read back after the call

    def input(self, x: Any, name: str, axes: Sequence[Optional[int]]) -> Tensor:
        if self.device:
            t = device_tensor(self.ctx, x, name, axes)
        else:
            if not isinstance(x, np.ndarray):
                raise InvalidArgumentError(f"{name} is a {type(x).__name__}: pass numpy arrays "
                                           f"for every tensor of a call whose q is one")
            t = self.uploads.tensor(x, name, axes)
        if storage_code(x, name, self.dtype_arg) != self.code:
            raise InvalidArgumentError(f"{name} is {x.dtype}, q {self.np_dtype}: "
                                       f"the tensors of a call share one storage type")
        return t

    def aux_floats(self, x: Any, name: str) -> int:
        """A float32 side input (ALiBi slopes): its buffer handle."""
        if self.device:
            if not isinstance(x, cla.Array) or x.dtype != np.float32 or not x.flags.c_contiguous \
                    or x.offset:
                raise InvalidArgumentError(f"{name} must be a contiguous float32 pyopencl array "
                                           f"at offset 0")
            return x.base_data.int_ptr
        a = np.asarray(x)
        if a.dtype.kind != "f":
            raise InvalidArgumentError(f"{name} must hold floats, not {a.dtype}")
        return self.uploads.small(a.astype(np.float32)).int_ptr

    def aux_int32(self, x: Any, name: str) -> int:
        """An int32 device side input (a block table): its buffer handle."""
        if self.device and isinstance(x, cla.Array):
            if x.dtype != np.int32 or not x.flags.c_contiguous or x.offset:
                raise InvalidArgumentError(f"{name} must be a contiguous int32 array at offset 0")
            return x.base_data.int_ptr
        return self.uploads_or_new().small(as_int32_host(x, name)).int_ptr

    def uploads_or_new(self) -> HostUploads:
        if not hasattr(self, "uploads"):
            self.uploads = HostUploads(self.ctx)
        return self.uploads

    def output(self, shape: Tuple[int, ...], axes: Sequence[Optional[int]], name: str,
               out: Any, lse: bool = False) -> Tuple[Tensor, Any]:
        """An output: the caller's out= (checked) or a new packed array."""
        dtype = np.dtype(np.float32) if lse else self.np_dtype
        if out is not None:
            if tuple(out.shape) != tuple(shape):
                raise InvalidShapeError(f"{name} has shape {tuple(out.shape)}, the call "
                                        f"writes {tuple(shape)}")
            if np.dtype(out.dtype) != dtype:
                raise InvalidArgumentError(f"{name} is {out.dtype}, the call writes {dtype}")
        if self.device:
            arr = out if out is not None else cla.empty(self.queue, shape, dtype)
            if lse:
                if not arr.flags.c_contiguous or arr.offset:
                    raise InvalidArgumentError(f"{name} must be contiguous at offset 0")
                return Tensor(arr.base_data.int_ptr, _lib.TensorLayout()), arr
            return device_tensor(self.ctx, arr, name, axes), arr
        if out is not None and not isinstance(out, np.ndarray):
            raise InvalidArgumentError(f"{name} must be a numpy array like q")
        nbytes = int(np.prod(shape)) * dtype.itemsize
        buf = cl.Buffer(self.ctx.cl_context, cl.mem_flags.READ_WRITE, max(nbytes, 4))
        host = np.empty(shape, dtype)
        self.results.append((buf, host, out))
        layout = _lib.TensorLayout() if lse else output_layout(shape, axes)
        return Tensor(buf.int_ptr, layout), host

    def run(self, fn: Any, *args: Any, info: bool) -> Optional[Dict[str, Any]]:
        ri = _lib.RunInfo() if info else None
        status = fn(self.ctx._ptr, *args, ctypes.byref(ri) if ri is not None else None)
        if status != _lib.SUCCESS:
            _lib.check(status, self.ctx._ptr)
        if not self.device:
            for buf, host, _ in self.results:
                cl.enqueue_copy(self.queue, host, buf, is_blocking=True)
            for _, host, out in self.results:
                if out is not None:
                    out[...] = host
        return run_info_dict(ri) if ri is not None else None

    def result(self, arr: Any) -> Any:
        if not self.device:
            for _, host, out in self.results:
                if host is arr and out is not None:
                    return out
        return arr


def _dims(x: Any, name: str, axes: Sequence[Optional[int]], ndim: int) -> Tuple[int, ...]:
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) != ndim:
        raise InvalidShapeError(f"{name} must have {ndim} dimensions, not "
                                f"{None if shape is None else len(shape)}")
    a, b, c, d = axes
    return (1 if a is None else int(shape[a]), int(shape[b]), int(shape[c]), int(shape[d]))


def _axes(layout: str) -> Tuple[int, ...]:
    if layout not in AXES:
        raise InvalidArgumentError(f"layout must be 'bshd' or 'bhsd', not {layout!r}")
    return AXES[layout]


def _algo(algo: str) -> int:
    if algo not in ALGOS:
        raise InvalidArgumentError(f"algo must be 'flash' or 'naive', not {algo!r}")
    return ALGOS[algo]


def _shape_of(axes: Sequence[Optional[int]], b: int, t: int, h: int, c: int) -> Tuple[int, ...]:
    """The array shape that holds (b, t, h, c) in the axis order `axes`."""
    dims = [0] * sum(a is not None for a in axes)
    for a, n in zip(axes, (b, t, h, c)):
        if a is not None:
            dims[a] = n
    return tuple(dims)


def make_desc(b: int, hq: int, hkv: int, nq: int, nk: int, d: int, code: int, *,
              causal: bool = False, softmax_scale: Optional[float] = None,
              window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
              batch_invariant: bool = False) -> _lib.AttentionDesc:
    """An fcl_attention_desc with the shape and the mask (the library checks
    them): a copy of the one made for the same arguments before, if any."""
    key = (b, hq, hkv, nq, nk, d, code, causal, softmax_scale, tuple(window_size), softcap,
           batch_invariant)
    made = _DESCS.get(key)
    if made is None:
        made = _lib.AttentionDesc()
        lib.fcl_attention_desc_init(ctypes.byref(made), b, hq, hkv, nq, nk, d)
        made.dtype = code
        made.causal = 1 if causal else 0
        if softmax_scale is not None:
            made.scale = float(softmax_scale)
        try:
            left, right = window_size
            made.window_left, made.window_right = int(left), int(right)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"window_size must be (left, right), not {window_size!r}")
        made.softcap = float(softcap)
        made.batch_invariant = 1 if batch_invariant else 0
        if len(_DESCS) >= 256:
            _DESCS.clear()
        _DESCS[key] = made
    return _lib.AttentionDesc.from_buffer_copy(made)


_DESCS: Dict[Any, _lib.AttentionDesc] = {}


def _check_sizes(ctx: Context, desc: _lib.AttentionDesc) -> None:
    """The library's own validation of the descriptor, before anything is uploaded."""
    sizes = _lib.BufferSizes()
    why = ctypes.create_string_buffer(512)
    _lib.check(lib.fcl_attention_buffer_sizes(ctypes.byref(desc), ctypes.byref(sizes), why, 512),
               why=why.value)


def _qkv_shapes(q: Any, k: Any, v: Any, axes: Sequence[Optional[int]], ndim: int
                ) -> Tuple[int, int, int, int, int, int]:
    b, nq, hq, d = _dims(q, "q", axes, ndim)
    bk, nk, hkv, dk = _dims(k, "k", axes, ndim)
    if _dims(v, "v", axes, ndim) != (bk, nk, hkv, dk):
        raise InvalidShapeError(f"v has shape {tuple(v.shape)}, k {tuple(k.shape)}: they must match")
    if bk != b or dk != d:
        raise InvalidShapeError(f"q {tuple(q.shape)} and k {tuple(k.shape)} differ in batch or "
                                f"head_dim")
    if hkv == 0 or hq % hkv:
        raise InvalidShapeError(f"heads_q ({hq}) must be a multiple of heads_kv ({hkv})")
    return b, hq, hkv, nq, nk, d


def _alibi(call: _Call, desc: _lib.AttentionDesc, slopes: Any, b: int, hq: int) -> None:
    if slopes is None:
        return
    shape = tuple(slopes.shape) if hasattr(slopes, "shape") else np.shape(slopes)
    if shape not in ((hq,), (b, hq)):
        raise InvalidShapeError(f"alibi_slopes has shape {shape}: [heads_q] = ({hq},) or "
                                f"[batch, heads_q] = ({b}, {hq})")
    desc.alibi_slopes = call.aux_floats(slopes, "alibi_slopes")
    desc.alibi_per_batch = 1 if len(shape) == 2 else 0


def _sinks(call: _Call, desc: _lib.AttentionDesc, sinks: Any, hq: int) -> None:
    if sinks is None:
        return
    shape = tuple(sinks.shape) if hasattr(sinks, "shape") else np.shape(sinks)
    if shape != (hq,):
        raise InvalidShapeError(f"sinks has shape {shape}: [heads_q] = ({hq},)")
    desc.sinks = call.aux_floats(sinks, "sinks")


def attention(q: Array, k: Array, v: Array, *, causal: bool = False,
              softmax_scale: Optional[float] = None, window_size: Tuple[int, int] = (-1, -1),
              softcap: float = 0.0, alibi_slopes: Optional[Array] = None,
              return_lse: bool = False, layout: str = "bshd", algo: str = "flash",
              ctx: Optional[Context] = None, dtype: Optional[str] = None,
              out: Optional[Array] = None, lse_out: Optional[Array] = None,
              info: bool = False, sinks: Optional[Array] = None,
              batch_invariant: bool = False) -> Any:
    """Exact attention forward: ``softmax(softmax_scale * q k^T + mask) v``.

    Returns ``o`` (q's shape and dtype), ``(o, lse)`` with ``return_lse``,
    and the run information dict last with ``info=True`` (ms, bytes_model,
    flops, plan, tuned; the call then waits for the device). See the module
    documentation for shapes, masks, GQA and LSE. ``algo="naive"`` runs the
    baseline (S and P in global memory, CLBlast GEMMs). ``dtype="bf16"``
    marks uint16 arrays as bfloat16 bits. ``sinks``: float32 ``[heads_q]``
    attention sinks (a logit per head in every row's denominator, with no
    value; LSE includes it). ``batch_invariant``: a sequence's bits do not
    depend on the rest of the batch (fcl_attention_desc.batch_invariant).
    """
    # pyopencl arrays with out= (a decode loop's calls): the prepared call of
    # the same arrays and options again, without the Python layer's checks
    # (the library checks every call itself)
    key = None
    if out is not None and alibi_slopes is None and sinks is None and type(q) is cla.Array \
            and (lse_out is not None or not return_lse):
        key = (_meta(q), _meta(k), _meta(v), _meta(out), _meta(lse_out), causal, softmax_scale,
               tuple(window_size), softcap, layout, algo, dtype, id(ctx) if ctx else q.queue,
               batch_invariant)
        hit = _PREPARED.get(key)
        if hit is not None:
            c, args = hit
            if info:
                ri = _lib.RunInfo()
                _lib.check(lib.fcl_attention_forward(c._ptr, *args, ctypes.byref(ri)), c._ptr)
                return _returns_device(out, lse_out if return_lse else None, run_info_dict(ri))
            status = lib.fcl_attention_forward(c._ptr, *args, None)
            if status:
                _lib.check(status, c._ptr)
            return (out, lse_out) if return_lse else out
    axes = _axes(layout)
    call = _Call(q, ctx, dtype)
    b, hq, hkv, nq, nk, d = _qkv_shapes(q, k, v, axes, 4)
    desc = make_desc(b, hq, hkv, nq, nk, d, call.code, causal=causal,
                     softmax_scale=softmax_scale, window_size=window_size, softcap=softcap,
                     batch_invariant=batch_invariant)
    if not call.device:
        _check_sizes(call.ctx, desc)
    tq, tk, tv = call.input(q, "q", axes), call.input(k, "k", axes), call.input(v, "v", axes)
    _alibi(call, desc, alibi_slopes, b, hq)
    _sinks(call, desc, sinks, hq)
    to, o = call.output(_shape_of(axes, b, nq, hq, d), axes, "out", out)
    tl, lse = (call.output((b, hq, nq), (0, 2, 1, None), "lse_out", lse_out, lse=True)
               if return_lse or lse_out is not None else (None, None))
    desc.q, desc.k, desc.v, desc.o = tq.layout, tk.layout, tv.layout, to.layout
    args = (ctypes.byref(desc), _algo(algo), tq.mem, tk.mem, tv.mem, to.mem,
            tl.mem if tl else None)
    ri = call.run(lib.fcl_attention_forward, *args, info=info)
    if key is not None:
        if len(_PREPARED) >= 256:
            _PREPARED.clear()
        _PREPARED[key] = (call.ctx, args)  # byref keeps desc alive
    return _returns(call, o, lse if return_lse else None, ri)


# prepared forwards on pyopencl arrays: (arrays, options) -> (context, arguments)
_PREPARED: Dict[Any, Tuple[Context, tuple]] = {}


def _meta(x: Any) -> Any:
    """What identifies an array's place for the library: buffer, offset, shape, strides, dtype."""
    if x is None:
        return None
    return (x.base_data.int_ptr, x.offset, x.shape, x.strides, x.dtype)


def _returns_device(o: Any, lse: Any, ri: Dict[str, Any]) -> Any:
    return (o, lse, ri) if lse is not None else (o, ri)


def _returns(call: _Call, o: Any, lse: Any, ri: Optional[Dict[str, Any]]) -> Any:
    res = [call.result(o)]
    if lse is not None:
        res.append(call.result(lse))
    if ri is not None:
        res.append(ri)
    return res[0] if len(res) == 1 else tuple(res)


def attention_backward(dout: Array, q: Array, k: Array, v: Array, o: Array, lse: Array, *,
                       causal: bool = False, softmax_scale: Optional[float] = None,
                       window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                       alibi_slopes: Optional[Array] = None, layout: str = "bshd",
                       algo: str = "flash", ctx: Optional[Context] = None,
                       dtype: Optional[str] = None, dq: Optional[Array] = None,
                       dk: Optional[Array] = None, dv: Optional[Array] = None,
                       info: bool = False, sinks: Optional[Array] = None) -> Any:
    """Exact attention backward: ``(dq, dk, dv)`` from the forward's inputs, its
    ``o`` and ``lse`` (as :func:`attention` returned them for the same problem)
    and ``dout``. With GQA, dk and dv of a kv head sum over the query heads that
    read it. A query row that saw no key contributes nothing (dq = 0). The flash
    algorithm is deterministic (no atomics). ``dq=``, ``dk=``, ``dv=``: outputs
    to write (each untouched or whole on failure). ``sinks``: the forward's
    attention sinks (its lse includes them); their gradient is the C
    library's (fcl_attention_desc.dsinks), not returned here."""
    axes = _axes(layout)
    call = _Call(q, ctx, dtype)
    b, hq, hkv, nq, nk, d = _qkv_shapes(q, k, v, axes, 4)
    for name, x in (("o", o), ("dout", dout)):
        if _dims(x, name, axes, 4) != (b, nq, hq, d):
            raise InvalidShapeError(f"{name} has shape {tuple(x.shape)}, q {tuple(q.shape)}")
    if tuple(lse.shape) != (b, hq, nq) or np.dtype(lse.dtype) != np.float32:
        raise InvalidShapeError(f"lse must be float32 [batch, heads_q, seqlen_q] = "
                                f"{(b, hq, nq)}, not {lse.dtype} {tuple(lse.shape)}")
    desc = make_desc(b, hq, hkv, nq, nk, d, call.code, causal=causal,
                     softmax_scale=softmax_scale, window_size=window_size, softcap=softcap)
    if not call.device:
        _check_sizes(call.ctx, desc)
    t = {n: call.input(x, n, axes) for n, x in (("q", q), ("k", k), ("v", v), ("o", o),
                                                 ("dout", dout))}
    tlse = _lse_input(call, lse)
    _alibi(call, desc, alibi_slopes, b, hq)
    _sinks(call, desc, sinks, hq)
    tdq, gq = call.output(_shape_of(axes, b, nq, hq, d), axes, "dq", dq)
    tdk, gk = call.output(_shape_of(axes, b, nk, hkv, d), axes, "dk", dk)
    tdv, gv = call.output(_shape_of(axes, b, nk, hkv, d), axes, "dv", dv)
    desc.q, desc.k, desc.v, desc.o = t["q"].layout, t["k"].layout, t["v"].layout, t["o"].layout
    desc.dout, desc.dq, desc.dk, desc.dv = t["dout"].layout, tdq.layout, tdk.layout, tdv.layout
    ri = call.run(lib.fcl_attention_backward, ctypes.byref(desc), _algo(algo), t["q"].mem,
                  t["k"].mem, t["v"].mem, t["o"].mem, tlse, t["dout"].mem, tdq.mem, tdk.mem,
                  tdv.mem, info=info)
    res = (call.result(gq), call.result(gk), call.result(gv))
    return res + (ri,) if ri is not None else res


def _lse_input(call: _Call, lse: Any) -> int:
    if call.device:
        if not isinstance(lse, cla.Array) or not lse.flags.c_contiguous or lse.offset:
            raise InvalidArgumentError("lse must be a contiguous pyopencl array at offset 0")
        return lse.base_data.int_ptr
    return call.uploads.small(np.asarray(lse, np.float32)).int_ptr


def attention_varlen(q: Array, k: Array, v: Array, cu_seqlens_q: Any, cu_seqlens_k: Any,
                     max_seqlen_q: int, max_seqlen_k: int, *, causal: bool = False,
                     softmax_scale: Optional[float] = None,
                     window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                     alibi_slopes: Optional[Array] = None, return_lse: bool = False,
                     algo: str = "flash", ctx: Optional[Context] = None,
                     dtype: Optional[str] = None, out: Optional[Array] = None,
                     info: bool = False, sinks: Optional[Array] = None,
                     batch_invariant: bool = False) -> Any:
    """A ragged batch (flash-attn's flash_attn_varlen_func): q ``[total_q,
    heads_q, head_dim]``, k and v ``[total_k, heads_kv, head_dim]``; sequence
    b is tokens ``cu_seqlens_q[b]:cu_seqlens_q[b+1]`` of q (of k and v for
    cu_seqlens_k), int32 prefix sums starting at 0 (empty sequences allowed;
    read on the host: a pyopencl array is read back). Masks align to each
    sequence's own bottom-right corner. LSE: float32 ``[heads_q, total_q]``.
    ``sinks`` and ``batch_invariant`` as in :func:`attention`."""
    call = _Call(q, ctx, dtype)
    tq_, hq, d = _dims(q, "q", RAGGED_AXES, 3)[1:]
    _, tk_, hkv, dk = _dims(k, "k", RAGGED_AXES, 3)
    if _dims(v, "v", RAGGED_AXES, 3)[1:] != (tk_, hkv, dk) or dk != d:
        raise InvalidShapeError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: "
                                f"k and v must match, and head_dim be q's")
    cq, ck = as_int32_host(cu_seqlens_q, "cu_seqlens_q"), as_int32_host(cu_seqlens_k,
                                                                        "cu_seqlens_k")
    if cq.ndim != 1 or cq.shape != ck.shape or len(cq) < 2:
        raise InvalidShapeError(f"cu_seqlens_q and cu_seqlens_k must be batch + 1 prefix sums "
                                f"of one length, not {cq.shape} and {ck.shape}")
    if cq[-1] != tq_ or ck[-1] != tk_:
        raise InvalidShapeError(f"the last prefix sums ({cq[-1]}, {ck[-1]}) must be the token "
                                f"counts of q ({tq_}) and k ({tk_})")
    desc = make_desc(len(cq) - 1, hq, hkv, int(max_seqlen_q), int(max_seqlen_k), d, call.code,
                     causal=causal, softmax_scale=softmax_scale, window_size=window_size,
                     softcap=softcap, batch_invariant=batch_invariant)
    desc.cu_seqlens_q = cq.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
    desc.cu_seqlens_k = ck.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
    if not call.device:
        _check_sizes(call.ctx, desc)
    tq, tk, tv = (call.input(x, n, RAGGED_AXES) for n, x in (("q", q), ("k", k), ("v", v)))
    _alibi(call, desc, alibi_slopes, len(cq) - 1, hq)
    _sinks(call, desc, sinks, hq)
    to, o = call.output((tq_, hq, d), RAGGED_AXES, "out", out)
    tl, lse = (call.output((hq, tq_), (None, 1, 0, None), "lse", None, lse=True)
               if return_lse else (None, None))
    desc.q, desc.k, desc.v, desc.o = tq.layout, tk.layout, tv.layout, to.layout
    ri = call.run(lib.fcl_attention_forward, ctypes.byref(desc), _algo(algo), tq.mem, tk.mem,
                  tv.mem, to.mem, tl.mem if tl else None, info=info)
    return _returns(call, o, lse, ri)


def attention_with_kvcache(q: Array, k_cache: Array, v_cache: Array, k: Optional[Array] = None,
                           v: Optional[Array] = None, cache_seqlens: Any = None,
                           block_table: Optional[Array] = None, *, causal: bool = False,
                           softmax_scale: Optional[float] = None,
                           window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                           alibi_slopes: Optional[Array] = None, return_lse: bool = False,
                           algo: str = "flash", ctx: Optional[Context] = None,
                           dtype: Optional[str] = None, out: Optional[Array] = None,
                           info: bool = False, sinks: Optional[Array] = None,
                           batch_invariant: bool = False) -> Any:
    """Attention over a KV cache (flash-attn's flash_attn_with_kvcache).

    q ``[batch, seqlen_q, heads_q, head_dim]``; k_cache, v_cache ``[batch,
    capacity, heads_kv, head_dim]``, or with ``block_table`` (int32 ``[batch,
    pages_per_seq]``) pools ``[num_pages, page_size, heads_kv, head_dim]``
    (page_size a multiple of 16), sequence b's key t being row ``t %
    page_size`` of page ``block_table[b, t // page_size]``. ``cache_seqlens``:
    int or int32 ``[batch]``, each sequence's current length (default: the
    capacity). When ``k`` and ``v`` (``[batch, new, heads_kv, head_dim]``) are
    given they are written into the cache at rows ``cache_seqlens[b]`` on, in
    place (a numpy cache is updated in place too), and the queries attend to
    ``cache_seqlens[b] + new`` keys; as in flash-attn, ``cache_seqlens`` itself
    is not raised: the caller does. Queries are the last positions of each
    sequence: the causal mask aligns to its length. ``sinks`` and
    ``batch_invariant`` as in :func:`attention` (paged or not, a sequence's
    bits are the same in the batch-invariant mode)."""
    call = _Call(q, ctx, dtype)
    axes = AXES["bshd"]
    b, nq, hq, d = _dims(q, "q", axes, 4)
    pb, ps, hkv, dk = _dims(k_cache, "k_cache", axes, 4)
    if _dims(v_cache, "v_cache", axes, 4) != (pb, ps, hkv, dk) or dk != d:
        raise InvalidShapeError(f"k_cache {tuple(k_cache.shape)} and v_cache "
                                f"{tuple(v_cache.shape)} must match, with q's head_dim")
    if hq % hkv:
        raise InvalidShapeError(f"heads_q ({hq}) must be a multiple of heads_kv ({hkv})")
    if (k is None) != (v is None):
        raise InvalidArgumentError("k and v are appended together: give both or neither")
    new = 0
    if k is not None:
        bn, new, hn, dn = _dims(k, "k", axes, 4)
        if _dims(v, "v", axes, 4) != (bn, new, hn, dn) or (bn, hn, dn) != (b, hkv, d):
            raise InvalidShapeError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must be "
                                    f"[batch, new, heads_kv, head_dim] = [{b}, new, {hkv}, {d}]")
        if isinstance(k_cache, np.ndarray):  # appended in place: no copy may stand in
            for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
                if not cache.flags.writeable or element_strides(cache, axes) is None:
                    raise InvalidArgumentError(f"{name} must be a writeable array whose "
                                               f"strides the library reads in place, to be "
                                               f"appended to")
    paged = block_table is not None
    if paged:
        bt_shape = tuple(block_table.shape)
        if len(bt_shape) != 2 or bt_shape[0] != b:
            raise InvalidShapeError(f"block_table must be [batch, pages_per_seq] with batch {b}, "
                                    f"not {bt_shape}")
        capacity = bt_shape[1] * ps
    else:
        if pb != b:
            raise InvalidShapeError(f"k_cache has batch {pb}, q {b}")
        capacity = ps
    if cache_seqlens is None:
        lens = np.full(b, capacity - new, np.int32)
    elif np.isscalar(cache_seqlens):
        lens = np.full(b, int(cache_seqlens), np.int32)
    else:
        lens = as_int32_host(cache_seqlens, "cache_seqlens")
        if lens.shape != (b,):
            raise InvalidShapeError(f"cache_seqlens must have batch = {b} entries, not "
                                    f"{lens.shape}")
    desc = make_desc(b, hq, hkv, nq, capacity, d, call.code, causal=causal,
                     softmax_scale=softmax_scale, window_size=window_size, softcap=softcap,
                     batch_invariant=batch_invariant)
    desc.seqlens_k = lens.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
    if paged:
        desc.page_size, desc.pages_per_seq, desc.num_pages = ps, bt_shape[1], pb
    if not call.device:
        _check_sizes(call.ctx, desc)
    tq = call.input(q, "q", axes)
    tkc, tvc = call.input(k_cache, "k_cache", axes), call.input(v_cache, "v_cache", axes)
    if paged:
        desc.block_table = call.aux_int32(block_table, "block_table")
    _alibi(call, desc, alibi_slopes, b, hq)
    _sinks(call, desc, sinks, hq)
    to, o = call.output((b, nq, hq, d), axes, "out", out)
    tl, lse = (call.output((b, hq, nq), (0, 2, 1, None), "lse", None, lse=True)
               if return_lse else (None, None))
    desc.q, desc.k, desc.v, desc.o = tq.layout, tkc.layout, tvc.layout, to.layout
    if k is None:
        ri = call.run(lib.fcl_attention_forward, ctypes.byref(desc), _algo(algo), tq.mem,
                      tkc.mem, tvc.mem, to.mem, tl.mem if tl else None, info=info)
    else:
        tk, tv = call.input(k, "k", axes), call.input(v, "v", axes)
        if not call.device:  # the numpy caches come back with the appended rows
            for cache, t in ((k_cache, tkc), (v_cache, tvc)):
                _read_back_cache(call, cache, t)
        ri = call.run(lib.fcl_attention_forward_kvcache, ctypes.byref(desc), _algo(algo),
                      tq.mem, new, ctypes.byref(tk.layout), ctypes.byref(tv.layout), tk.mem,
                      tv.mem, tkc.mem, tvc.mem, to.mem, tl.mem if tl else None, info=info)
    return _returns(call, o, lse, ri)


def _read_back_cache(call: _Call, cache: np.ndarray, t: Tensor) -> None:
    """After the call, the upload that holds a numpy cache goes back to the host
    memory it was copied from, appended rows included."""
    buf, host = call.uploads.writable(t.mem)
    call.results.append((buf, host, None))
