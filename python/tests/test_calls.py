"""Ragged batches, KV caches (appended, paged), merges, pyopencl arrays in
place, the model functions, the bench and bad inputs."""
import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import flashcl
from reference import err, forward


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_varlen_with_an_empty_sequence(ctx, rng):
    lens_q, lens_k = [5, 0, 17], [9, 0, 17]
    cq, ck = np.cumsum([0] + lens_q), np.cumsum([0] + lens_k)
    h, hkv, d = 4, 2, 16
    q, k, v = _rand(rng, cq[-1], h, d), _rand(rng, ck[-1], hkv, d), _rand(rng, ck[-1], hkv, d)
    o, lse = flashcl.attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=True,
                                      return_lse=True, ctx=ctx)
    assert o.shape == q.shape and lse.shape == (h, cq[-1])
    for s in range(3):
        if not lens_q[s]:
            continue
        qs, ks, vs = q[None, cq[s]:cq[s + 1]], k[None, ck[s]:ck[s + 1]], v[None, ck[s]:ck[s + 1]]
        ro, rl = forward(qs, ks, vs, causal=True)
        assert err(o[cq[s]:cq[s + 1]], ro[0]) < 1e-5
        assert np.allclose(lse[:, cq[s]:cq[s + 1]], rl[0], atol=1e-4)


def test_kvcache_append(ctx, rng):
    b, cap, hq, hkv, d, new = 2, 64, 4, 2, 32, 3
    k_cache, v_cache = _rand(rng, b, cap, hkv, d), _rand(rng, b, cap, hkv, d)
    lens = np.array([10, 40], np.int32)
    q, k, v = _rand(rng, b, new, hq, d), _rand(rng, b, new, hkv, d), _rand(rng, b, new, hkv, d)
    before = k_cache.copy()
    o = flashcl.attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens,
                                       causal=True, ctx=ctx)
    for i in range(b):  # appended in place, the rest untouched
        assert np.array_equal(k_cache[i, lens[i]:lens[i] + new], k[i])
        assert np.array_equal(k_cache[i, :lens[i]], before[i, :lens[i]])
        assert np.array_equal(k_cache[i, lens[i] + new:], before[i, lens[i] + new:])
        kl = lens[i] + new
        ro, _ = forward(q[i:i + 1], k_cache[i:i + 1, :kl], v_cache[i:i + 1, :kl], causal=True)
        assert err(o[i], ro[0]) < 1e-5
    # a cache the library could only read through a copy cannot be appended to
    wide = _rand(rng, b, cap, hkv, 2 * d)
    with pytest.raises(flashcl.InvalidArgumentError, match="k_cache"):
        flashcl.attention_with_kvcache(q, wide[..., ::2], v_cache, k, v, cache_seqlens=lens,
                                       ctx=ctx)


def test_paged_cache_on_pyopencl_arrays(ctx, rng):
    b, page, pages_per_seq, hq, hkv, d = 2, 16, 3, 4, 1, 32
    num_pages = b * pages_per_seq + 1
    table = rng.permutation(num_pages)[:b * pages_per_seq].reshape(b, pages_per_seq)
    table = table.astype(np.int32)
    pool_k, pool_v = _rand(rng, num_pages, page, hkv, d), _rand(rng, num_pages, page, hkv, d)
    lens = np.array([20, 33], np.int32)
    q, k, v = _rand(rng, b, 1, hq, d), _rand(rng, b, 1, hkv, d), _rand(rng, b, 1, hkv, d)
    queue = ctx.queue
    dev = {n: cla.to_device(queue, x) for n, x in
           (("q", q), ("k", k), ("v", v), ("pk", pool_k), ("pv", pool_v), ("bt", table))}
    o = flashcl.attention_with_kvcache(dev["q"], dev["pk"], dev["pv"], dev["k"], dev["v"],
                                       cache_seqlens=lens, block_table=dev["bt"], causal=True,
                                       ctx=ctx)
    assert isinstance(o, cla.Array)
    pk, pv = dev["pk"].get(), dev["pv"].get()
    for i in range(b):
        kl = lens[i] + 1
        rows = [table[i, t // page] * page + t % page for t in range(kl)]
        ks = pk.reshape(-1, hkv, d)[rows][None]
        vs = pv.reshape(-1, hkv, d)[rows][None]
        assert np.array_equal(ks[0, -1], k[i, 0])  # the appended row is in its page
        ro, _ = forward(q[i:i + 1], ks, vs, causal=True)
        assert err(o.get()[i], ro[0]) < 1e-5


def test_merge_states(ctx, rng):
    b, n, h, d, nk = 1, 6, 2, 16, 40
    q, k, v = _rand(rng, b, n, h, d), _rand(rng, b, nk, h, d), _rand(rng, b, nk, h, d)
    parts = [flashcl.attention(q, k[:, s], v[:, s], return_lse=True, ctx=ctx)
             for s in (slice(0, 15), slice(15, 40))]
    o, lse = flashcl.merge_states([p[0] for p in parts], [p[1] for p in parts], ctx=ctx)
    ro, rl = forward(q, k, v)
    assert err(o, ro) < 1e-5 and np.allclose(lse, rl, atol=1e-5)


def test_pyopencl_in_place_on_the_callers_queue(rng):
    """Arrays of a context and queue the caller made: flashcl wraps that queue
    (one OpenCL loader's handles shared with pyopencl's), runs on it, and
    writes out= in place."""
    cl_ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]])
    queue = cl.CommandQueue(cl_ctx)
    q, k, v = _rand(rng, 1, 32, 2, 16), _rand(rng, 1, 32, 2, 16), _rand(rng, 1, 32, 2, 16)
    dq, dk, dv = (cla.to_device(queue, x) for x in (q, k, v))
    out = cla.empty(queue, q.shape, np.float32)
    res = flashcl.attention(dq, dk, dv, causal=True, out=out)
    assert res is out and out.queue is queue
    ro, _ = forward(q, k, v, causal=True)
    assert err(out.get(), ro) < 1e-5
    o2 = flashcl.attention(dq, dk, dv, causal=True)
    assert isinstance(o2, cla.Array) and o2.queue is queue
    # a [B,H,N,d] pyopencl view passed as bshd: strides, no copy
    t = cla.to_device(queue, np.ascontiguousarray(q.transpose(0, 2, 1, 3)))
    o3 = flashcl.attention(t.transpose((0, 2, 1, 3)), dk, dv, causal=True)
    assert err(o3.get(), ro) < 1e-5


def test_bad_inputs(ctx, rng):
    q, k, v = _rand(rng, 1, 8, 2, 16), _rand(rng, 1, 8, 2, 16), _rand(rng, 1, 8, 2, 16)
    with pytest.raises(flashcl.InvalidArgumentError, match="float64"):
        flashcl.attention(q.astype(np.float64), k, v, ctx=ctx)
    with pytest.raises(flashcl.InvalidArgumentError, match="dtype='bf16'"):
        flashcl.attention(q.view(np.uint16), k, v, ctx=ctx)
    with pytest.raises(flashcl.InvalidShapeError, match="heads_q"):
        flashcl.attention(_rand(rng, 1, 8, 3, 16), k, v, ctx=ctx)
    with pytest.raises(flashcl.InvalidArgumentError, match="share one storage type"):
        flashcl.attention(q, k.astype(np.float16), v, ctx=ctx)
    with pytest.raises(flashcl.InvalidArgumentError, match="window_right|window"):
        flashcl.attention(q, k, v, causal=True, window_size=(-1, 3), ctx=ctx)
    with pytest.raises(flashcl.UnsupportedError, match="head_dim"):
        big = _rand(rng, 1, 2, 1, 600)  # over FCL_MAX_HEAD_DIM (576)
        flashcl.attention(big, big, big, ctx=ctx)
    with pytest.raises(flashcl.InvalidArgumentError, match="layout"):
        flashcl.attention(q, k, v, layout="sbhd", ctx=ctx)
    dq = cla.to_device(ctx.queue, q)
    with pytest.raises(flashcl.InvalidArgumentError, match="numpy|pyopencl"):
        flashcl.attention(dq, k, v, ctx=ctx)
    other = cl.CommandQueue(cl.Context([ctx.queue.device]))
    with pytest.raises(flashcl.InvalidArgumentError, match="another OpenCL context"):
        flashcl.attention(dq, cla.to_device(other, k), cla.to_device(other, v), ctx=ctx)
    # a call the library refuses leaves out= untouched
    out = cla.to_device(ctx.queue, np.full(q.shape, np.nan, np.float32))
    dk, dv = cla.to_device(ctx.queue, k), cla.to_device(ctx.queue, v)
    with pytest.raises(flashcl.InvalidArgumentError) as e:
        flashcl.attention(dq, dk, dv, softcap=-1.0, out=out, ctx=ctx)
    assert e.value.status == 1 and "softcap" in e.value.message
    assert np.isnan(out.get()).all()
    host_out = np.full(q.shape, np.nan, np.float32)
    with pytest.raises(flashcl.Error):
        flashcl.attention(q, k, v, softmax_scale=-1.0, out=host_out, ctx=ctx)
    assert np.isnan(host_out).all()


def test_devices_plan_io_model_peaks(ctx):
    devs = flashcl.devices()
    assert devs and devs[0].limits["compute_units"] >= 1
    p = flashcl.plan(seqlen=256, head_dim=64, causal=True, ctx=ctx)
    assert p["block_q"] > 0 and p["kernel"] in ("simt", "mma", "decode", "decode-mma", "cpu")
    flash = flashcl.io_model(seqlen=1024, ctx=ctx)
    naive = flashcl.io_model(seqlen=1024, algo="naive", ctx=ctx)
    assert 0 < flash["bytes"] < naive["bytes"] and flash["flops"] == 4 * 1024 ** 2 * 8 * 64
    with pytest.raises(flashcl.InvalidShapeError):
        flashcl.plan(heads=3, heads_kv=2, ctx=ctx)
    p = flashcl.peaks(ctx)
    assert p["copy_gbps"] > 0 and p["fma_tflops"] > 0


def test_bench_records():
    rec = flashcl.bench(seqlen=64, heads=2, head_dim=16, algo="flash", repeat=1, warmup=0,
                        no_peaks=True, progress=False)
    assert len(rec) == 1 and rec[0]["status"] == "ok" and rec[0]["ms_median"] > 0
    assert rec[0]["seqlen_q"] == 64 and rec.devices
    with pytest.raises(flashcl.InvalidArgumentError):
        flashcl.bench(seqlen="many")


def test_prepared_calls_see_new_data_and_new_arrays(ctx, rng):
    """The second call with the same pyopencl arrays and out= takes the prepared
    path: it reads the arrays' current contents, and other arrays get their own."""
    q, k, v = _rand(rng, 1, 1, 4, 32), _rand(rng, 1, 40, 2, 32), _rand(rng, 1, 40, 2, 32)
    dq, dk, dv = (cla.to_device(ctx.queue, x) for x in (q, k, v))
    out = cla.empty(ctx.queue, q.shape, np.float32)
    lse = cla.empty(ctx.queue, (1, 4, 1), np.float32)
    for _ in range(2):
        q = _rand(rng, 1, 1, 4, 32)
        dq.set(q)
        res, got_lse = flashcl.attention(dq, dk, dv, causal=True, out=out, lse_out=lse,
                                         return_lse=True, ctx=ctx)
        assert res is out and got_lse is lse
        ro, rl = forward(q, k, v, causal=True)
        assert err(out.get(), ro) < 1e-5 and np.allclose(lse.get(), rl, atol=1e-5)
    out2 = cla.empty(ctx.queue, q.shape, np.float32)
    flashcl.attention(dq, dk, dv, causal=True, out=out2, ctx=ctx)
    assert err(out2.get(), ro) < 1e-5
    # a call the library refuses raises, leaves out= untouched, and is not
    # kept as prepared (the second try is refused by the library again)
    out.set(np.full(q.shape, np.nan, np.float32))
    for _ in range(2):
        with pytest.raises(flashcl.InvalidArgumentError):
            flashcl.attention(dq, dk, dv, softmax_scale=float("inf"), out=out, ctx=ctx)
        assert np.isnan(out.get()).all()


def test_bfloat16_pyopencl_arrays(ctx, rng):
    ml = pytest.importorskip("ml_dtypes")
    q, k, v = (rng.standard_normal((1, 24, 2, 16)).astype(ml.bfloat16) for _ in range(3))
    dev = [cla.to_device(ctx.queue, x) for x in (q, k, v)]
    o = flashcl.attention(*dev, causal=True, ctx=ctx)
    assert o.dtype == ml.bfloat16
    ro, _ = forward(*(x.astype(np.float64) for x in (q, k, v)), causal=True)
    assert err(o.get().astype(np.float64), ro) <= 2 ** -8 * np.abs(ro).max() * 2 + 1e-6
    bits = [cla.to_device(ctx.queue, x.view(np.uint16)) for x in (q, k, v)]
    o2 = flashcl.attention(*bits, causal=True, dtype="bf16", ctx=ctx)
    assert o2.dtype == np.uint16 and np.array_equal(o2.get(), o.get().view(np.uint16))


def test_backward_and_merge_on_pyopencl_arrays(ctx, rng):
    """The backward and the merge on device arrays give what their numpy calls give."""
    q, k, v = _rand(rng, 1, 16, 4, 16), _rand(rng, 1, 24, 2, 16), _rand(rng, 1, 24, 2, 16)
    dout = _rand(rng, 1, 16, 4, 16)
    o, lse = flashcl.attention(q, k, v, causal=True, return_lse=True, ctx=ctx)
    want = flashcl.attention_backward(dout, q, k, v, o, lse, causal=True, ctx=ctx)
    dev = [cla.to_device(ctx.queue, x) for x in (dout, q, k, v, o, lse)]
    got = flashcl.attention_backward(*dev, causal=True, ctx=ctx)
    for g, w in zip(got, want):
        assert isinstance(g, cla.Array) and np.array_equal(g.get(), w)
    parts = [flashcl.attention(q, k[:, s], v[:, s], return_lse=True, ctx=ctx)
             for s in (slice(0, 10), slice(10, 24))]
    o_parts = cla.to_device(ctx.queue, np.stack([p[0] for p in parts]))
    lse_parts = cla.to_device(ctx.queue, np.stack([p[1] for p in parts]))
    mo, ml = flashcl.merge_states(o_parts, lse_parts, ctx=ctx)
    ro, rl = forward(q, k, v)
    assert err(mo.get(), ro) < 1e-5 and np.allclose(ml.get(), rl, atol=1e-5)
