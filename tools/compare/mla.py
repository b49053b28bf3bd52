#!/usr/bin/env python3
"""Times PyTorch's scaled_dot_product_attention on DeepSeek's latent
attention decode: 128 query heads (--heads) of one new row against one KV
head's cache of rows of 576 (--head-dim), V the first 512 columns of K's
rows (--head-dim-v), for each batch size and cache length, and prints one
line per shape: the backend that ran (EFFICIENT where it takes the shape,
else MATH), ms and TFLOP/s (4 B H N (D + DV) / 2 FLOPs: a multiply-add
is two). Timed as flashcl-bench --back-to-back N times its own: N calls
enqueued between two events, the median per call over 20 samples.

  python3 mla.py --dtype f16 --batch 1,8,64 --seqlen-k 1024,8192,32768 [--back-to-back 20]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

from decode import back_to_back_ms
from sdpa import BACKENDS, DTYPES


def ints(text):
    return [int(x) for x in text.split(",")]


def run(dtype, b, n, heads, d, dv, calls):
    dt = DTYPES[dtype]
    q = torch.randn(b, heads, 1, d, device="cuda", dtype=dt)
    kv = torch.randn(b, 1, n, d, device="cuda", dtype=dt)
    k, v = kv.expand(b, heads, n, d), kv[..., :dv].expand(b, heads, n, dv)
    for name in ("efficient", "math"):
        try:
            with sdpa_kernel(BACKENDS[name]), torch.no_grad():
                call = lambda: F.scaled_dot_product_attention(q, k, v)
                ms = back_to_back_ms(call, calls)
            return name, ms
        except RuntimeError as e:  # the backend refuses the shape, or memory
            last = str(e).splitlines()[0]
            torch.cuda.empty_cache()
    return f"none ({last[:60]})", float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    ap.add_argument("--batch", type=ints, default=[1, 8, 64])
    ap.add_argument("--seqlen-k", type=ints, default=[1024, 8192, 32768])
    ap.add_argument("--heads", type=int, default=128)
    ap.add_argument("--head-dim", type=int, default=576)
    ap.add_argument("--head-dim-v", type=int, default=512)
    ap.add_argument("--back-to-back", type=int, default=20)
    a = ap.parse_args()
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}")
    print("dtype B Nk backend ms TFLOP/s")
    for b in a.batch:
        for n in a.seqlen_k:
            name, ms = run(a.dtype, b, n, a.heads, a.head_dim, a.head_dim_v, a.back_to_back)
            flops = 2.0 * b * a.heads * n * (a.head_dim + a.head_dim_v)
            print(f"{a.dtype} {b} {n} {name} {ms:.4f} {flops / ms / 1e9:.2f}", flush=True)


if __name__ == "__main__":
    main()
