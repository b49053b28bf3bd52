"""What a decode call costs the host from Python, next to flashcl-call-cost
(tools/callcost) for the same shape: batch B, one query row, Hq/Hkv 32/8,
d 128, CACHE keys, causal, on pyopencl arrays with out= and lse_out= (no
allocation in the call). Prints the medians of 40 calls, in ms: a call that
waits for its result (info=True), a call's enqueue time (from an idle
queue), and the time per call of 200 calls in a row.

With --layer, the Python layer's own host time per call instead: the
library's forward is replaced by one of its calls that returns at once
(fcl_context_set_scratch_limit, which ignores the forward's further
arguments; ctypes still converts them as the forward's), so that what is
left is what Python adds to the C call (medians of 20 runs of 500 calls).

    python call_cost.py [--device SEL] [--dtype f16] [--layer [--unprepared]] B CACHE
"""
import argparse
import ctypes
import time

import numpy as np
import pyopencl.array as cla

import flashcl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device")
    ap.add_argument("--dtype", default="f16", choices=["f32", "f16"])
    ap.add_argument("--layer", action="store_true")
    ap.add_argument("--unprepared", action="store_true",
                    help="forget the prepared call before each call (the first call's path)")
    ap.add_argument("batch", type=int)
    ap.add_argument("cache", type=int)
    a = ap.parse_args()
    ctx = flashcl.Context(a.device)
    t = np.float16 if a.dtype == "f16" else np.float32
    b, n = a.batch, a.cache
    q = cla.to_device(ctx.queue, np.full((b, 1, 32, 128), 0.05, t))
    k = cla.to_device(ctx.queue, np.full((b, n, 8, 128), 0.05, t))
    v = cla.to_device(ctx.queue, np.full((b, n, 8, 128), 0.05, t))
    o = cla.empty(ctx.queue, (b, 1, 32, 128), t)
    lse = cla.empty(ctx.queue, (b, 32, 1), np.float32)

    def call(info=False):  # noqa: E306
        if a.unprepared:
            flashcl._attention._PREPARED.clear()
        return flashcl.attention(q, k, v, causal=True, out=o, lse_out=lse, ctx=ctx, info=info)

    for _ in range(5):  # builds, then warm
        call(info=True)
    if a.layer:
        call.ctx_ptr = ctx._ptr
        layer_cost(call)
        return
    wall, enqueue = [], []
    for _ in range(40):
        t0 = time.perf_counter()
        call(info=True)
        wall.append(time.perf_counter() - t0)
    for _ in range(40):
        ctx.queue.finish()
        t0 = time.perf_counter()
        call()
        enqueue.append(time.perf_counter() - t0)
    ctx.queue.finish()
    t0 = time.perf_counter()
    for _ in range(200):
        call()
    ctx.queue.finish()
    run = (time.perf_counter() - t0) / 200
    print(f"{ctx.device.name}\n{'type':5} {'B x cache':13} {'wall':>9} {'enqueue':>9} "
          f"{'in a run':>9}")
    print(f"{a.dtype:5} {b:3} x {n:<7} {1e3 * np.median(wall):9.4f} "
          f"{1e3 * np.median(enqueue):9.4f} {1e3 * run:9.4f}")


def layer_cost(call) -> None:
    c = flashcl._lib.lib
    real = c.fcl_attention_forward
    stub = type(real)(ctypes.cast(c.fcl_context_set_scratch_limit, ctypes.c_void_p).value)
    stub.restype, stub.argtypes = real.restype, real.argtypes
    stub.restype, stub.argtypes = real.restype, real.argtypes
    c.fcl_attention_forward = stub
    try:
        per_call = []
        for _ in range(20):
            t0 = time.perf_counter()
            for _ in range(500):
                call()
            per_call.append((time.perf_counter() - t0) / 500)
    finally:
        c.fcl_attention_forward = real
        c.fcl_context_set_scratch_limit(call.ctx_ptr, 0)  # the default again
    print(f"the Python layer's host time per call: {1e6 * np.median(per_call):.1f} us "
          f"(min {1e6 * min(per_call):.1f})")


if __name__ == "__main__":
    main()
