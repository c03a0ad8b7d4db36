#!/usr/bin/env python3
"""Where a decode step's GPU time goes, kernel by kernel: Nsight Compute (`ncu`)
times every kernel of one node-by-node decode step of an onnxruntime-genai
folder (built by generate_cuda.py) and reads the DRAM bytes each one moved.

    decode_kernels.py ONYX_BINARY FOLDER [--cache 384] [--ncu PATH]

Unlike `onyx bench --profile`, which synchronizes after every node, ncu's
figures are the kernels' own durations (serialized, clocks left alone with
`--clock-control none`); their sum against the replayed step's time is what
launches and gaps cost. Prints one JSON object per kernel name (calls, total
µs, GB/s) and a last line with the totals.
"""

import argparse
import csv
import glob
import io
import json
import os
import shutil
import subprocess
import tempfile

from decode_step import inputs


def find_ncu(given):
    if given:
        return given
    found = shutil.which("ncu") or sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu")
                                          + glob.glob("/usr/local/cuda*/bin/ncu"))
    if not found:
        raise SystemExit("no ncu on this machine")
    return found if isinstance(found, str) else found[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("onyx")
    ap.add_argument("folder")
    ap.add_argument("--cache", type=int, default=384)
    ap.add_argument("--ncu")
    a = ap.parse_args()
    model = os.path.join(a.folder, "model.onnx")
    metrics = "gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum"
    with tempfile.TemporaryDirectory() as tmp:
        pairs = inputs(model, a.cache, tmp)
        # Three steps run: the first (which uploads and compiles) and two warm ones.
        cmd = [find_ncu(a.ncu), "--clock-control", "none", "--metrics", metrics, "--csv",
               "--print-units", "base", a.onyx, "bench", model, "--device", "cuda", "--strict",
               "--no-cuda-graph", "--warmup", "0", "--runs", "2", *pairs]
        r = subprocess.run(cmd, capture_output=True, text=True)
    rows = [l for l in r.stdout.splitlines() if l.startswith('"')]
    if r.returncode != 0 or not rows:
        raise SystemExit(f"ncu failed ({r.returncode}):\n{r.stderr[-2000:]}\n{r.stdout[-2000:]}")
    kernels = {}
    for row in csv.DictReader(io.StringIO("\n".join(rows))):
        k = kernels.setdefault(int(row["ID"]), {"name": row["Kernel Name"].split("(")[0]})
        k[row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
    ordered = [kernels[i] for i in sorted(kernels)]
    # The two warm steps launch the same kernels, so the step is the longest
    # tail that repeats just before itself (the first step may launch more).
    names = [k["name"] for k in ordered]
    n = next(n for n in range(len(names) // 2, 0, -1) if names[-n:] == names[-2 * n:-n])
    step = ordered[-n:]
    by = {}
    for k in step:
        b = by.setdefault(k["name"], {"kernel": k["name"], "calls": 0, "us": 0.0, "read_mb": 0.0})
        b["calls"] += 1
        b["us"] += k.get("gpu__time_duration.sum", 0) / 1e3
        b["read_mb"] += k.get("dram__bytes_read.sum", 0) / 1e6
    total = sum(b["us"] for b in by.values())
    for b in sorted(by.values(), key=lambda b: -b["us"]):
        b["share"] = round(b["us"] / total, 3)
        b["read_gb_per_s"] = round(b["read_mb"] / b["us"] * 1e3, 1) if b["us"] else None
        b["us"] = round(b["us"], 1)
        b["read_mb"] = round(b["read_mb"], 2)
        print(json.dumps(b))
    print(json.dumps({"kernels_in_step": len(step), "kernels_profiled": len(ordered),
                      "kernel_us": round(total, 1),
                      "read_mb": round(sum(b["read_mb"] for b in by.values()), 1)}))


if __name__ == "__main__":
    main()
