#!/usr/bin/env python3
"""The instruction mix of a kernel's longest loop in nvdisasm's SASS.

Reads `nvdisasm -c` output on stdin; prints the loop's instruction count
and its opcodes by count (loads and stores by width). The longest loop is
the longest span from a backward branch's target to the branch: in a
flash kernel, its key loop. A static count (both sides of every branch),
for comparing two builds of one kernel, not a time.
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
