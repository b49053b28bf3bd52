"""What a call would do, without running it: the plan and the I/O model."""
from __future__ import annotations

import ctypes
from typing import Any, Dict, Optional, Tuple

from . import _lib
from ._arrays import DTYPE_CODES
from ._attention import ALGOS, make_desc, plan_dict
from ._context import Context, default_context
from ._errors import InvalidArgumentError
from ._lib import lib


def _problem(batch: int, heads: int, heads_kv: Optional[int], seqlen: int,
             seqlen_k: Optional[int], head_dim: int, dtype: str, causal: bool,
             softmax_scale: Optional[float], window_size: Tuple[int, int], softcap: float
             ) -> _lib.AttentionDesc:
    if dtype not in DTYPE_CODES:
        raise InvalidArgumentError(f"dtype must be one of f32, f16, bf16, not {dtype!r}")
    return make_desc(batch, heads, heads_kv or heads, seqlen, seqlen_k or seqlen, head_dim,
                     DTYPE_CODES[dtype], causal=causal, softmax_scale=softmax_scale,
                     window_size=window_size, softcap=softcap)


def plan(*, batch: int = 1, heads: int = 8, heads_kv: Optional[int] = None, seqlen: int = 1024,
         seqlen_k: Optional[int] = None, head_dim: int = 64, dtype: str = "f32",
         causal: bool = False, softmax_scale: Optional[float] = None,
         window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
         backward: bool = False, ctx: Optional[Context] = None) -> Dict[str, Any]:
    """The flash tiling a call of this shape would run on ctx's device now
    (its tuned plan where it has one, else the planner's rules): block_q,
    block_k, wg_size, kernel ("simt", "mma", "decode", "cpu", ...), splits,
    packed_heads, merge, tuned."""
    ctx = ctx or default_context()
    desc = _problem(batch, heads, heads_kv, seqlen, seqlen_k, head_dim, dtype, causal,
                    softmax_scale, window_size, softcap)
    p = _lib.Plan()
    why = ctypes.create_string_buffer(512)
    _lib.check(lib.fcl_context_plan(ctx._ptr, ctypes.byref(desc), int(backward), ctypes.byref(p),
                                    why, 512), why=why.value)
    return plan_dict(p)


def io_model(*, batch: int = 1, heads: int = 8, heads_kv: Optional[int] = None,
             seqlen: int = 1024, seqlen_k: Optional[int] = None, head_dim: int = 64,
             dtype: str = "f32", causal: bool = False, softmax_scale: Optional[float] = None,
             window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
             backward: bool = False, algo: str = "flash", with_lse: bool = True,
             ctx: Optional[Context] = None) -> Dict[str, Any]:
    """Global-memory bytes an algorithm moves for this problem on ctx's device
    (the model instrumented kernels match byte for byte), with the FLOPs by
    flash-attn's convention: bytes_loaded, bytes_stored, bytes (their sum),
    bytes_asymptotic (the FlashAttention paper's figure), flops, plan, chunks."""
    if algo not in ALGOS:
        raise InvalidArgumentError(f"algo must be 'flash' or 'naive', not {algo!r}")
    ctx = ctx or default_context()
    desc = _problem(batch, heads, heads_kv, seqlen, seqlen_k, head_dim, dtype, causal,
                    softmax_scale, window_size, softcap)
    est = _lib.IoEstimate()
    _lib.check(lib.fcl_io_model(ctypes.byref(ctx._limits), ctypes.byref(desc), ALGOS[algo],
                                int(backward), int(with_lse), ctypes.byref(est)),
               why=b"the problem or the device cannot run it (see flashcl.plan for why)")
    return {"bytes_loaded": est.bytes_loaded, "bytes_stored": est.bytes_stored,
            "bytes": est.bytes_loaded + est.bytes_stored,
            "bytes_asymptotic": est.bytes_asymptotic,
            "flops": lib.fcl_attention_flops(ctypes.byref(desc), int(backward)),
            "plan": plan_dict(est.plan), "chunks": est.chunks}
