#!/usr/bin/env python3
"""Joins flashcl-bench JSON with sdpa.py JSON from the same run and prints a
markdown table: per shape, flashcl's flash and naive TFLOP/s against
PyTorch's, and their ratio.

  python3 table.py flashcl.json sdpa_efficient.json [more sdpa json...]
"""
import json
import sys


def rate(tflops):
    """Two decimals, or three significant digits below 1 (CPU rates)."""
    return f"{tflops:.2f}" if tflops >= 1 else f"{tflops:.3g}"


def key(batch, heads, seqlen, head_dim, causal):
    return (batch, heads, seqlen, head_dim, bool(causal))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    bench = json.load(open(sys.argv[1]))
    refs = [json.load(open(p)) for p in sys.argv[2:]]
    gpu = [i for i, d in enumerate(bench["devices"]) if d.get("is_gpu")]
    rows = {}
    for r in bench["results"]:
        if gpu and r["device_index"] not in gpu:
            continue
        k = key(r["batch"], r["heads"], r["seqlen_q"], r["head_dim"], r["causal"])
        rows.setdefault(k, {})[(r["algo"], r["pass"], r["dtype"])] = r
    cols = sorted({c for row in rows.values() for c in row})
    ref_cols = [(f'torch {d["backend"]} {d["dtype"]} {d["pass"]}', {
        key(e["batch"], e["heads"], e["seqlen"], e["head_dim"], e["causal"]): e
        for e in d["results"]}) for d in refs]
    head = ["d", "causal", "B x N"] + [f"flashcl {a} {t} {p}" for a, p, t in cols]
    head += [name for name, _ in ref_cols]
    if ref_cols:
        head += [f"flash / {ref_cols[0][0]}"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for k in sorted(rows, key=lambda k: (k[3], k[4], k[2])):
        batch, heads, seqlen, head_dim, causal = k
        cells = [str(head_dim), "yes" if causal else "no", f"{batch} x {seqlen}"]
        flash = None
        for c in cols:
            r = rows[k].get(c)
            ok = r and r["status"] == "ok"
            cells.append(rate(r["tflops"]) if ok else (r["status"] if r else "-"))
            if ok and c[0] == "flash" and flash is None:
                flash = r["tflops"]
        ref0 = None
        for i, (_, table) in enumerate(ref_cols):
            e = table.get(k)
            ok = e and e.get("status") == "ok"
            cells.append(rate(e["tflops"]) if ok else "-")
            if i == 0 and ok:
                ref0 = e["tflops"]
        if ref_cols:
            cells.append(f"{flash / ref0:.2f}" if flash and ref0 else "-")
        print("| " + " | ".join(cells) + " |")
    print("\nTFLOP/s by flash-attn's convention (4·B·N²·H·d forward, halved when causal).")


if __name__ == "__main__":
    main()
