"""Flash against naive attention on every OpenCL device: TFLOP/s and GB/s
(bytes by the library's I/O model) against sequence length, one column of
panels per device, written to a PNG.

    python plot_sweep.py [--out sweep.png] [--seqlens 128,256,512,1024]
                         [--heads 4] [--head-dim 64] [--causal] [--device all]

Needs matplotlib (pip install matplotlib). The runs are flashcl-bench's
(flashcl.bench), so the same sweep from the command line gives the same
records.
"""
import argparse

import flashcl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="sweep.png")
    ap.add_argument("--seqlens", default="128,256,512,1024")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--device", default="all")
    a = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seqlens = [int(n) for n in a.seqlens.split(",")]
    records = []
    for n in seqlens:  # one bench per length: its progress bar shows each
        records += flashcl.bench(device=a.device, seqlen=n, heads=a.heads, head_dim=a.head_dim,
                                 causal=a.causal, algo="flash,naive", no_peaks=True)
    devices = sorted({r["device"] for r in records})
    fig, axes = plt.subplots(2, len(devices), figsize=(5.5 * len(devices), 7), squeeze=False)
    for col, dev in enumerate(devices):
        for row, (field, label) in enumerate((("tflops", "TFLOP/s"), ("gbps", "GB/s (model)"))):
            ax = axes[row][col]
            for algo, style in (("flash", "o-"), ("naive", "s--")):
                pts = sorted((r["seqlen_q"], r[field]) for r in records
                             if r["device"] == dev and r["algo"] == algo and r["status"] == "ok")
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=algo)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sequence length N")
            ax.set_ylabel(label)
            ax.grid(True, alpha=0.3)
            ax.legend()
            if row == 0:
                ax.set_title(f"{dev[:64]}\nH {a.heads}, d {a.head_dim}"
                             f"{', causal' if a.causal else ''}, f32 forward", fontsize=9)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}: {len(records)} runs on {len(devices)} device(s)")


if __name__ == "__main__":
    main()
