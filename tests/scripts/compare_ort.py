#!/usr/bin/env python3
"""Runs one model through onnxruntime (CPU) and through `onyx run` on the same
inputs, and compares every output.

    compare_ort.py --onyx target/debug/onyx --model m.onnx [--dim NAME=N ...]
                   [--shape INPUT=AxBxC ...] [--range INPUT=LO:HI ...] [--ones INPUT ...] [--rtol 1e-4]
                   [--device cpu] [--strict] [--work DIR] [--json]

Inputs are generated deterministically from the declared shapes (symbolic
dims from --dim, else 1): floats uniform in [-1, 1), integers in [LO, HI)
(default [0, 100)), --ones inputs filled with 1 (attention masks).

An output matches when every element satisfies
    |onyx - ort| <= rtol * (|ort| + 0.01 * max|ort| over the output)
that is, 1e-4 relative; elements below 1% of the output's largest magnitude
are held to 1e-6 of that magnitude instead (float32 rounding scales with the
terms that were summed, not with a result that cancelled to near zero).
Exit code 1 on mismatch.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

NP_TYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def safe_name(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".npy"


def make_inputs(sess, dims, ranges, ones, shapes, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = shapes.get(i.name) or [d if isinstance(d, int) else dims.get(d, 1) for d in i.shape]
        dtype = NP_TYPES[i.type]
        if i.name in ones:
            feeds[i.name] = np.ones(shape, dtype)
        elif np.issubdtype(dtype, np.floating):
            feeds[i.name] = rng.uniform(-1, 1, shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[i.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            lo, hi = ranges.get(i.name, (0, 100))
            feeds[i.name] = rng.integers(lo, hi, shape).astype(dtype)
    return feeds


def compare(name, got, ref, rtol):
    if got.shape != ref.shape:
        return {"output": name, "ok": False, "why": f"shape {got.shape} vs {ref.shape}"}
    if not np.issubdtype(ref.dtype, np.floating):
        ok = bool(np.array_equal(got, ref))
        return {"output": name, "ok": ok, "max_abs": float(np.abs(got.astype(np.float64) - ref).max(initial=0))}
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    scale = float(np.abs(r).max(initial=0.0))
    diff = np.abs(g - r)
    bound = rtol * (np.abs(r) + 0.01 * scale)
    ok = bool(np.all((diff <= bound) | (np.isnan(g) & np.isnan(r))))
    rel = float((diff / np.maximum(np.abs(r), 1e-30)).max(initial=0.0))
    return {
        "output": name,
        "ok": ok,
        "max_abs": float(diff.max(initial=0.0)),
        "max_rel": rel,
        "max_abs_over_scale": float(diff.max(initial=0.0) / scale) if scale else 0.0,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onyx", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dim", action="append", default=[])
    ap.add_argument("--range", action="append", default=[])
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--ones", action="append", default=[])
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--strict", action="store_true", help="forbid CPU fallback in onyx")
    ap.add_argument("--repeat", type=int, default=1,
                    help="onyx runs this many times and reports the last run (later runs follow the schedule)")
    ap.add_argument("--work")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    dims = {k: int(v) for k, v in (d.split("=") for d in a.dim)}
    ranges = {}
    for r in a.range:
        k, v = r.split("=")
        lo, hi = v.split(":")
        ranges[k] = (int(lo), int(hi))
    shapes = {}
    for sh in a.shape:
        k, v = sh.split("=")
        shapes[k] = [int(x) for x in v.split("x")] if v else []
    work = a.work or tempfile.mkdtemp(prefix="onyx-ort-")
    os.makedirs(work, exist_ok=True)

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    feeds = make_inputs(sess, dims, ranges, set(a.ones), shapes)
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))

    cmd = [a.onyx, "run", a.model, "--device", a.device, "--output-dir", os.path.join(work, "onyx"), "--json"]
    if a.strict:
        cmd.append("--strict")
    cmd += ["--repeat", str(a.repeat)]
    for name, value in feeds.items():
        path = os.path.join(work, "in_" + safe_name(name))
        np.save(path, value)
        cmd += ["--input", f"{name}={path}"]
    for d in a.dim:
        cmd += ["--dim", d]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stderr, file=sys.stderr)
        sys.exit(f"onyx run failed ({run.returncode})")
    summary = json.loads(run.stdout)

    results = []
    for name, r in ref.items():
        got = np.load(os.path.join(work, "onyx", safe_name(name)))
        results.append(compare(name, got, r, a.rtol))
    ok = all(r["ok"] for r in results)
    report = {"model": os.path.basename(a.model), "ok": ok, "outputs": results, "memory": summary["memory"],
              "latency_ms": summary["latency_ms"]}
    if a.json:
        print(json.dumps(report, indent=1))
    else:
        for r in results:
            print(("ok  " if r["ok"] else "BAD ") + json.dumps(r))
        m = summary["memory"]
        print(f"memory: peak {m['peak_bytes']} B with release, {m['no_release_bytes']} B without, "
              f"bound {m['live_set_bound_bytes']} B")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
