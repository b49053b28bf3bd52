#!/usr/bin/env python3
"""The instruction mix of a kernel's longest loop in nvdisasm's SASS.

Reads `nvdisasm -c` output on stdin; prints the loop's instruction count
and its opcodes by count (loads and stores by width). The longest loop is
the longest span from a backward branch's target to the branch: in a
flash kernel, its key loop. A static count (both sides of every branch),
for comparing two builds of one kernel, not a time. Then the loop's
global loads whose registers an instruction reads within EARLY
instructions: the warp waits for memory there (for a batch of loads read
together, once for the batch; alone, once for each load).
"""
import collections
import re
import sys


def main():
    labels, pending, rows = {}, [], []
    for line in sys.stdin:
        m = re.match(r"^\.(L_x_\d+):", line.strip())
        if m:
            pending.append(m.group(1))
            continue
        m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*)", line)
        if m:
            addr = int(m.group(1), 16)
            for name in pending:
                labels[name] = addr
            pending = []
            rows.append((addr, m.group(2), m.group(3)))
    loop = None
    for addr, op, rest in rows:
        t = re.search(r"\(\.?(L_x_\d+)\)", rest) if op.startswith("BRA") else None
        target = labels.get(t.group(1)) if t else None
        if target is not None and target < addr and (loop is None or addr - target > loop[1] - loop[0]):
            loop = (target, addr)
    if loop is None:
        print("no loop")
        return 1
    mix = collections.Counter()
    for addr, op, _ in rows:
        if loop[0] <= addr <= loop[1]:
            base = op.split(".")[0]
            mix[op if base in ("LDG", "STG", "LDS", "STS", "LDL", "STL") else base] += 1
    print(f"loop {sum(mix.values())} instructions:",
          " ".join(f"{k}={v}" for k, v in mix.most_common(20)))
    body = [(op, rest) for addr, op, rest in rows if loop[0] <= addr <= loop[1]]
    early = early_uses(body)
    print(f"loop global loads read within {EARLY} instructions: {len(early)}",
          " ".join(early[:8]))
    return 0


# A global load whose register another instruction reads this soon makes
# the warp wait there for memory (v36: a copy of each loaded V word right
# after its load, before the next row's loads, cost the int8 decode 27%).
# Counted along the loop's text (both sides of each branch), so a narrow
# path's loads show too, and a batch read together counts each load.
EARLY = 16


def registers(text):
    out = set()
    for reg, wide in re.findall(r"\bR(\d+)(\.64)?", text):
        out.update([int(reg), int(reg) + 1] if wide else [int(reg)])
    return out


def early_uses(body):
    """The loads of the loop whose registers an instruction reads within EARLY."""
    found = []
    for i, (op, rest) in enumerate(body):
        if not op.startswith("LDG"):
            continue
        dest = rest.split(",", 1)[0]
        loaded = registers(dest)
        if op.endswith(".64"):
            loaded |= {r + 1 for r in loaded}
        elif op.endswith(".128"):
            loaded |= {r + k for r in loaded for k in (1, 2, 3)}
        for k in range(1, min(EARLY, len(body) - 1) + 1):
            later_op, later = body[(i + k) % len(body)]
            parts = later.split(",", 1)
            reads = registers(later) if later_op.startswith(("ST", "RED", "ATOM")) \
                else registers(parts[1]) if len(parts) > 1 else set()
            if loaded & reads:
                found.append(f"{op}+{k}:{later_op}")
                break
            if loaded & registers(parts[0]):
                break  # written again before any read
    return found


if __name__ == "__main__":
    sys.exit(main())
