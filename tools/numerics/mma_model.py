"""A host model of cl/mma.cl's f32 products on tensor cores (3xTF32), for
the scripts beside it. How an instruction sums its products, MODELS:

  split     exactly, in float64, no rounding: what the split alone costs;
  exact     the products and c summed exactly, then truncated to f32
            (PoCL's default emulation);
  aligned   the products and c aligned to the largest and each truncated
            below its 24 + extra leading bits, then summed
            (MMA_EMULATE_ALIGN).
"""
import numpy as np

MODELS = ("split", "exact", "aligned")


def tf32_nearest(x):
    """cvt.rna.tf32.f32: the low 13 mantissa bits rounded off, ties away."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x1000) & 0xFFFFE000) & 0xFFFFFFFF
    return bits.astype(np.uint32).view(np.float32)


def split(x):
    """x = big + small, both tf32 (mma.cl's split_tf32), as float64."""
    big = tf32_nearest(x)
    return big.astype(np.float64), tf32_nearest((x - big).astype(np.float32)).astype(np.float64)


def to_f32_toward_zero(v):
    f = v.astype(np.float32)
    over = np.abs(f.astype(np.float64)) > np.abs(v)
    f[over] = np.nextafter(f[over], np.float32(0))
    return f.astype(np.float64)


def instruction(c, products, model, extra):
    """One mma.sync per output element: c (...,) plus products (..., 8),
    summed as `model` says (MODELS)."""
    if model == "split":
        return c + products.sum(axis=-1)
    if model == "exact":
        return to_f32_toward_zero(c + products.sum(axis=-1))
    largest = np.maximum(np.abs(c), np.abs(products).max(axis=-1))
    _, e = np.frexp(np.where(largest > 0, largest, 1.0))
    quantum = np.ldexp(1.0, e - 24 - extra)[..., None]
    kept = np.trunc(products / quantum) * quantum
    acc = np.trunc(c / quantum[..., 0]) * quantum[..., 0] + kept.sum(axis=-1)
    return to_f32_toward_zero(np.where(largest > 0, acc, c))


def mma_product(a, b, model, extra, chain):
    """a (R x K) times b (K x C) as the kernels take it: both split, three
    instructions per k-step of 8, partial sums of `chain` k-steps joined in
    f32 (chain 0: every instruction starts from zero and joins in f32). K is
    padded with zeros to a multiple of 8."""
    k = a.shape[1]
    pad = (-k) % 8
    a = np.pad(a.astype(np.float32), ((0, 0), (0, pad)))
    b = np.pad(b.astype(np.float32), ((0, pad), (0, 0)))
    a_big, a_small = split(a)
    b_big, b_small = split(b)
    total = np.zeros((a.shape[0], b.shape[1]), np.float32)
    if chain == 0:
        for ks in range(0, a.shape[1], 8):
            s = slice(ks, ks + 8)
            for x, y in ((a_small, b_big), (a_big, b_small), (a_big, b_big)):
                products = x[:, None, s] * y[s, :].T[None, :, :]
                part = instruction(np.zeros(total.shape), products, model, extra)
                total = (total + part.astype(np.float32)).astype(np.float32)
        return total
    for k0 in range(0, a.shape[1], 8 * chain):
        part = np.zeros(total.shape)
        for ks in range(k0, min(a.shape[1], k0 + 8 * chain), 8):
            s = slice(ks, ks + 8)
            for x, y in ((a_small, b_big), (a_big, b_small), (a_big, b_big)):
                products = x[:, None, s] * y[s, :].T[None, :, :]
                part = instruction(part, products, model, extra)
        total = (total + part.astype(np.float32)).astype(np.float32)
    return total
