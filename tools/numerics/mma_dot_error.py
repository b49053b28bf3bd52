#!/usr/bin/env python3
"""Error of an f32 dot product taken as cl/mma.cl takes it in f32 (3xTF32:
each operand split into two tf32 parts to nearest, three products per
k-step of 8, partial sums of MMA_CHAIN k-steps joined in f32), against an
f32 loop of multiply-adds, both against the exact sum, on random normal
vectors. One model of the tensor cores' sums per row of output:

  split     sums exact, in float64: what the split alone costs;
  exact     an instruction's products and c summed exactly, then truncated
            to f32 (PoCL's default emulation);
  aligned   products and c aligned to the largest and each truncated below
            its 24 + EXTRA leading bits, then summed (MMA_EMULATE_ALIGN).

It answers one question: how much of the f32 MMA backward's error against
the naive algorithm comes from the dot products themselves.

  tools/numerics/mma_dot_error.py [--dims 16,64,128] [--trials 2000]
"""
import argparse
import math

import numpy as np


def tf32_nearest(x):
    """cvt.rna.tf32.f32: the low 13 mantissa bits rounded off, ties away."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x1000) & 0xFFFFE000) & 0xFFFFFFFF
    return bits.astype(np.uint32).view(np.float32)


def split(x):
    """x = big + small, both tf32 (mma.cl's split_tf32), as float64."""
    big = tf32_nearest(x)
    small = tf32_nearest((x - big).astype(np.float32))
    return big.astype(np.float64), small.astype(np.float64)


def to_f32_toward_zero(v):
    f = np.float32(v)
    if abs(float(f)) > abs(v):
        f = np.nextafter(f, np.float32(0))
    return float(f)


def instruction_unrounded(c, products, _extra):
    return c + math.fsum(products)


def instruction_exact(c, products, _extra):
    return to_f32_toward_zero(c + math.fsum(products))


def instruction_aligned(c, products, extra):
    largest = max([abs(c)] + [abs(p) for p in products])
    if largest == 0.0:
        return c
    quantum = math.ldexp(1.0, math.frexp(largest)[1] - 24 - extra)
    kept = [math.trunc(v / quantum) * quantum for v in [c] + list(products)]
    return to_f32_toward_zero(math.fsum(kept))


def dot_3xtf32(a, b, instruction, extra, chain):
    a_big, a_small = split(a)
    b_big, b_small = split(b)
    total = np.float32(0.0)
    for k0 in range(0, len(a), 8 * chain):
        part = 0.0
        for k in range(k0, min(len(a), k0 + 8 * chain), 8):
            s = slice(k, k + 8)
            # small terms first, as mma_3xtf32 orders them
            part = instruction(part, list(a_small[s] * b_big[s]), extra)
            part = instruction(part, list(a_big[s] * b_small[s]), extra)
            part = instruction(part, list(a_big[s] * b_big[s]), extra)
        total = np.float32(total + np.float32(part))
    return float(total)


def dot_f32(a, b):
    acc = np.float32(0.0)
    for x, y in zip(a, b):
        acc = np.float32(acc + x * y)
    return float(acc)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", default="16,64,128", help="head_dims (multiples of 8)")
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--chain", type=int, default=2, help="MMA_CHAIN")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    models = [("split", instruction_unrounded, 0), ("exact", instruction_exact, 0), ("aligned+0", instruction_aligned, 0),
              ("aligned+3", instruction_aligned, 3)]
    print("d     model       mean |err| 3xTF32 / f32 loop   max / max")
    for d in (int(v) for v in args.dims.split(",")):
        pairs = [(rng.standard_normal(d).astype(np.float32),
                  rng.standard_normal(d).astype(np.float32)) for _ in range(args.trials)]
        exact = [math.fsum(float(x) * float(y) for x, y in zip(a, b)) for a, b in pairs]
        f32_err = np.array([abs(dot_f32(a, b) - e) for (a, b), e in zip(pairs, exact)])
        for name, instruction, extra in models:
            mma_err = np.array([abs(dot_3xtf32(a, b, instruction, extra, args.chain) - e)
                                for (a, b), e in zip(pairs, exact)])
            print(f"{d:<5} {name:<11} {mma_err.mean() / f32_err.mean():>24.2f}"
                  f"   {mma_err.max() / f32_err.max():>9.2f}")


if __name__ == "__main__":
    main()
