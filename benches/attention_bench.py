"""PyTorch's SDPA on the shapes of BERT-base's attention at batch 8, on the H200.

Prints one JSON line per dtype and head size: the median of 30 CUDA-event
timed calls of `F.scaled_dot_product_attention` on Q, K, V `[8, 12, S, D]`
with an additive mask `[8, 1, 1, S]`, and the mean of 100 calls back to back
(`benches/cuda/attention_harness.cu` times Onyx's kernels that way). Onyx's
fused Attention is also timed inside
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
    # Back to back: 100 calls between two events, as benches/cuda/attention_harness.cu times Onyx's kernels.
    start.record()
    for _ in range(100):
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    end.record()
    torch.cuda.synchronize()
    return times[len(times) // 2], start.elapsed_time(end) * 10.0


def main():
    for name, dtype in [("f16", torch.float16), ("bf16", torch.bfloat16)]:
        for s in [128, 512]:
            for d in [64, 128]:
                ms, b2b_us = torch_ms(dtype, s, d)
                print(json.dumps({"case": f"sdpa_{name}_s{s}_d{d}", "torch_sdpa_ms": round(ms, 4), "torch_sdpa_back_to_back_us": round(b2b_us, 2)}))


if __name__ == "__main__":
    main()
