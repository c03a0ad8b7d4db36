#!/usr/bin/env python3
"""Writes examples/tiny_cnn.onnx, Onyx's bundled example model (about 40 KB).

A small image classifier with a residual block, so that release at last use
has something to show: three 64×64 activations of 256 KiB each are alive at
once only around the residual Add, and the rest are freed as soon as their
last consumer has run.

    input [N, 3, 64, 64]
      Conv 3→16 3×3 → Relu → Conv 16→16 3×3 → Relu → Add(residual) → MaxPool 2×2
      → Conv 16→32 3×3 → Relu → GlobalAveragePool → Flatten → Gemm 32→10 → Softmax
    output "probabilities" [N, 10]

Weights are deterministic (numpy seed 0). Regenerate with:
    python3 examples/make_tiny_cnn.py
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    rng = np.random.default_rng(0)

    def weight(name, shape):
        fan_in = int(np.prod(shape[1:]))
        return numpy_helper.from_array((rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32), name)

    def bias(name, n):
        return numpy_helper.from_array((rng.standard_normal(n) * 0.01).astype(np.float32), name)

    inits = [
        weight("conv1.w", (16, 3, 3, 3)), bias("conv1.b", 16),
        weight("conv2.w", (16, 16, 3, 3)), bias("conv2.b", 16),
        weight("conv3.w", (32, 16, 3, 3)), bias("conv3.b", 32),
        weight("fc.w", (10, 32)), bias("fc.b", 10),
    ]
    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    nodes = [
        helper.make_node("Conv", ["input", "conv1.w", "conv1.b"], ["c1"], name="conv1", **conv),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "conv2.w", "conv2.b"], ["c2"], name="conv2", **conv),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Add", ["r1", "r2"], ["res"], name="residual"),
        helper.make_node("MaxPool", ["res"], ["p1"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv3.w", "conv3.b"], ["c3"], name="conv3", **conv),
        helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
        helper.make_node("GlobalAveragePool", ["r3"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 64, 64])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onyx-examples")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_cnn.onnx")
    onnx.save(model, out)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
