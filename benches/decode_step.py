#!/usr/bin/env python3
"""Where a decode step goes on CUDA: one token of an onnxruntime-genai folder
(built by generate_cuda.py) against a full KV cache, timed with `onyx bench`
replayed as a CUDA graph, node by node, and profiled (synchronized after each
node, so small nodes read long; the replayed figure is the real step).

    decode_step.py ONYX_BINARY FOLDER [--cache 384] [--runs 200]

The inputs are written as .npy files: token 7, an attention mask of ones over
the cache, and zeroed past keys and values in the folder's dtype. Prints one
JSON object per line: replayed, eager, and the profile's per-op table.
"""

import argparse
import json
import os
import subprocess
import tempfile

import numpy as np
import onnx


def inputs(model, cache, out):
    """NAME=FILE pairs for every graph input at a cache of `cache` rows."""
    # The builder declares the cache's head dims symbolic: genai_config.json has them.
    config = os.path.join(os.path.dirname(model), "genai_config.json")
    decoder = json.load(open(config))["model"]["decoder"] if os.path.exists(config) else {}
    pairs = []
    for i in onnx.load(model, load_external_data=False).graph.input:
        t = i.type.tensor_type
        dt = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if i.name == "input_ids":
            x = np.full((1, 1), 7, dt)
        elif i.name == "attention_mask":
            x = np.ones((1, cache), dt)
        elif i.name == "position_ids":
            x = np.full((1, 1), cache - 1, dt)
        elif i.name.startswith("past_key_values"):
            kv = dims[1] or decoder["num_key_value_heads"]
            x = np.zeros((1, kv, cache, dims[3] or decoder["head_size"]), dt)
        else:
            raise SystemExit(f"no value for input {i.name}")
        path = os.path.join(out, i.name + ".npy")
        np.save(path, x)
        pairs += ["--input", f"{i.name}={path}"]
    return pairs


def bench(onyx, model, pairs, runs, *extra):
    cmd = [onyx, "bench", model, "--device", "cuda", "--strict", "--runs", str(runs), "--json",
           *pairs, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-1500:]}
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("onyx")
    ap.add_argument("folder")
    ap.add_argument("--cache", type=int, default=384)
    ap.add_argument("--runs", type=int, default=200)
    a = ap.parse_args()
    model = os.path.join(a.folder, "model.onnx")
    with tempfile.TemporaryDirectory() as tmp:
        pairs = inputs(model, a.cache, tmp)
        for name, extra in [("replayed", ()), ("eager", ("--no-cuda-graph",))]:
            r = bench(a.onyx, model, pairs, a.runs, *extra)
            print(json.dumps({"step": name, "cache": a.cache, "warm": r.get("warm"),
                              "cuda_graphs": r.get("cuda_graphs"), "error": r.get("error")}),
                  flush=True)
        r = bench(a.onyx, model, pairs, 5, "--no-cuda-graph", "--profile")
        p = r.get("profile") or {}
        print(json.dumps({"step": "profiled", "run_ms": p.get("run_ms"), "host": p.get("host"),
                          "by_op": (p.get("by_op") or [])[:12], "error": r.get("error")}),
              flush=True)


if __name__ == "__main__":
    main()
