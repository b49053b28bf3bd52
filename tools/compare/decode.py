#!/usr/bin/env python3
"""Times PyTorch's scaled_dot_product_attention on the decode shapes of a
flashcl-bench JSON file (one new query row per sequence against a cache,
GQA: --sweep-decode) on this machine's GPU, and prints a markdown table
joining both: ms, GB/s counting Q, K, V and O once, that as a share of the
copy bandwidth flashcl-bench measured in its run, and flashcl / PyTorch.
Each PyTorch sample is timed as flashcl-bench timed its own: one call from
an idle GPU, or N calls enqueued back to back (flashcl-bench
--back-to-back N, read from the JSON) with the time per call.

  python3 decode.py flashcl.json [--backend flash|efficient|math] [--out torch.json]

16-bit types run on the backend asked for (flash by default); f32 on MATH,
since the fused kernels refuse fp32 GQA decode. With one query row,
attention sees every key of the cache: is_causal stays False (PyTorch's
causal mask is top-left aligned).
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

# beside this file: the backends, types and timer of the prefill comparison
from sdpa import BACKENDS, DTYPES, time_ms

SIZES = {"f32": 4, "f16": 2, "bf16": 2}


def splits_of(plan):
    """The plan's key splits, and how they merge where it says ("in launch":
    the block's last split merges them in the same launch)."""
    splits = plan.get("splits", "-")
    return f"{splits} (in launch)" if plan.get("merge") == "last-split" else str(splits)


def moved_bytes(r):
    """Q, K, V and O once, in the storage type."""
    q = r["batch"] * r["seqlen_q"] * r["heads"] * r["head_dim"]
    kv = r["batch"] * r["seqlen_k"] * r["heads_kv"] * r["head_dim"]
    return (2 * q + 2 * kv) * SIZES[r["dtype"]]


def back_to_back_ms(fn, calls, warmup=3, repeat=20):
    """Median over samples of `calls` calls between two events, per call."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / calls)
    times.sort()
    return times[len(times) // 2]


def torch_ms(r, backend):
    dt = DTYPES[r["dtype"]]
    q = torch.randn(r["batch"], r["heads"], r["seqlen_q"], r["head_dim"], device="cuda", dtype=dt)
    k, v = (torch.randn(r["batch"], r["heads_kv"], r["seqlen_k"], r["head_dim"], device="cuda",
                        dtype=dt) for _ in range(2))
    name = "math" if r["dtype"] == "f32" else backend
    with sdpa_kernel(BACKENDS[name]), torch.no_grad():
        call = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        calls = r.get("calls_per_sample", 1)
        ms = back_to_back_ms(call, calls) if calls > 1 else time_ms(call, 3, 20, "cuda")[0]
    del q, k, v
    torch.cuda.empty_cache()
    return name, ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("flashcl_json")
    ap.add_argument("--backend", default="flash", choices=sorted(BACKENDS))
    ap.add_argument("--out")
    a = ap.parse_args()
    bench = json.load(open(a.flashcl_json))
    peaks = {d["index"]: d.get("peak_copy_gbps") for d in bench["devices"]}
    gpu = {d["index"] for d in bench["devices"] if d.get("is_gpu")}
    rows, out = [], []
    for r in bench["results"]:
        if r["device_index"] not in gpu or r["status"] != "ok" or r["algo"] != "flash":
            continue
        try:
            name, ms = torch_ms(r, a.backend)
            status = "ok"
        except RuntimeError as e:  # a backend that refuses the shape
            name, ms, status = a.backend, None, str(e).split("\n")[0][:80]
        gb = moved_bytes(r) / 1e9
        out.append({k: r[k] for k in ("batch", "heads", "heads_kv", "seqlen_q", "seqlen_k",
                                      "head_dim", "dtype")} | {"backend": name, "ms": ms,
                                                               "status": status})
        peak = peaks.get(r["device_index"])
        flash_gbps = gb / (r["ms_median"] * 1e-3)
        rows.append([r["dtype"], f'{r["batch"]} x {r["seqlen_k"]}', f'{r["heads"]}/{r["heads_kv"]}',
                     f'{r["ms_median"]:.3f}', f"{flash_gbps:.0f}",
                     f"{flash_gbps / peak:.0%}" if peak else "-", splits_of(r["plan"]),
                     f"{ms:.3f}" if ms else status, f"{gb / (ms * 1e-3):.0f}" if ms else "-",
                     name, f'{ms / r["ms_median"]:.2f}' if ms else "-"])
    print("| type | B x cache | Hq/Hkv | flashcl ms | GB/s | of copy peak | splits (merge) | "
          "torch ms | GB/s | backend | flashcl / torch (speed) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    calls = {r.get("calls_per_sample", 1) for r in bench["results"]}
    timing = ("each call timed alone from an idle GPU" if calls == {1} else
              "time per call of " + "/".join(map(str, sorted(calls))) +
              " calls enqueued back to back")
    print("\nGB/s count Q, K, V and O once; the copy peak is flashcl-bench's "
          f"(fcl_measure_peaks, read + write) in the same run. Both timed alike: {timing}.")
    if a.out:
        json.dump({"results": out}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
