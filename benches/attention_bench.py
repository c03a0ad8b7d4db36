"""PyTorch's SDPA on the shapes of BERT-base's attention at batch 8, on the H200.

Prints one JSON line per dtype and head size: the median of 30 CUDA-event
timed calls of `F.scaled_dot_product_attention` on Q, K, V `[8, 12, S, D]`
with an additive mask `[8, 1, 1, S]`. Onyx's fused Attention is timed inside
the model (`onyx bench --profile` on BERT-base, BENCHMARKS.md): `onyx bench`
on a lone node would time the host copies of its inputs instead.

    python3 benches/attention_bench.py
"""
import json

import torch
import torch.nn.functional as F

B, H = 8, 12


def torch_ms(dtype, s, d):
    q, k, v = (torch.randn(B, H, s, d, device="cuda", dtype=dtype) for _ in range(3))
    mask = torch.zeros(B, 1, 1, s, device="cuda", dtype=dtype)
    for _ in range(5):
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(30):
        start.record()
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def main():
    for name, dtype in [("f16", torch.float16), ("bf16", torch.bfloat16)]:
        for s in [128, 512]:
            for d in [64, 128]:
                ms = torch_ms(dtype, s, d)
                print(json.dumps({"case": f"sdpa_{name}_s{s}_d{d}", "torch_sdpa_ms": round(ms, 4)}))


if __name__ == "__main__":
    main()
