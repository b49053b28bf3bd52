#!/usr/bin/env python3
"""Compares two flashcl-bench JSON files of the same shapes, timed in one
run (a tree before and after a change): per result, TFLOP/s of each and
their ratio, then the range and geometric mean of the ratios per pass and
storage type.

  python3 ab.py before.json after.json [--label-a A] [--label-b B]
"""
import argparse
import json
import math

# What makes a result the same problem in both files; fields an older
# flashcl-bench did not write take the defaults it ran with.
FIELDS = ["device", "algo", "pass", "dtype", "batch", "heads", "heads_kv", "seqlen_q",
          "seqlen_k", "head_dim", "causal"]
DEFAULTS = {"window_left": -1, "window_right": -1, "softcap": 0, "alibi": False,
            "seqlens_q": None, "layout": "bshd"}


def shape_label(r):
    """B x N, or B x Nq x Nk where the queries are fewer than the keys (decode)."""
    if r["seqlen_q"] == r["seqlen_k"]:
        return f'{r["batch"]} x {r["seqlen_q"]}'
    return f'{r["batch"]} x {r["seqlen_q"]} x {r["seqlen_k"]}'


def key(r):
    k = tuple(r[f] for f in FIELDS)
    return k + tuple(json.dumps(r.get(f, v)) for f, v in DEFAULTS.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--label-a", default="before")
    ap.add_argument("--label-b", default="after")
    args = ap.parse_args()
    a = {key(r): r for r in json.load(open(args.a))["results"]}
    b = {key(r): r for r in json.load(open(args.b))["results"]}
    print(f"| pass | type | algo | d | causal | B x N | {args.label_a} | {args.label_b} | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = {}
    for k in sorted(a, key=lambda k: (k[2], k[3], k[1], k[9], k[10], k[4], k[7], k[8])):
        ra, rb = a[k], b.get(k)
        cells = [ra["pass"], ra["dtype"], ra["algo"], str(ra["head_dim"]),
                 "yes" if ra["causal"] else "no", shape_label(ra)]
        ok = rb is not None and ra["status"] == "ok" and rb["status"] == "ok"
        ta = f'{ra["tflops"]:.2f}' if ra["status"] == "ok" else ra["status"]
        tb = "-" if rb is None else f'{rb["tflops"]:.2f}' if rb["status"] == "ok" else rb["status"]
        ratio = rb["tflops"] / ra["tflops"] if ok and ra["tflops"] > 0 else None
        if ratio:
            ratios.setdefault((ra["pass"], ra["dtype"], ra["algo"]), []).append(ratio)
        print("| " + " | ".join(cells + [ta, tb, f"{ratio:.3f}" if ratio else "-"]) + " |")
    missing = [k for k in b if k not in a]
    if missing:
        print(f"\n{len(missing)} results of {args.b} have no match in {args.a}")
    print(f"\n| pass | type | algo | shapes | min | max | geomean |")
    print("|---|---|---|---|---|---|---|")
    for (p, t, al), rs in sorted(ratios.items()):
        g = math.exp(sum(math.log(r) for r in rs) / len(rs))
        print(f"| {p} | {t} | {al} | {len(rs)} | {min(rs):.3f} | {max(rs):.3f} | {g:.3f} |")


if __name__ == "__main__":
    main()
