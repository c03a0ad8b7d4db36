#!/usr/bin/env python3
"""Compares two folders of .npy outputs written by `onyx run --output-dir`.

    compare_outputs.py EXPECTED_DIR ACTUAL_DIR

Prints, per output, the largest absolute difference over the expected
output's largest magnitude, and exits 1 if any exceeds 1e-3 or differs in
shape or dtype.
"""

import glob
import os
import sys

import numpy as np


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    worst = 0.0
    ok = True
    for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.npy"))):
        name = os.path.basename(path)
        e = np.load(path)
        a = np.load(os.path.join(sys.argv[2], name))
        if e.shape != a.shape or e.dtype != a.dtype:
            print(f"{name}: {a.dtype}{list(a.shape)} != expected {e.dtype}{list(e.shape)}")
            ok = False
            continue
        scale = float(np.max(np.abs(e.astype(np.float64)))) or 1.0
        d = float(np.max(np.abs(e.astype(np.float64) - a.astype(np.float64)))) / scale
        worst = max(worst, d)
        print(f"{name}: {list(e.shape)} max |diff| / scale = {d:.2e}")
    ok = ok and worst <= 1e-3
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
