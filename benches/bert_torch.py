#!/usr/bin/env python3
"""PyTorch eager's side of the BERT-base fp16 comparison in BENCHMARKS.md.

    bert_torch.py DIR

Builds the same model as export_models.py --fp16 (BertModel with
bert-base-uncased's config, seed 0, fp16 on the GPU) and, for batch 8 and
sequence 128 and 512: saves the inputs as DIR/bert_{ids,mask}_8x{seq}.npy and
PyTorch's last_hidden_state as DIR/bert_torch_8x{seq}.npy (so Onyx runs on the
same inputs and is checked against it), then prints one JSON line per case and
attention implementation ("sdpa", PyTorch's default, and "eager", the one the
ONNX file was exported with): median latency of 30 timed forwards (CUDA events)
after 5 warm-ups; the same with the inputs copied from host memory and both
outputs copied back (wall clock, `ms_host_io`: what `onyx bench` times); and
torch.cuda.max_memory_allocated during one forward, in total and above the
resident weights.
"""

import json
import os
import sys
import time

import numpy as np
import torch


def median_ms(fn, reps=30):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def median_wall_ms(fn, reps=30):
    """Wall-clock median of fn(), which must return on the host (as `onyx bench` times runs)."""
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


def profile(model, ids, mask, label):
    """CUDA time per kernel over 10 forwards (torch.profiler), the largest first."""
    from torch.profiler import ProfilerActivity, profile as prof
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(10):
            model(input_ids=ids, attention_mask=mask)
        torch.cuda.synchronize()
    events = [e for e in p.key_averages() if e.device_time_total > 0]
    total = sum(e.self_device_time_total for e in events) / 10 / 1e3
    print(f"== torch kernels, {label}: {total:.3f} ms per forward ==")
    for e in sorted(events, key=lambda e: -e.self_device_time_total)[:12]:
        print(f"{e.self_device_time_total / 10 / 1e3:8.3f} ms {e.count // 10:5d}x  {e.key[:80]}")


def main():
    from transformers import BertConfig, BertModel
    out = sys.argv[1]
    profiling = "--profile" in sys.argv
    for attn in ["sdpa", "eager"]:
        cfg = BertConfig()
        cfg._attn_implementation = attn
        torch.manual_seed(0)
        model = BertModel(cfg).half().cuda().eval()
        torch.cuda.synchronize()
        weights = torch.cuda.memory_allocated()
        for seq in [128, 512]:
            g = torch.Generator().manual_seed(seq)
            ids = torch.randint(0, cfg.vocab_size, (8, seq), generator=g)
            mask = torch.ones_like(ids)
            if attn == "sdpa":
                np.save(os.path.join(out, f"bert_ids_8x{seq}.npy"), ids.numpy())
                np.save(os.path.join(out, f"bert_mask_8x{seq}.npy"), mask.numpy())
            ids_host, mask_host = ids, mask
            ids, mask = ids.cuda(), mask.cuda()
            with torch.inference_mode():
                fwd = lambda: model(input_ids=ids, attention_mask=mask)
                ms = median_ms(fwd)

                def host_to_host():
                    # What `onyx bench` times: inputs from host memory, outputs back in it.
                    o = model(input_ids=ids_host.cuda(), attention_mask=mask_host.cuda())
                    return o.last_hidden_state.cpu(), o.pooler_output.cpu()

                ms_host_io = median_wall_ms(host_to_host)
                if profiling:
                    profile(model, ids, mask, f"{attn} 8x{seq}")
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                o = fwd()
                torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated()
            if attn == "sdpa":
                np.save(os.path.join(out, f"bert_torch_8x{seq}.npy"),
                        o.last_hidden_state.float().cpu().numpy())
            print(json.dumps({"case": f"bert_fp16_8x{seq}", "torch_attention": attn, "ms": round(ms, 3),
                              "ms_host_io": round(ms_host_io, 3),
                              "max_memory_allocated": peak, "above_weights": peak - weights,
                              "weights": weights}), flush=True)
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
