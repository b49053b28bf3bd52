#!/usr/bin/env python3
"""Times PyTorch's scaled_dot_product_attention on flash-attn's benchmark
shapes (16k tokens, hidden 2048, head_dim 64 and 128, N 512..16k, causal and
not), so that flashcl-bench's numbers can be compared with it in one run on
the same GPU; with --device cpu on flashcl-bench's CPU sweep instead (2k
tokens, hidden 512, N 256..2048) on --threads cores. Writes JSON; FLOPs by
flash-attn's convention, as flashcl-bench counts them.

  python3 sdpa.py --backend efficient --dtype f32 --pass fwd --out sdpa.json
  python3 sdpa.py --device cpu --threads 16 --backend auto --out sdpa_cpu.json
"""
import argparse
import contextlib
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "math": SDPBackend.MATH,
    "auto": None,  # PyTorch's own choice (on a CPU its fused flash kernel)
}
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def flops(batch, heads, seqlen, head_dim, causal, pass_):
    f = 4.0 * batch * seqlen * seqlen * heads * head_dim
    if causal:
        f /= 2
    return {"fwd": f, "bwd": 2.5 * f, "fwdbwd": 3.5 * f}[pass_]


def time_ms(fn, warmup, repeat, device):
    for _ in range(warmup):
        fn()
    if device == "cpu":  # synchronous: the host clock times it
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times), min(times)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), min(times)


def chosen(backend):
    """The backend's context, or none for PyTorch's own choice."""
    return contextlib.nullcontext() if BACKENDS[backend] is None else sdpa_kernel(BACKENDS[backend])


def run(backend, dtype, pass_, tokens, hidden, min_seqlen, warmup, repeat, device):
    results = []
    for head_dim in (64, 128):
        for causal in (False, True):
            seqlen = min_seqlen
            while seqlen <= tokens:
                batch, heads = tokens // seqlen, hidden // head_dim
                shape = (batch, heads, seqlen, head_dim)
                grad = pass_ != "fwd"
                q, k, v = (torch.randn(shape, device=device, dtype=DTYPES[dtype],
                                       requires_grad=grad) for _ in range(3))
                dout = torch.randn(shape, device=device, dtype=DTYPES[dtype])
                entry = {"batch": batch, "heads": heads, "seqlen": seqlen,
                         "head_dim": head_dim, "causal": causal}
                try:
                    with chosen(backend):
                        if pass_ == "fwd":
                            def fn():
                                with torch.no_grad():
                                    F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        elif pass_ == "bwd":
                            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                            def fn():
                                torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
                        else:
                            def fn():
                                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                                torch.autograd.grad(out, (q, k, v), dout)
                        ms, ms_min = time_ms(fn, warmup, repeat, device)
                    entry.update(ms=ms, ms_min=ms_min,
                                 tflops=flops(batch, heads, seqlen, head_dim, causal, pass_)
                                 / (ms * 1e-3) / 1e12, status="ok")
                except RuntimeError as err:  # backend refuses the dtype/shape
                    entry.update(status="error", message=str(err).splitlines()[0])
                results.append(entry)
                del q, k, v, dout
                if device == "cuda":
                    torch.cuda.empty_cache()
                seqlen *= 2
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=BACKENDS, default="efficient")
    p.add_argument("--dtype", choices=DTYPES, default="f32")
    p.add_argument("--pass", dest="pass_", choices=("fwd", "bwd", "fwdbwd"), default="fwd")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads (0: PyTorch's default)")
    p.add_argument("--tokens", type=int, help="default 16384, on a CPU 2048")
    p.add_argument("--hidden", type=int, help="default 2048, on a CPU 512")
    p.add_argument("--min-seqlen", type=int, help="default 512, on a CPU 256")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    cpu = a.device == "cpu"
    tokens = a.tokens or (2048 if cpu else 16384)
    hidden = a.hidden or (512 if cpu else 2048)
    min_seqlen = a.min_seqlen or (256 if cpu else 512)
    if a.threads:
        torch.set_num_threads(a.threads)
    results = run(a.backend, a.dtype, a.pass_, tokens, hidden, min_seqlen, a.warmup, a.repeat,
                  a.device)
    name = (f"CPU, {torch.get_num_threads()} threads" if cpu else torch.cuda.get_device_name())
    doc = {"framework": f"torch {torch.__version__}", "device": name,
           "backend": a.backend, "dtype": a.dtype, "pass": a.pass_, "results": results}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
