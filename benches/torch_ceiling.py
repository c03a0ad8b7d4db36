#!/usr/bin/env python3
"""The GPU's ceilings measured through PyTorch (CUDA), for the denominators of
BENCHMARKS.md: a device-to-device copy of N f32 (bytes read + written per
second) and an f32 matrix product at n^3 with TF32 off (TFLOP/s). Each is the
median of 20 timed repetitions (CUDA events) after 3 warm-ups, on random data.

    torch_ceiling.py [N] [n]     (defaults 268435456 and 4096)
"""

import json
import sys

import torch


def median_ms(fn, reps=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 256 << 20
    mm = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    torch.backends.cuda.matmul.allow_tf32 = False
    x = torch.rand(n, device="cuda")
    y = torch.empty_like(x)
    copy = median_ms(lambda: y.copy_(x))
    z = torch.rand(n, device="cuda")
    add = median_ms(lambda: torch.add(x, z, out=y))
    a = torch.rand(mm, mm, device="cuda")
    b = torch.rand(mm, mm, device="cuda")
    c = torch.empty(mm, mm, device="cuda")
    matmul = median_ms(lambda: torch.matmul(a, b, out=c))
    print(json.dumps({
        "device": torch.cuda.get_device_name(),
        "copy_bytes_per_s": 8 * n / (copy / 1e3),
        "add_bytes_per_s": 12 * n / (add / 1e3),
        "matmul_f32_tflops": 2 * mm ** 3 / (matmul / 1e3) / 1e12,
    }))


if __name__ == "__main__":
    main()
