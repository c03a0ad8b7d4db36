#!/usr/bin/env python3
"""Greedy generation on CUDA: `onyx generate` on onnxruntime-genai folders of a
Qwen2.5-0.5B-shaped model (random seeded weights), against Hugging Face
`transformers` `generate` on the same weights in bf16, eager and with a static
cache plus `torch.compile`, all in one run on the GPU machine.

    generate_cuda.py ONYX_BINARY [--prompt 128] [--new 256] [--layers 24]
                     [--precisions int4,fp16] [--no-compile]

Needs torch, transformers and onnxruntime-genai 0.18's builder (with onnxruntime
1.32) importable: carry their wheels and put them on PYTHONPATH (TOOLCHAIN.md).
The folders are built there with `-e cuda`. Every figure comes from a run after a
warm-up (Onyx's kernels compiled and cached, torch compiled); TTFT is the
prompt's step and the first token. Prints one JSON object per line and a table. Onyx runs twice per precision:
with its decode steps replayed as one CUDA graph each (the default), and
with --no-cuda-graph (node by node).
Also reported: the device's copy bandwidth (a 1 GiB device-to-device copy) and
physical_limit_fraction = decode tokens/s x (weight bytes / copy bandwidth), the
share of the bandwidth bound the decode rate reaches. Weight bytes are the
folder's .onnx and data files: the embedding table counts whole though a token
reads one row of it, so the fraction is overstated where the table is large.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def config(a):
    return Qwen2Config(hidden_size=896, num_hidden_layers=a.layers, num_attention_heads=14,
                       num_key_value_heads=2, intermediate_size=4864, vocab_size=151936,
                       max_position_embeddings=32768, tie_word_embeddings=True,
                       rope_theta=1000000.0, rms_norm_eps=1e-6)


def copy_bandwidth():
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        y.copy_(x)
    torch.cuda.synchronize()
    return 2 * 10 * x.numel() / (time.perf_counter() - t)


def build(hf, out, prec):
    if os.path.exists(os.path.join(out, "model.onnx")):
        return
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", hf, "-o", out,
                    "-p", prec, "-e", "cuda", "-c", out + "_cache"], check=True,
                   stdout=subprocess.DEVNULL)
    print(f"# built {prec} in {time.perf_counter() - t:.0f} s", file=sys.stderr)


def weight_bytes(folder):
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)
               if f.endswith((".onnx", ".data", ".onnx_data")))


def onyx(a, folder, prompt, extra=()):
    cmd = [a.onyx, "generate", os.path.join(folder, "model.onnx"), "--prompt-ids",
           ",".join(map(str, prompt)), "--max-new-tokens", str(a.new), "--stop-token=-1",
           "--device", "cuda", "--strict", "--json", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-2000:]}
    return json.loads(r.stdout)


def hf_generate(model, ids, new, **kw):
    kw.update(do_sample=False, min_new_tokens=new, max_new_tokens=new, pad_token_id=0)
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = model.generate(ids, **kw)
    torch.cuda.synchronize()
    return out, time.perf_counter() - t


def hf_run(model, ids, new, **kw):
    hf_generate(model, ids, new, **kw)  # warm-up (and compilation)
    hf_generate(model, ids, 1, **kw)
    _, first = hf_generate(model, ids, 1, **kw)
    torch.cuda.reset_peak_memory_stats()
    out, total = hf_generate(model, ids, new, **kw)
    return {"decode_tokens_per_s": (new - 1) / (total - first),
            "prefill_tokens_per_s": ids.shape[1] / first, "ttft_ms": first * 1e3,
            "peak_bytes": torch.cuda.max_memory_allocated(),
            "generated_ids": out[0, ids.shape[1]:].tolist()}


ANCHORS = {"eager": "transformers eager",
           "static": "transformers static cache + torch.compile"}


def anchor(a, hf, prompt):
    """One transformers anchor, printed as a JSON line."""
    model = Qwen2ForCausalLM.from_pretrained(hf, torch_dtype=torch.bfloat16).cuda().eval()
    ids = torch.tensor([prompt], device="cuda")
    # With a static cache, transformers compiles the forward itself
    # (generation_config.compile_config) for the decode steps.
    kw = {"cache_implementation": "static"} if a.anchor == "static" else {}
    r = hf_run(model, ids, a.new, **kw)
    print(json.dumps(r), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("onyx")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--precisions", default="int4,fp16")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--work", default="/tmp/qwen05")
    ap.add_argument("--anchor", choices=list(ANCHORS), help=argparse.SUPPRESS)
    a = ap.parse_args()
    torch.manual_seed(0)
    hf = os.path.join(a.work, "hf")
    if not os.path.exists(os.path.join(hf, "config.json")):
        Qwen2ForCausalLM(config(a)).half().save_pretrained(hf)
    prompt = torch.randint(2, 150000, (a.prompt,), generator=torch.Generator().manual_seed(1)).tolist()
    if a.anchor:
        return anchor(a, hf, prompt)
    bw = copy_bandwidth()
    rows = []
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "copy_bandwidth_GBps": bw / 1e9}))
    for prec in a.precisions.split(","):
        folder = os.path.join(a.work, prec)
        build(hf, folder, prec)
        onyx(a, folder, prompt)  # warm-up: kernels compiled into the cache
        for name, extra in [("onyx", ()), ("onyx --no-cuda-graph", ("--no-cuda-graph",))]:
            r = onyx(a, folder, prompt, extra)
            r.update(runtime=name, precision=prec, weight_bytes=weight_bytes(folder))
            if "decode_tokens_per_s" in r:
                per_token = r["weight_bytes"] / bw
                r["physical_limit_fraction"] = per_token * r["decode_tokens_per_s"]
            rows.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "generated_ids"}), flush=True)
    anchors = ["eager"] + ([] if a.no_compile else ["static"])
    for kind in anchors:
        # Each in its own process: a crash in one (torch.compile) loses only it.
        r = subprocess.run([sys.executable, __file__, a.onyx, "--anchor", kind, "--work", a.work,
                            "--prompt", str(a.prompt), "--new", str(a.new), "--layers", str(a.layers)],
                           capture_output=True, text=True)
        lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
        row = json.loads(lines[-1]) if r.returncode == 0 and lines else {
            "error": f"exit {r.returncode}: {r.stderr.strip()[-1500:]}"}
        row.update(runtime=ANCHORS[kind], precision="bf16")
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "generated_ids"}), flush=True)
    print(f"{'runtime':45} {'prec':5} {'decode tok/s':>12} {'prefill tok/s':>13} {'TTFT ms':>8} {'peak MB':>8}")
    for r in rows:
        if "error" in r:
            print(f"{r['runtime']:45} {r['precision']:5} error: {r['error'][-300:]}")
            continue
        peak = r.get("peak_bytes", r.get("memory", {}).get("peak_bytes", 0))
        print(f"{r['runtime']:45} {r['precision']:5} {r['decode_tokens_per_s']:12.1f} "
              f"{r['prefill_tokens_per_s']:13.1f} {r['ttft_ms']:8.1f} {peak / 1e6:8.0f}")


if __name__ == "__main__":
    main()
