#!/usr/bin/env python3
"""Gradient errors of the flash backward with its products on tensor cores
in f32 (cl/flash_bwd_mma.cl: 3xTF32, partial sums of MMA_CHAIN k-steps),
modelled on the host, against the same algorithm with every product in f32
(the SIMT kernels, which meet the accuracy rule on the GPU), both against a
float64 reference, on the inputs test_backward draws (normal Q and K of
sigma, V and dO of 1, O and LSE the reference's own). Each product can be
taken in f32 instead, to see which one carries the error:

  S    scale * Q K^T, from which P = e^(S - LSE)
  dP   dO V^T, which dS = P (dP - D) subtracts D = rowsum(dO * O) from
  acc  dV = P^T dO, dK = dS^T Q and dQ = dS K, the long sums

The tensor cores' sums follow mma_model.py's models (exact, aligned).
This is a model: what it shows holds for the GPU only as far as the
model's truncation matches the hardware's, and numpy's f32 products (BLAS)
stand in for the SIMT kernels' sums.

  tools/numerics/mma_backward_error.py [--nq 257 --nk 33 --d 16 --causal]
      [--scale 0.25 --sigma 1 --seeds 10 --model aligned --extra 0 --chain 2]
"""
import argparse

import numpy as np

from mma_model import MODELS, mma_product


def f32_product(a, b):
    return np.matmul(a.astype(np.float32), b.astype(np.float32))


def visible(nq, nk, causal):
    """Bottom-right aligned causal mask: query i sees key j <= i + nk - nq."""
    if not causal:
        return np.ones((nq, nk), bool)
    return np.arange(nk)[None, :] <= np.arange(nq)[:, None] + (nk - nq)


def reference(q, k, v, do, scale, mask):
    q, k, v, do = (x.astype(np.float64) for x in (q, k, v, do))
    s = np.where(mask, scale * q @ k.T, -np.inf)
    m = s.max(axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    l = e.sum(axis=1, keepdims=True)
    p = np.divide(e, l, out=np.zeros_like(e), where=l > 0)
    lse = np.where(l[:, 0] > 0, m[:, 0] + np.log(np.where(l[:, 0] > 0, l[:, 0], 1.0)), -np.inf)
    o = p @ v
    dp = do @ v.T
    ds = p * (dp - (p * dp).sum(axis=1, keepdims=True))
    return o, lse, {"dQ": scale * ds @ k, "dK": scale * ds.T @ q, "dV": p.T @ do}


def flash_mma(q, k, v, do, o, lse, scale, mask, exact, model, extra, chain):
    """The MMA backward; products named in `exact` taken as f32 instead."""
    def product(name, a, b):
        return f32_product(a, b) if name in exact else mma_product(a, b, model, extra, chain)
    d_row = (do.astype(np.float32) * o.astype(np.float32)).sum(axis=1, dtype=np.float32)
    s = product("S", q, k.T)
    lse32 = lse.astype(np.float32)
    seen = mask & np.isfinite(lse32)[:, None]
    p = np.where(seen, np.exp(s * np.float32(scale) - np.where(seen, lse32[:, None], 0)),
                 0).astype(np.float32)
    dp = product("dP", do, v.T)
    ds = (p * (dp - d_row[:, None])).astype(np.float32)
    sc = np.float32(scale)
    return {"dQ": sc * product("acc", ds, k), "dK": sc * product("acc", ds.T, q),
            "dV": product("acc", p.T, do)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nq", type=int, default=257)
    ap.add_argument("--nk", type=int, default=33)
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--sigma", type=float, default=1.0, help="spread of Q and K")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--model", choices=MODELS[1:], default="aligned")
    ap.add_argument("--extra", type=int, default=0, help="aligned: bits kept beyond 24")
    ap.add_argument("--chain", type=int, default=2,
                    help="MMA_CHAIN, k-steps per partial sum; 0: each instruction from zero")
    args = ap.parse_args()
    variants = [("all on tensor cores", ()), ("S in f32", ("S",)), ("dP in f32", ("dP",)),
                ("S and dP in f32", ("S", "dP")), ("sums in f32", ("acc",))]
    every = ("S", "dP", "acc")
    worst = {name: {g: 0.0 for g in ("dQ", "dK", "dV")} for name, _ in variants}
    mask = visible(args.nq, args.nk, args.causal)
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        q = (args.sigma * rng.standard_normal((args.nq, args.d))).astype(np.float32)
        k = (args.sigma * rng.standard_normal((args.nk, args.d))).astype(np.float32)
        v = rng.standard_normal((args.nk, args.d)).astype(np.float32)
        do = rng.standard_normal((args.nq, args.d)).astype(np.float32)
        o, lse, ref = reference(q, k, v, do, args.scale, mask)

        def errors(exact):
            got = flash_mma(q, k, v, do, o.astype(np.float32), lse, args.scale, mask, exact,
                            args.model, args.extra, args.chain)
            return {g: np.abs(got[g] - ref[g]).max() for g in ref}
        simt = errors(every)
        for name, exact in variants:
            err = errors(exact)
            for g in ref:
                worst[name][g] = max(worst[name][g], err[g] / simt[g])
    print(f"Nq {args.nq} Nk {args.nk} d {args.d} causal {int(args.causal)} scale {args.scale} "
          f"sigma {args.sigma}, {args.seeds} seeds, model {args.model}+{args.extra}, "
          f"chain {args.chain}: worst "
          "max error against the same with every product in f32")
    print(f"{'':24}{'dQ':>8}{'dK':>8}{'dV':>8}")
    for name, _ in variants:
        print(f"{name:24}" + "".join(f"{worst[name][g]:8.2f}" for g in ("dQ", "dK", "dV")))


if __name__ == "__main__":
    main()
