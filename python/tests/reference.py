"""The float64 reference the tests hold flashcl to, and the accuracy rule of
the C suites (tests/harness.c, tests/test_half.c): the flash algorithm's
largest error against float64 at most twice the naive algorithm's, plus a
floor of 1e-6 and, in 16-bit storage, half an ulp of the output's size."""
from __future__ import annotations

import numpy as np

HALF_ULP = {"f32": 0.0, "f16": 2.0 ** -11, "bf16": 2.0 ** -8}


def mask(nq, nk, causal=False, window=(-1, -1), q_len=None, k_len=None):
    """flash-attn's bottom-right aligned mask: [nq, nk] booleans (True: seen)."""
    q_len = nq if q_len is None else q_len
    k_len = nk if k_len is None else k_len
    i = np.arange(nq)[:, None] + k_len - q_len
    j = np.arange(nk)[None, :]
    left, right = window
    right = 0 if causal and right < 0 else right
    seen = np.broadcast_to(j < k_len, (nq, nk)).copy()
    if left >= 0:
        seen &= j >= i - left
    if right >= 0:
        seen &= j <= i + right
    return seen


def forward(q, k, v, causal=False, scale=None, window=(-1, -1), softcap=0.0, alibi=None,
            k_len=None, sinks=None):
    """O [B,Nq,Hq,d] and LSE [B,Hq,Nq] in float64; alibi [Hq] or [B,Hq]; sinks
    [Hq]: a logit per head in every row's denominator, with no value."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    b, nq, hq, d = q.shape
    nk, hkv = k.shape[1], k.shape[2]
    scale = 1 / np.sqrt(d) if scale is None else scale
    g = hq // hkv
    kk, vv = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, kk) * scale
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    o = np.zeros_like(q)
    lse = np.full((b, hq, nq), -np.inf)
    for bi in range(b):
        kl = nk if k_len is None else int(k_len[bi])
        m = mask(nq, nk, causal, window, nq, kl)
        sb = s[bi].copy()
        if alibi is not None:
            slopes = np.asarray(alibi, np.float64)
            slopes = slopes[bi] if slopes.ndim == 2 else slopes
            dist = np.abs(np.arange(nq)[:, None] + kl - nq - np.arange(nk)[None, :])
            sb = sb - slopes[:, None, None] * dist[None]
        sb = np.where(m[None], sb, -np.inf)
        mx = sb.max(-1, keepdims=True)
        sink = None if sinks is None else np.asarray(sinks, np.float64)[:, None, None]
        if sink is not None:
            mx = np.maximum(mx, sink)
        ok = np.isfinite(mx)
        p = np.where(ok, np.exp(sb - np.where(ok, mx, 0)), 0.0)
        l = p.sum(-1, keepdims=True)
        if sink is not None:
            l = l + np.exp(sink - mx)
        o[bi] = np.einsum("hij,jhd->ihd", np.where(l > 0, p / np.where(l > 0, l, 1), 0), vv[bi])
        lse[bi] = np.where(l[..., 0] > 0, np.log(np.where(l > 0, l, 1))[..., 0] + mx[..., 0],
                           -np.inf)
    return o, lse


def backward(dout, q, k, v, causal=False, scale=None, window=(-1, -1), softcap=0.0, alibi=None,
             o_stored=None, sinks=None):
    """dq, dk, dv in float64 (GQA: dk, dv summed over each kv head's group).
    D = rowsum(dO * O) from o_stored when given (the O the caller stored)."""
    q, k, v, dout = (np.asarray(x, np.float64) for x in (q, k, v, dout))
    b, nq, hq, d = q.shape
    nk, hkv = k.shape[1], k.shape[2]
    scale = 1 / np.sqrt(d) if scale is None else scale
    g = hq // hkv
    o, lse = forward(q, k, v, causal, scale, window, softcap, alibi, sinks=sinks)
    if o_stored is not None:
        o = np.asarray(o_stored, np.float64)
    kk, vv = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    raw = np.einsum("bihd,bjhd->bhij", q, kk) * scale
    s = softcap * np.tanh(raw / softcap) if softcap > 0 else raw
    if alibi is not None:
        slopes = np.asarray(alibi, np.float64)
        slopes = slopes if slopes.ndim == 2 else np.broadcast_to(slopes, (b, hq))
        dist = np.abs(np.arange(nq)[:, None] + nk - nq - np.arange(nk)[None, :])
        s = s - slopes[:, :, None, None] * dist[None, None]
    m = mask(nq, nk, causal, window)
    fin = np.isfinite(lse)[..., None]
    p = np.where(m[None, None] & fin, np.exp(s - np.where(fin, lse[..., None], 0)), 0.0)
    dvv = np.einsum("bhij,bihd->bjhd", p, dout)
    dp = np.einsum("bihd,bjhd->bhij", dout, vv)
    dd = np.einsum("bihd,bihd->bhi", dout, o)[..., None]
    ds = p * (dp - dd)
    if softcap > 0:
        ds = ds * (1 - np.tanh(raw / softcap) ** 2)
    dq = np.einsum("bhij,bjhd->bihd", ds, kk) * scale
    dkk = np.einsum("bhij,bihd->bjhd", ds, q) * scale
    dk = dkk.reshape(b, nk, hkv, g, d).sum(3)
    dv = dvv.reshape(b, nk, hkv, g, d).sum(3)
    return dq, dk, dv


def err(x, ref):
    return float(np.max(np.abs(np.asarray(x, np.float64) - ref))) if np.size(ref) else 0.0


def floor(dtype, ref):
    return HALF_ULP[dtype] * (float(np.max(np.abs(ref))) if np.size(ref) else 0.0) + 1e-6


def assert_rule(flash_err, naive_err, floor_, what, factor=2.0):
    bound = factor * naive_err + floor_
    assert flash_err <= bound, (f"{what}: flash error {flash_err:.3g} over {factor} x naive "
                                f"{naive_err:.3g} + floor {floor_:.3g}")
