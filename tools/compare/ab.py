#!/usr/bin/env python3
"""Compares two flashcl-bench JSON files of the same shapes, timed in one
run (a tree before and after a change): per result, TFLOP/s of each and
their ratio, then the range and geometric mean of the ratios per pass and
storage type.

  python3 ab.py before.json after.json [--label-a A] [--label-b B]
  python3 ab.py --best OUTDIR

--best compares every round ab.sh left in OUTDIR (before-N.json and
after-N.json): per result, each side's fastest sample over all its rounds
(ms_min), on a machine whose neighbours move single rounds by more than
the change being measured.
"""
import argparse
import glob
import json
import math
import os

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


def tflops_cell(r):
    """TFLOP/s with enough digits for a CPU's fractions, else the status."""
    if r["status"] != "ok":
        return r["status"]
    return f'{r["tflops"]:.2f}' if r["tflops"] >= 1 else f'{r["tflops"]:.4f}'


def key(r):
    k = tuple(r[f] for f in FIELDS)
    return k + tuple(json.dumps(r.get(f, v)) for f, v in DEFAULTS.items())


def load(paths):
    """Results by problem; over several files, the one with the fastest
    sample, its TFLOP/s recomputed from that sample."""
    best = {}
    for path in paths:
        for r in json.load(open(path))["results"]:
            k = key(r)
            if len(paths) > 1 and r["status"] == "ok":
                r = dict(r, tflops=r["flops"] / (r["ms_min"] * 1e9))
            old = best.get(k)
            if old is None or (r["status"] == "ok" and
                               (old["status"] != "ok" or r["tflops"] > old["tflops"])):
                best[k] = r
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", nargs="?")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--label-a", default="before")
    ap.add_argument("--label-b", default="after")
    ap.add_argument("--best", metavar="OUTDIR")
    args = ap.parse_args()
    if args.best:
        paths_a = sorted(glob.glob(os.path.join(args.best, "before-*.json")))
        paths_b = sorted(glob.glob(os.path.join(args.best, "after-*.json")))
        if not paths_a or not paths_b:
            ap.error(f"no before-N.json and after-N.json in {args.best}")
        args.b = f"{len(paths_b)} rounds in {args.best}"
        print(f"Best of {len(paths_a)} and {len(paths_b)} rounds (each side's fastest sample).\n")
    elif not args.a or not args.b:
        ap.error("two JSON files, or --best OUTDIR")
    else:
        paths_a, paths_b = [args.a], [args.b]
    a, b = load(paths_a), load(paths_b)
    print(f"| pass | type | algo | d | causal | B x N | {args.label_a} | {args.label_b} | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = {}
    for k in sorted(a, key=lambda k: (k[2], k[3], k[1], k[9], k[10], k[4], k[7], k[8])):
        ra, rb = a[k], b.get(k)
        cells = [ra["pass"], ra["dtype"], ra["algo"], str(ra["head_dim"]),
                 "yes" if ra["causal"] else "no", shape_label(ra)]
        ok = rb is not None and ra["status"] == "ok" and rb["status"] == "ok"
        ta, tb = tflops_cell(ra), "-" if rb is None else tflops_cell(rb)
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
