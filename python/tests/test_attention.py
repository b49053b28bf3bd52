"""Forward and backward against the float64 reference, with the C suites' rule."""
import numpy as np
import pytest

import flashcl
from reference import assert_rule, backward, err, floor, forward

CASES = {  # name: (B, Hq, Hkv, Nq, Nk, d, options)
    "plain": (2, 2, 2, 40, 40, 32, {}),
    "gqa-causal": (1, 4, 2, 24, 56, 32, {"causal": True}),
    "mqa-window": (1, 4, 1, 48, 48, 16, {"window_size": (8, 4)}),
    "causal-window": (1, 2, 2, 33, 33, 32, {"causal": True, "window_size": (5, -1)}),
    "softcap-scale": (1, 2, 1, 32, 40, 32, {"softcap": 2.0, "softmax_scale": 0.5}),
    "alibi-per-batch": (2, 2, 2, 20, 20, 16, {"alibi": (2, 2), "causal": True}),
    # sinks of +30, -30 and ordinary sizes; causal with more queries than
    # keys: the first rows see no key (zeros, LSE = the sink)
    "sinks-gqa-causal": (2, 4, 2, 24, 16, 32, {"sinks": [30.0, -30.0, 0.7, -1.5], "causal": True}),
}


def _args(opts, rng):
    o = dict(opts)
    ref = {"causal": o.get("causal", False), "scale": o.get("softmax_scale"),
           "window": o.get("window_size", (-1, -1)), "softcap": o.get("softcap", 0.0)}
    if "alibi" in o:
        slopes = rng.uniform(0.05, 0.5, o.pop("alibi")).astype(np.float32)
        o["alibi_slopes"] = ref["alibi"] = slopes
    if "sinks" in o:
        o["sinks"] = ref["sinks"] = np.asarray(o.pop("sinks"), np.float32)
    return o, ref


def _inputs(rng, b, hq, hkv, nq, nk, d, dtype=np.float32):
    q = rng.standard_normal((b, nq, hq, d)).astype(dtype)
    k = rng.standard_normal((b, nk, hkv, d)).astype(dtype)
    v = rng.standard_normal((b, nk, hkv, d)).astype(dtype)
    return q, k, v


@pytest.mark.parametrize("name", list(CASES))
def test_forward(ctx, rng, name):
    b, hq, hkv, nq, nk, d, opts = CASES[name]
    q, k, v = _inputs(rng, b, hq, hkv, nq, nk, d)
    o_args, r_args = _args(opts, rng)
    ref_o, ref_lse = forward(q, k, v, **r_args)
    o, lse = flashcl.attention(q, k, v, return_lse=True, ctx=ctx, **o_args)
    naive = flashcl.attention(q, k, v, algo="naive", ctx=ctx, **o_args)
    assert o.shape == q.shape and o.dtype == np.float32 and lse.shape == (b, hq, nq)
    assert_rule(err(o, ref_o), err(naive, ref_o), floor("f32", ref_o), f"{name} O")
    seen = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), seen)
    assert np.allclose(lse[seen], ref_lse[seen], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["plain", "gqa-causal", "softcap-scale", "alibi-per-batch",
                                  "sinks-gqa-causal"])
def test_backward(ctx, rng, name):
    b, hq, hkv, nq, nk, d, opts = CASES[name]
    q, k, v = _inputs(rng, b, hq, hkv, nq, nk, d)
    dout = rng.standard_normal(q.shape).astype(np.float32)
    o_args, r_args = _args(opts, rng)
    refs = backward(dout, q, k, v, **r_args)
    o, lse = flashcl.attention(q, k, v, return_lse=True, ctx=ctx, **o_args)
    got = flashcl.attention_backward(dout, q, k, v, o, lse, ctx=ctx, **o_args)
    naive = flashcl.attention_backward(dout, q, k, v, o, lse, algo="naive", ctx=ctx, **o_args)
    for n, g, nv, r in zip(("dq", "dk", "dv"), got, naive, refs):
        assert g.shape == r.shape
        assert_rule(err(g, r), err(nv, r), floor("f32", r), f"{name} {n}", factor=3.0)
        # and in absolute terms: a term both algorithms missed would pass the rule
        assert err(g, r) <= 1e-4 * max(1.0, float(np.max(np.abs(r)))), f"{name} {n}"


def _round(x, dtype):
    return np.asarray(x, np.float64).astype(dtype).astype(np.float64)


@pytest.mark.parametrize("kind", ["f16", "bf16", "bf16-bits"])
def test_half(ctx, rng, kind):
    """16-bit storage: test_half.c's rule; naive f16 needs cl_khr_fp16, so
    where the device lacks it the naive error is its host emulation (S, P and
    O rounded to f16)."""
    b, hq, hkv, nq, nk, d = 1, 4, 2, 32, 48, 32
    if kind == "f16":
        np_t, dtype, name = np.float16, None, "f16"
    else:
        ml = pytest.importorskip("ml_dtypes")
        np_t, name = ml.bfloat16, "bf16"
        dtype = "bf16" if kind == "bf16-bits" else None
    q, k, v = _inputs(rng, b, hq, hkv, nq, nk, d, np_t)
    dout = rng.standard_normal(q.shape).astype(np_t)
    if kind == "bf16-bits":
        q, k, v, dout = (x.view(np.uint16) for x in (q, k, v, dout))
    wide = [x.view(np_t).astype(np.float64) if kind == "bf16-bits" else x.astype(np.float64)
            for x in (q, k, v, dout)]
    ref_o, _ = forward(*wide[:3], causal=True)
    o, lse = flashcl.attention(q, k, v, causal=True, return_lse=True, ctx=ctx, dtype=dtype)
    assert o.dtype == q.dtype
    o64 = o.view(np_t).astype(np.float64) if kind == "bf16-bits" else o.astype(np.float64)
    try:
        naive = flashcl.attention(q, k, v, causal=True, algo="naive", ctx=ctx, dtype=dtype)
        naive64 = naive.view(np_t).astype(np.float64) if kind == "bf16-bits" else naive
        naive_err = err(naive64, ref_o)
    except flashcl.UnsupportedError:
        naive_err = _emulated_naive_err(wide[:3], ref_o, np_t)
    assert_rule(err(o64, ref_o), naive_err, floor(name, ref_o), f"{kind} O")
    # backward: the floor adds what taking D from the stored (rounded) O costs
    grads = flashcl.attention_backward(dout, q, k, v, o, lse, causal=True, ctx=ctx, dtype=dtype)
    exact = backward(*[wide[3]] + wide[:3], causal=True)
    from_o = backward(*[wide[3]] + wide[:3], causal=True, o_stored=o64)
    for n, g, r, r_o in zip(("dq", "dk", "dv"), grads, exact, from_o):
        g64 = g.view(np_t).astype(np.float64) if kind == "bf16-bits" else g.astype(np.float64)
        naive_grad_err = err(_round(r, np_t), r)  # the naive's output rounding at least
        assert_rule(err(g64, r), naive_grad_err, floor(name, r) + err(r_o, r), f"{kind} {n}",
                    factor=3.0)


def _emulated_naive_err(qkv, ref_o, np_t):
    q, k, v = qkv
    d = q.shape[-1]
    s = _round(np.einsum("bihd,bjhd->bhij", q, np.repeat(k, 2, 2)) / np.sqrt(d), np_t)
    nq, nk = q.shape[1], k.shape[1]
    m = np.arange(nk)[None] <= np.arange(nq)[:, None] + nk - nq
    s = np.where(m, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p = _round(p / p.sum(-1, keepdims=True), np_t)
    o = _round(np.einsum("bhij,bjhd->bihd", p, np.repeat(v, 2, 2)), np_t)
    return err(o, ref_o)


def test_layouts_without_copies(ctx, rng):
    """A transposed [B,H,N,d] view and the views of a packed QKV projection
    go through with their strides: one upload, same results as packed."""
    b, n, h, d = 2, 24, 2, 16
    qkv = rng.standard_normal((b, n, 3, h, d)).astype(np.float32)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    assert not q.flags.c_contiguous
    ref_o, _ = forward(q, k, v, causal=True)
    o = flashcl.attention(q, k, v, causal=True, ctx=ctx)
    assert err(o, ref_o) < 1e-5
    bhsd = [np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v)]
    o2 = flashcl.attention(*bhsd, causal=True, layout="bhsd", ctx=ctx)
    assert o2.shape == (b, h, n, d)
    assert err(o2.transpose(0, 2, 1, 3), ref_o) < 1e-5
    # a [B,N,H,d] view of [B,H,N,d] memory, passed as bshd
    t = [x.transpose(0, 2, 1, 3) for x in bhsd]
    o3 = flashcl.attention(*t, causal=True, ctx=ctx)
    assert err(o3, ref_o) < 1e-5


def test_info(ctx, rng):
    q, k, v = _inputs(rng, 1, 2, 2, 32, 32, 16)
    o, info = flashcl.attention(q, k, v, ctx=ctx, info=True)
    assert info["ms"] > 0 and info["bytes_model"] > 0 and info["flops"] == 4 * 32 * 32 * 2 * 16
    assert info["plan"]["kernel"] != "auto" and info["tuned"] is False


def test_sinks_rows_without_keys(ctx, rng):
    """A row that sees no key: zeros and LSE = its head's sink, exactly."""
    sinks = np.array([2.5, -4.0], np.float32)
    q, k, v = _inputs(rng, 1, 2, 1, 12, 4, 16)
    o, lse = flashcl.attention(q, k, v, causal=True, sinks=sinks, return_lse=True, ctx=ctx)
    assert np.all(o[0, :8] == 0)  # rows 0..7 see no key (bottom-right aligned)
    assert np.array_equal(lse[0, :, :8], np.repeat(sinks[:, None], 8, axis=1))
    with pytest.raises(flashcl.InvalidShapeError):
        flashcl.attention(q, k, v, sinks=sinks[:1], ctx=ctx)


def test_batch_invariant_varlen(ctx, rng):
    """One sequence alone and among neighbours of other lengths: the same bits in the
    batch-invariant mode."""
    hq, hkv, d, n = 4, 2, 32, 37
    q, k, v = (rng.standard_normal((n, h, d)).astype(np.float32) for h in (hq, hkv, hkv))
    outs = []
    for before, after in ((0, 0), (300, 5), (3, 700)):
        qs = [rng.standard_normal((m, hq, d)).astype(np.float32) for m in (before, after)]
        ks = [rng.standard_normal((m, hkv, d)).astype(np.float32) for m in (before, after)]
        cu = np.array([0, before, before + n, before + n + after], np.int32)
        o = flashcl.attention_varlen(np.concatenate([qs[0], q, qs[1]]),
                                     np.concatenate([ks[0], k, ks[1]]),
                                     np.concatenate([ks[0], v, ks[1]]), cu, cu,
                                     max(before, n, after), max(before, n, after), causal=True,
                                     batch_invariant=True, ctx=ctx)
        outs.append(o[before:before + n])
    assert all(np.array_equal(outs[0], x) for x in outs[1:])
    ref_o, _ = forward(q[None], k[None], v[None], causal=True)
    assert err(outs[0], ref_o[0]) < 1e-5
