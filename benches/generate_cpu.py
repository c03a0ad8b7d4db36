#!/usr/bin/env python3
"""Greedy generation on the CPU: `onyx generate` against onnxruntime-genai's own
generator, on one onnxruntime-genai-layout folder, side by side in one run.

    generate_cpu.py ONYX_BINARY [--int4] [--layers 8] [--hidden 512] [--heads 8]
                    [--kv-heads 2] [--ffn 1408] [--vocab 32000] [--prompt 32]
                    [--new 128] [--threads 1] [--rounds 3]

The model is written by tests/scripts/tiny_genai_decoder.py (seeded random
weights) into a temporary folder. Each round runs both once; the medians of the
rounds are printed, with the ratio Onyx / onnxruntime-genai of decode tokens/s.
Both are greedy and run the model file as written (MatMulNBits accuracy_level 4:
onnxruntime-genai quantizes activations to int8 there, Onyx keeps them f32), and
the tokens they generate are compared.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime_genai as og

HERE = os.path.dirname(os.path.abspath(__file__))


def onyx_run(a, folder, prompt):
    out = subprocess.run([a.onyx, "generate", os.path.join(folder, "model.onnx"), "--prompt-ids",
                          ",".join(map(str, prompt)), "--max-new-tokens", str(a.new), "--stop-token=-1",
                          "--threads", str(a.threads), "--json"], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    return r["generated_ids"], r["decode_tokens_per_s"], r["prefill_tokens_per_s"], r["ttft_ms"]


def genai_run(model, a, prompt):
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + a.new, do_sample=False)
    gen = og.Generator(model, params)
    t0 = time.perf_counter()
    gen.append_tokens([prompt])
    gen.generate_next_token()
    first = time.perf_counter()
    out = [int(gen.get_next_tokens()[0])]
    while not gen.is_done() and len(out) < a.new:
        gen.generate_next_token()
        out.append(int(gen.get_next_tokens()[0]))
    end = time.perf_counter()
    return out, (len(out) - 1) / (end - first), len(prompt) / (first - t0), (first - t0) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("onyx")
    ap.add_argument("--int4", action="store_true")
    for k, v in [("layers", 8), ("hidden", 512), ("heads", 8), ("kv-heads", 2), ("ffn", 1408), ("vocab", 32000),
                 ("prompt", 32), ("new", 128), ("threads", 1), ("rounds", 3)]:
        ap.add_argument(f"--{k}", type=int, default=v)
    a = ap.parse_args()
    folder = tempfile.mkdtemp()
    gen_args = [sys.executable, os.path.join(HERE, "../tests/scripts/tiny_genai_decoder.py"),
                os.path.join(folder, "model.onnx"), "--layers", str(a.layers), "--hidden", str(a.hidden),
                "--heads", str(a.heads), "--kv-heads", str(a.kv_heads), "--ffn", str(a.ffn), "--vocab", str(a.vocab),
                "--max-length", str(a.prompt + a.new)]
    subprocess.run(gen_args + (["--int4"] if a.int4 else []), check=True)
    cfg_path = os.path.join(folder, "genai_config.json")
    cfg = json.load(open(cfg_path))
    cfg["model"]["decoder"]["session_options"]["intra_op_num_threads"] = a.threads
    json.dump(cfg, open(cfg_path, "w"))
    model = og.Model(folder)
    prompt = [int(x) for x in np.random.default_rng(0).integers(0, a.vocab, a.prompt)]
    rows = {"onyx": [], "onnxruntime-genai": []}
    same = []
    for _ in range(a.rounds):
        mine = onyx_run(a, folder, prompt)
        theirs = genai_run(model, a, prompt)
        rows["onyx"].append(mine[1:])
        rows["onnxruntime-genai"].append(theirs[1:])
        same.append(sum(x == y for x, y in zip(mine[0], theirs[0])))
    print(f"model: {'int4' if a.int4 else 'fp32'} {a.layers} layers, hidden {a.hidden}, {a.heads}/{a.kv_heads} heads, "
          f"ffn {a.ffn}, vocab {a.vocab}; prompt {a.prompt}, {a.new} new tokens, {a.threads} thread(s), "
          f"{a.rounds} rounds")
    med = {}
    for name, r in rows.items():
        med[name] = [statistics.median(x[i] for x in r) for i in range(3)]
        d, p, t = med[name]
        print(f"{name:18s} decode {d:8.1f} tokens/s   prefill {p:8.1f} tokens/s   ttft {t:7.2f} ms")
    print(f"decode tokens/s, onyx / onnxruntime-genai: {med['onyx'][0] / med['onnxruntime-genai'][0]:.2f}")
    print(f"tokens equal to onnxruntime-genai's (of {a.new}, per round): {same}")


if __name__ == "__main__":
    main()
