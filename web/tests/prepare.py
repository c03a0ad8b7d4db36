#!/usr/bin/env python3
"""Builds the small models the browser tests need, into OUT (never committed).

    prepare.py OUT

- tiny_cnn_external.onnx + tiny_cnn_external.onnx.data: the bundled model with
  every initializer moved to an external-data file;
- fallback_gru.onnx: Relu -> GRU -> Relu, where GRU has no wgpu kernel, so a
  WebGPU session runs it on the CPU per node;
- broadcast_add.onnx: Add of two [N] vectors, which fails inside the node
  when the lengths differ (for errors carrying the node, op and backend).
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def external(out):
    model = onnx.load(os.path.join(os.path.dirname(__file__), "../../examples/tiny_cnn.onnx"))
    onnx.save_model(model, os.path.join(out, "tiny_cnn_external.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="tiny_cnn_external.onnx.data",
                    size_threshold=0)


def fallback(out):
    rng = np.random.default_rng(0)
    seq, batch, inp, hidden = 5, 1, 8, 6
    w = numpy_helper.from_array(rng.uniform(-0.5, 0.5, (1, 3 * hidden, inp)).astype(np.float32), "W")
    r = numpy_helper.from_array(rng.uniform(-0.5, 0.5, (1, 3 * hidden, hidden)).astype(np.float32), "R")
    nodes = [
        helper.make_node("Relu", ["x"], ["xr"], name="relu_in"),
        helper.make_node("GRU", ["xr", "W", "R"], ["y", "y_h"], name="gru", hidden_size=hidden),
        helper.make_node("Relu", ["y"], ["out"], name="relu_out"),
    ]
    graph = helper.make_graph(
        nodes, "fallback_gru",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, inp])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [seq, 1, batch, hidden])],
        [w, r])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, "fallback_gru.onnx"))


def broadcast(out):
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"], name="add_ab")], "broadcast_add",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N"]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["M"])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["K"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, "broadcast_add.onnx"))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    external(out)
    fallback(out)
    broadcast(out)


if __name__ == "__main__":
    main()
