#!/usr/bin/env python3
"""PyTorch's side of the CUDA kernel benchmarks in BENCHMARKS.md, run in the same
call as Onyx's kernel_bench: a device-to-device copy and an f32 Add of N
elements (bytes read + written per second), and square matrix products in bf16
at 8192^3 and f16 at 4096^3 (TFLOP/s). Each figure is the median of 20 timed
repetitions (CUDA events) after 3 warm-ups, on random data. The products are
also timed as kernel_bench times Onyx's: 10 back-to-back calls per timed
repetition ("sustained"), since a GPU kept busy runs at lower clocks than one
that idles between single calls.

    torch_cuda.py [N]     (default 268435456)
"""

import json
import sys

import torch


def median_ms(fn, reps=20, calls=1):
    """Median milliseconds per call over `reps` timings of `calls` back-to-back calls."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return sorted(times)[len(times) // 2]


def matmul_tflops(dtype, n):
    a = torch.rand(n, n, device="cuda", dtype=dtype) * 2 - 1
    b = torch.rand(n, n, device="cuda", dtype=dtype) * 2 - 1
    c = torch.empty(n, n, device="cuda", dtype=dtype)
    ms = median_ms(lambda: torch.matmul(a, b, out=c))
    sustained = median_ms(lambda: torch.matmul(a, b, out=c), calls=10)
    flop = 2 * n ** 3
    return {"dtype": str(dtype).replace("torch.", ""), "n": n, "ms": ms, "tflops": flop / (ms / 1e3) / 1e12,
            "sustained_ms": sustained, "sustained_tflops": flop / (sustained / 1e3) / 1e12}


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 256 << 20
    x = torch.rand(n, device="cuda")
    y = torch.empty_like(x)
    copy = median_ms(lambda: y.copy_(x))
    z = torch.rand(n, device="cuda")
    add = median_ms(lambda: torch.add(x, z, out=y))
    del x, y, z
    print(json.dumps({
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "copy_bytes_per_s": 8 * n / (copy / 1e3),
        "add_bytes_per_s": 12 * n / (add / 1e3),
        "matmul": [matmul_tflops(torch.bfloat16, 8192), matmul_tflops(torch.float16, 4096)],
    }))


if __name__ == "__main__":
    main()
