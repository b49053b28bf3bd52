"""A toy transformer's decode loop over a paged KV cache on the device.

Each layer projects the hidden state to q, k and v (numpy, on the host),
then flashcl.attention_with_kvcache appends k and v to the layer's paged
cache (pools of pages named by a block table, pages given to a sequence as
it grows) and attends over it, causal; an output projection and a residual
follow. First a prefill (each prompt's tokens in one call per layer), then
steps of one token per sequence, each timed. --check reruns the model with a
float64 numpy attention over plain arrays and prints the largest difference
of the final hidden states.

    python decode_loop.py [--steps 16] [--layers 2] [--page 16] [--check]
"""
import argparse
import time

import numpy as np
import pyopencl.array as cla

import flashcl

HQ, HKV, D = 8, 2, 32
HIDDEN = HQ * D


class PagedCache:
    """One layer's K and V pools and the block table, pages handed out on demand."""

    def __init__(self, queue, batch, num_pages, page, pages_per_seq, free):
        self.queue, self.page, self.free = queue, page, free
        self.k = cla.zeros(queue, (num_pages, page, HKV, D), np.float32)
        self.v = cla.zeros(queue, (num_pages, page, HKV, D), np.float32)
        self.table = np.zeros((batch, pages_per_seq), np.int32)
        self.table_dev = cla.to_device(queue, self.table)
        self.pages = [0] * batch

    def reserve(self, b, rows):
        """Gives sequence b the pages its first `rows` rows need; True if any."""
        given = False
        while self.pages[b] * self.page < rows:
            self.table[b, self.pages[b]] = self.free.pop()
            self.pages[b] += 1
            given = True
        return given

    def attend(self, ctx, q, k, v, lens, seqs):
        """Appends k, v to sequences `seqs` (at lens[seqs]) and attends: q, k, v
        numpy [len(seqs), T, heads, D]; returns o as numpy."""
        if any([self.reserve(b, lens[b] + k.shape[1]) for b in seqs]):
            self.table_dev.set(self.table)
        table = self.table_dev if len(seqs) == len(lens) else \
            cla.to_device(self.queue, self.table[seqs])
        dev = [cla.to_device(self.queue, np.ascontiguousarray(a, np.float32)) for a in (q, k, v)]
        o = flashcl.attention_with_kvcache(dev[0], self.k, self.v, dev[1], dev[2],
                                           cache_seqlens=lens[seqs], block_table=table,
                                           causal=True, ctx=ctx)
        return o.get()


def model(rng, layers):
    s = 1 / np.sqrt(HIDDEN)
    return [{n: (rng.standard_normal(shape) * s).astype(np.float32) for n, shape in
             (("wq", (HIDDEN, HQ * D)), ("wk", (HIDDEN, HKV * D)), ("wv", (HIDDEN, HKV * D)),
              ("wo", (HQ * D, HIDDEN)))} for _ in range(layers)]


def layer_step(w, x, attend):
    """x [B, T, HIDDEN] -> x + attention(x) Wo, with attend(q, k, v) -> o."""
    b, t, _ = x.shape
    q = (x @ w["wq"]).reshape(b, t, HQ, D)
    k = (x @ w["wk"]).reshape(b, t, HKV, D)
    v = (x @ w["wv"]).reshape(b, t, HKV, D)
    o = attend(q, k, v)
    return x + o.reshape(b, t, HQ * D) @ w["wo"]


def run_flashcl(ctx, weights, prompts, steps, page):
    batch, longest = len(prompts), max(p.shape[0] for p in prompts) + steps
    pages_per_seq = -(-longest // page)
    num_pages = batch * pages_per_seq + 1
    free = list(range(num_pages))[::-1]
    caches = [PagedCache(ctx.queue, batch, num_pages, page, pages_per_seq, list(free))
              for _ in weights]
    lens = np.zeros(batch, np.int32)
    # prefill: each prompt's tokens in one call per layer
    t0 = time.perf_counter()
    last = []
    for s, p in enumerate(prompts):
        x = p[None]
        for w, cache in zip(weights, caches):
            x = layer_step(w, x, lambda q, k, v, cache=cache: cache.attend(ctx, q, k, v, lens,
                                                                           [s]))
        lens[s] += p.shape[0]
        last.append(x[0, -1])
    ctx.finish()
    print(f"prefill: {sum(p.shape[0] for p in prompts)} tokens in "
          f"{1e3 * (time.perf_counter() - t0):.1f} ms")
    x = np.stack(last)[:, None]
    times = []
    seqs = list(range(batch))
    for step in range(steps):
        t0 = time.perf_counter()
        for w, cache in zip(weights, caches):
            x = layer_step(w, x, lambda q, k, v, cache=cache: cache.attend(ctx, q, k, v, lens,
                                                                           seqs))
        ctx.finish()
        lens += 1
        times.append(time.perf_counter() - t0)
        print(f"step {step:3d}: {1e3 * times[-1]:7.2f} ms  (cache lengths {lens.tolist()})")
    print(f"median step {1e3 * np.median(times):.2f} ms over {steps} steps, {len(weights)} "
          f"layers, batch {batch}")
    return x


def run_reference(weights, prompts, steps):
    """The same model with float64 attention over growing numpy caches."""
    caches = [[None] * len(prompts) for _ in weights]

    def attend_ref(q, k, v, li, s):
        kc = k if caches[li][s] is None else np.concatenate([caches[li][s][0], k], 1)
        vc = v if caches[li][s] is None else np.concatenate([caches[li][s][1], v], 1)
        caches[li][s] = (kc, vc)
        nq, nk = q.shape[1], kc.shape[1]
        g = HQ // HKV
        sc = np.einsum("bihd,bjhd->bhij", q.astype(np.float64), np.repeat(kc, g, 2)) / np.sqrt(D)
        m = np.arange(nk)[None] <= np.arange(nq)[:, None] + nk - nq
        sc = np.where(m, sc, -np.inf)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        return np.einsum("bhij,bjhd->bihd", p, np.repeat(vc, g, 2))

    xs = []
    for s, p in enumerate(prompts):
        x = p[None].astype(np.float64)
        for li, w in enumerate(weights):
            x = layer_step(w, x, lambda q, k, v, li=li, s=s: attend_ref(q, k, v, li, s))
        xs.append(x[:, -1:])
    for _ in range(steps):
        for s in range(len(prompts)):
            x = xs[s]
            for li, w in enumerate(weights):
                x = layer_step(w, x, lambda q, k, v, li=li, s=s: attend_ref(q, k, v, li, s))
            xs[s] = x
    return np.concatenate(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--page", type=int, default=16)
    ap.add_argument("--prompts", default="24,40")
    ap.add_argument("--device")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    ctx = flashcl.Context(a.device)
    print(ctx)
    weights = model(rng, a.layers)
    prompts = [rng.standard_normal((int(n), HIDDEN)).astype(np.float32)
               for n in a.prompts.split(",")]
    x = run_flashcl(ctx, weights, prompts, a.steps, a.page)
    if a.check:
        ref = run_reference(weights, prompts, a.steps)
        print(f"largest difference from the float64 model: {np.max(np.abs(x - ref)):.3g} "
              f"(largest value {np.max(np.abs(ref)):.3g}; the projections are float32)")


if __name__ == "__main__":
    main()
