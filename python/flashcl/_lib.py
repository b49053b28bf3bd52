"""The C library, loaded with ctypes: its structs, functions and statuses.

The structs mirror include/flashcl.h field for field; the descriptors'
``struct_size`` (written by the library's own ``*_desc_init``) is checked
against ctypes' size when the library loads, so a header change that the
mirror missed fails at import instead of corrupting a call.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_float, c_int, c_size_t,
                    c_uint, c_uint64, c_void_p)
from typing import NoReturn, Optional

from ._errors import error_for, use_status_names

_int32_p = POINTER(ctypes.c_int32)


class DeviceLimits(Structure):
    _fields_ = [("local_mem_bytes", c_uint64), ("max_work_group_size", c_size_t),
                ("compute_units", c_uint), ("global_mem_bytes", c_uint64),
                ("max_alloc_bytes", c_uint64), ("is_gpu", c_int), ("has_fp16", c_int),
                ("has_fp64", c_int), ("has_int64_atomics", c_int), ("nvidia_ptx", c_int),
                ("nvidia_sm", c_uint), ("vendor", c_uint), ("sub_group_size", c_uint),
                ("shuffle", c_uint)]


class DeviceInfo(Structure):
    _fields_ = [("platform_index", c_uint), ("device_index", c_uint), ("name", c_char * 128),
                ("vendor", c_char * 128), ("platform", c_char * 128), ("version", c_char * 128),
                ("driver", c_char * 64), ("max_clock_mhz", c_uint), ("limits", DeviceLimits)]


class TensorLayout(Structure):
    _fields_ = [("offset", c_size_t), ("batch_stride", c_size_t), ("seq_stride", c_size_t),
                ("head_stride", c_size_t)]


class AttentionDesc(Structure):
    _fields_ = [("struct_size", c_size_t), ("batch", c_size_t), ("heads_q", c_size_t),
                ("heads_kv", c_size_t), ("seqlen_q", c_size_t), ("seqlen_k", c_size_t),
                ("head_dim", c_size_t), ("dtype", c_int), ("causal", c_int), ("scale", c_float),
                ("window_left", c_int), ("window_right", c_int), ("softcap", c_float),
                ("alibi_slopes", c_void_p), ("alibi_per_batch", c_int),
                ("cu_seqlens_q", _int32_p), ("cu_seqlens_k", _int32_p),
                ("q", TensorLayout), ("k", TensorLayout), ("v", TensorLayout),
                ("o", TensorLayout), ("dout", TensorLayout), ("dq", TensorLayout),
                ("dk", TensorLayout), ("dv", TensorLayout), ("seqlens_k", _int32_p),
                ("block_table", c_void_p), ("page_size", c_size_t), ("pages_per_seq", c_size_t),
                ("num_pages", c_size_t),
                # attention sinks
                ("sinks", c_void_p), ("dsinks", c_void_p),
                # quantized KV caches (fcl_kv_dtype; 0: K and V in dtype)
                ("kv_dtype", c_int), ("k_scale", c_float), ("v_scale", c_float),
                # batch invariance
                ("batch_invariant", c_int),
                # a value head size of its own (0: head_dim)
                ("head_dim_v", c_size_t)]


class BufferSizes(Structure):
    _fields_ = [(n, c_size_t) for n in
                ("q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv", "alibi_slopes")]


class Plan(Structure):
    _fields_ = [("block_q", c_uint), ("block_k", c_uint), ("wg_size", c_uint),
                ("threads_per_row", c_uint), ("rows_per_thread", c_uint),
                ("head_dim_padded", c_uint), ("local_bytes", c_size_t),
                ("tile_elem_size", c_uint), ("kernel", c_uint), ("splits", c_uint),
                ("packed_heads", c_uint), ("tuned", c_uint), ("merge", c_uint),
                ("split_keys", c_uint),
                # a value head size of its own
                ("head_dim_v_padded", c_uint),
                # the decode kernel's products
                ("decode_untransposed", c_uint),
                # the MMA forward's pipeline
                ("v_stages", c_uint)]


class RunInfo(Structure):
    _fields_ = [("ms", c_double), ("bytes_model", c_uint64), ("bytes_counted", c_uint64),
                ("flops", c_double), ("plan", Plan), ("chunks", c_uint)]


class MergeDesc(Structure):
    _fields_ = [("struct_size", c_size_t), ("parts", c_size_t), ("batch", c_size_t),
                ("seqlen", c_size_t), ("heads", c_size_t), ("head_dim", c_size_t),
                ("dtype", c_int), ("o_parts", TensorLayout), ("o_part_stride", c_size_t),
                ("lse_part_stride", c_size_t), ("o", TensorLayout),
                # attention sinks
                ("sinks", c_void_p)]


class MergeSizes(Structure):
    _fields_ = [("o_parts", c_size_t), ("lse_parts", c_size_t), ("o", c_size_t),
                ("lse", c_size_t)]


class IoEstimate(Structure):
    _fields_ = [("bytes_loaded", c_uint64), ("bytes_stored", c_uint64),
                ("bytes_asymptotic", c_double), ("plan", Plan), ("chunks", c_uint)]


class Peaks(Structure):
    _fields_ = [("copy_gbps", c_double), ("fma_tflops", c_double)]


class TuningInfo(Structure):
    _fields_ = [("enabled", c_int), ("plans", c_uint), ("source", c_char * 1024),
                ("file_name", c_char * 320)]


# Statuses (fcl_status)
SUCCESS = 0
INVALID_ARGUMENT = 1
INVALID_SHAPE = 2
BUFFER_TOO_SMALL = 3
UNSUPPORTED = 4
OUT_OF_MEMORY = 5
DEVICE_NOT_FOUND = 6
BUILD_FAILED = 7
OPENCL = 8
CLBLAST = 9

MAX_HEAD_DIM = 576  # the naive algorithm and the decode kernels
MAX_TILED_HEAD_DIM = 256  # the other flash kernels
PAGE_SIZE_MULTIPLE = 16

_P = c_void_p
_SIGNATURES = {
    "fcl_version_string": (c_char_p, []),
    "fcl_status_str": (c_char_p, [c_int]),
    "fcl_devices": (c_int, [POINTER(DeviceInfo), c_size_t, POINTER(c_size_t)]),
    "fcl_context_create": (c_int, [c_char_p, POINTER(_P)]),
    "fcl_context_wrap": (c_int, [_P, _P, _P, POINTER(_P)]),
    "fcl_context_release": (None, [_P]),
    "fcl_context_last_error": (c_char_p, [_P]),
    "fcl_context_device": (c_int, [_P, POINTER(DeviceInfo)]),
    "fcl_context_cl_context": (_P, [_P]),
    "fcl_context_cl_device": (_P, [_P]),
    "fcl_context_cl_queue": (_P, [_P]),
    "fcl_context_use_tuned_plans": (c_int, [_P, c_int]),
    "fcl_context_set_scratch_limit": (c_int, [_P, c_uint64]),
    "fcl_context_tuning": (c_int, [_P, POINTER(TuningInfo)]),
    "fcl_attention_desc_init": (None, [POINTER(AttentionDesc)] + [c_size_t] * 6),
    "fcl_attention_buffer_sizes": (c_int, [POINTER(AttentionDesc), POINTER(BufferSizes),
                                           c_char_p, c_size_t]),
    "fcl_attention_forward": (c_int, [_P, POINTER(AttentionDesc), c_int] + [_P] * 5
                              + [POINTER(RunInfo)]),
    "fcl_attention_backward": (c_int, [_P, POINTER(AttentionDesc), c_int] + [_P] * 9
                               + [POINTER(RunInfo)]),
    "fcl_attention_forward_kvcache": (c_int, [_P, POINTER(AttentionDesc), c_int, _P, c_size_t,
                                              POINTER(TensorLayout), POINTER(TensorLayout)]
                                      + [_P] * 6 + [POINTER(RunInfo)]),
    "fcl_merge_desc_init": (None, [POINTER(MergeDesc)] + [c_size_t] * 5),
    "fcl_merge_buffer_sizes": (c_int, [POINTER(MergeDesc), POINTER(MergeSizes), c_char_p,
                                       c_size_t]),
    "fcl_merge_states": (c_int, [_P, POINTER(MergeDesc)] + [_P] * 4 + [POINTER(RunInfo)]),
    "fcl_attention_flops": (c_double, [POINTER(AttentionDesc), c_int]),
    "fcl_io_model": (c_int, [POINTER(DeviceLimits), POINTER(AttentionDesc), c_int, c_int, c_int,
                             POINTER(IoEstimate)]),
    "fcl_measure_peaks": (c_int, [_P, POINTER(Peaks)]),
    "fcl_plan_flash": (c_int, [POINTER(DeviceLimits), POINTER(AttentionDesc), c_int,
                               POINTER(Plan), c_char_p, c_size_t]),
    "fcl_context_plan": (c_int, [_P, POINTER(AttentionDesc), c_int, POINTER(Plan), c_char_p,
                                 c_size_t]),
    "fcl_flash_kernel_name": (c_char_p, [c_uint]),
    "fcl_split_merge_name": (c_char_p, [c_uint]),
}


def _load() -> ctypes.CDLL:
    # FLASHCL_LIBRARY: another build of the library (a build tree's libflashcl.so)
    path = os.environ.get("FLASHCL_LIBRARY") or os.path.join(os.path.dirname(__file__),
                                                             "libflashcl.so")
    lib = ctypes.CDLL(path)
    for name, (res, args) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    for cls, init, nargs in ((AttentionDesc, lib.fcl_attention_desc_init, 6),
                             (MergeDesc, lib.fcl_merge_desc_init, 5)):
        d = cls()
        init(ctypes.byref(d), *([1] * nargs))
        if d.struct_size != ctypes.sizeof(cls):
            raise ImportError(f"flashcl: {path} has a {cls.__name__} of {d.struct_size} bytes, "
                              f"the Python layer {ctypes.sizeof(cls)}: rebuild the package")
    return lib


lib = _load()


def status_name(status: int) -> str:
    return lib.fcl_status_str(status).decode()


use_status_names(status_name)


def check(status: int, ctx_ptr: Optional[int] = None, why: Optional[bytes] = None) -> None:
    """Raises the Error subclass of a failed status with the library's message."""
    if status != SUCCESS:
        raise_status(status, _message(ctx_ptr, why))


def _message(ctx_ptr: Optional[int], why: Optional[bytes]) -> str:
    if why is not None:
        return why.decode(errors="replace")
    if ctx_ptr is not None:
        return (lib.fcl_context_last_error(ctx_ptr) or b"").decode(errors="replace")
    return ""


def raise_status(status: int, message: str) -> NoReturn:
    raise error_for(status, message)
