#!/usr/bin/env python3
"""Error of an f32 dot product taken as cl/mma.cl takes it in f32 (3xTF32:
each operand split into two tf32 parts to nearest, three products per
k-step of 8, partial sums of MMA_CHAIN k-steps joined in f32), against an
f32 loop of multiply-adds, both against the exact sum, on random normal
vectors, under each of mma_model.py's models of the tensor cores' sums
(split, exact, aligned with 0 and 3 extra bits).

It answers one question: how much of the f32 MMA backward's error against
the naive algorithm comes from the dot products themselves.

  tools/numerics/mma_dot_error.py [--dims 16,64,128] [--trials 2000]
"""
import argparse
import math

import numpy as np

from mma_model import mma_product


def dot_3xtf32(a, b, model, extra, chain):
    return float(mma_product(a[None, :], b[:, None], model, extra, chain)[0, 0])


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
    models = [("split", "split", 0), ("exact", "exact", 0), ("aligned+0", "aligned", 0),
              ("aligned+3", "aligned", 3)]
    print("d     model       mean |err| 3xTF32 / f32 loop   max / max")
    for d in (int(v) for v in args.dims.split(",")):
        pairs = [(rng.standard_normal(d).astype(np.float32),
                  rng.standard_normal(d).astype(np.float32)) for _ in range(args.trials)]
        exact = [math.fsum(float(x) * float(y) for x, y in zip(a, b)) for a, b in pairs]
        f32_err = np.array([abs(dot_f32(a, b) - e) for (a, b), e in zip(pairs, exact)])
        for name, model, extra in models:
            mma_err = np.array([abs(dot_3xtf32(a, b, model, extra, args.chain) - e)
                                for (a, b), e in zip(pairs, exact)])
            print(f"{d:<5} {name:<11} {mma_err.mean() / f32_err.mean():>24.2f}"
                  f"   {mma_err.max() / f32_err.max():>9.2f}")


if __name__ == "__main__":
    main()
