#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_desc_plan (fuzz/corpus/) in the input
format fuzz_desc_plan.c describes: typical problems on typical devices, and
one seed per edge (zero sizes, overflow, head_dim 257, bad scale, dtype,
causal, pass, tiny local memory and work-groups, hints)."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def size(v):
    """A size as tag + payload (the smallest exact encoding)."""
    if v < 256:
        return bytes([0, v])
    if v < 1 << 16:
        return bytes([1]) + struct.pack('<H', v)
    if v < 1 << 32:
        return bytes([2]) + struct.pack('<I', v)
    return bytes([3]) + struct.pack('<Q', v)


def special(tag, payload):
    return bytes([tag, payload & 0xff])


def seed(b=1, hq=8, hkv=8, nq=512, nk=512, d=64, dtype=0, causal=0, scale=b'\0',
         pass_=0, local=48 * 1024, wg=1024, cus=132, glob=141 << 30,
         maxalloc=35 << 30, flags=0b10001, hint=None, scratch=0, why_len=200,
         sizes=None, kernel=0, sm=0, invariant=None, features=None):
    out = b''.join(sizes if sizes else [size(x) for x in (b, hq, hkv, nq, nk, d)])
    out += struct.pack('<i', dtype) + struct.pack('<b', causal) + scale
    out += struct.pack('<i', pass_)
    out += b''.join(size(x) for x in (local, wg, cus, glob, maxalloc))
    out += bytes([flags])
    if hint:
        out += bytes([1]) + struct.pack('<HHHH', *hint)
    else:
        out += bytes([0]) + b'\0' * 8
    out += size(scratch) + struct.pack('<H', why_len)
    if features is not None and invariant is None:
        invariant = 0
    if kernel or sm or invariant is not None:
        out += bytes([kernel, sm])
    if invariant is not None:
        # no window, no extras, this header; no split, packing or merge
        # hint; a merge of 0 parts, stride 0; not paged; then the flag
        out += struct.pack('<bb', -1, -1) + bytes([0, 0]) + struct.pack('<H', 0)
        out += bytes([0, 0]) + size(0) + bytes([0, 0, invariant])
    if features is not None:
        out += bytes([features])
    return out


seeds = {
    'h200_d64': seed(),
    'h200_d128_causal': seed(d=128, causal=1, nq=4096, nk=4096, b=4, hq=16, hkv=16),
    'h200_d256_gqa': seed(d=256, hq=32, hkv=8, nq=1000, nk=3000),
    'pocl_cpu': seed(local=512 * 1024, wg=4096, cus=2, glob=8 << 30, maxalloc=2 << 30,
                     flags=0b01111, d=96, nq=77, nk=150),
    'tiny_local_d256': seed(local=11 * 1024, wg=256, d=256, flags=0b00001),
    'wg_limit_1': seed(wg=1, d=200, local=64 * 1024, flags=0),
    'seqlen_1': seed(nq=1, nk=1, d=16),
    'f16_bf16': seed(dtype=1, d=40) ,
    'bf16': seed(dtype=2, d=13, causal=1, nq=7, nk=3),
    'zero_batch': seed(b=0),
    'zero_heads_kv': seed(hkv=0),
    'not_a_multiple': seed(hq=6, hkv=4),
    'head_dim_257': seed(sizes=[size(1), size(8), size(8), size(64), size(64),
                                special(7, 1)]),
    'overflow': seed(sizes=[special(5, 0)] * 4 + [special(5, 0), size(256)]),
    'size_max': seed(sizes=[special(6, 0)] + [size(1)] * 4 + [size(8)]),
    'scale_nan': seed(scale=b'\x02'),
    'scale_zero': seed(scale=b'\x05'),
    'scale_denormal': seed(scale=b'\x07'),
    'bad_dtype': seed(dtype=7),
    'bad_causal': seed(causal=-1),
    'backward': seed(pass_=1),
    'bad_pass': seed(pass_=-5),
    'no_local_memory': seed(local=0),
    'no_work_group': seed(wg=0),
    'hint_ok': seed(hint=(16, 64, 2, 2)),
    'hint_bad_threads': seed(hint=(0, 0, 3, 0)),
    'hint_wg_not_pow2': seed(hint=(0, 96, 0, 0)),
    'hint_block_k_3': seed(hint=(3, 0, 0, 0)),
    'hint_too_big_wg': seed(hint=(0, 1024, 4, 4), wg=256),
    'naive_chunks': seed(nq=37, nk=41, d=16, b=2, hq=6, hkv=3, scratch=2 * 37 * 41 * 4 + 16),
    'naive_slice_too_big': seed(nq=300, nk=300, scratch=1000),
    'why_len_0': seed(b=0, why_len=0),
    'why_len_1': seed(b=0, why_len=1),
    'mma_h200_f16': seed(dtype=1, d=128, nq=4096, nk=4096, b=4, hq=16, hkv=16, sm=90),
    'mma_h200_f32_d96': seed(d=96, causal=1, sm=90),
    'mma_forced_pocl': seed(local=512 * 1024, wg=4096, cus=2, flags=0b01111, d=40,
                            nq=77, nk=150, hint=(0, 0, 0, 0), kernel=2),
    'mma_hint_wg_96': seed(d=64, hint=(32, 96, 0, 0), kernel=2, sm=86),
    'mma_bad_kernel': seed(hint=(0, 0, 0, 0), kernel=3),
    'batch_invariant_h200_decode': seed(dtype=1, b=8, hq=32, hkv=8, nq=1, nk=32768, d=128,
                                        sm=90, invariant=1),
    'batch_invariant_pocl': seed(local=512 * 1024, wg=4096, cus=2, flags=0b01111, d=64,
                                 nq=1, nk=5000, invariant=1),
    'batch_invariant_long_keys': seed(b=1, hq=8, hkv=1, nq=1, nk=200000, d=64, invariant=1),
    'batch_invariant_prefill': seed(d=128, causal=1, nq=4096, nk=4096, sm=90, invariant=1),
    'batch_invariant_bad': seed(invariant=2),
    # sinks and dsinks; quantized caches (kv_dtype in bits 2-4, scales in 5-7)
    'sinks_backward': seed(d=128, causal=1, pass_=1, sm=90, features=0b11),
    'dsinks_alone': seed(pass_=1, features=0b10),
    'kv_int8_decode_h200': seed(dtype=1, b=8, hq=32, hkv=8, nq=1, nk=8192, d=128, sm=90,
                                features=1 << 2),
    'kv_int4_pocl': seed(local=512 * 1024, wg=4096, cus=2, flags=0b01111, nq=4, nk=5000,
                         features=2 << 2),
    'kv_fp8_scales': seed(dtype=1, nq=1, nk=4096, d=128, sm=90, features=(3 << 2) | (2 << 5)),
    'kv_fp8_nan_scale': seed(nq=1, nk=4096, features=(4 << 2) | (4 << 5)),
    'kv_int8_d40': seed(d=40, nq=1, nk=512, features=1 << 2),
    'kv_not_a_form': seed(features=6 << 2),
}

os.makedirs(os.path.join(HERE, 'corpus'), exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(HERE, 'corpus', 'seed_' + name), 'wb') as f:
        f.write(data)
print(f'{len(seeds)} seeds in {os.path.join(HERE, "corpus")}')
