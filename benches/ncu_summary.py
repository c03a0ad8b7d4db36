#!/usr/bin/env python3
"""GPU time per kernel from an Nsight Compute CSV (BENCHMARKS.md, CUDA).

    ncu --csv --metrics gpu__time_duration.sum onyx run MODEL --device cuda ... > k.csv
    ncu_summary.py k.csv [TOP]

Sums `gpu__time_duration` by kernel name (cuBLAS kernels keep their own
names) and prints the total and the TOP largest, one line each.
"""

import csv
import sys
from collections import defaultdict

UNIT = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 15
    lines = open(path, errors="replace").read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
    ms, count = defaultdict(float), defaultdict(int)
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        name = row["Kernel Name"].split("(")[0][:80]
        ms[name] += value * UNIT.get(row["Metric Unit"], 1e-6)
        count[name] += 1
    total = sum(ms.values())
    print(f"total {total:.3f} ms over {sum(count.values())} kernels")
    for name, t in sorted(ms.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{t:8.3f} ms {count[name]:5d}x  {name}")


if __name__ == "__main__":
    main()
