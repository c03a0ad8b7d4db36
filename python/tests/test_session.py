"""The Python package against onnxruntime, the runtime its API copies."""

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onyx

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
TINY_CNN = os.path.join(ROOT, "examples", "tiny_cnn.onnx")


def feed_for(session):
    rng = np.random.default_rng(0)
    feed = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        feed[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feed


def test_tiny_cnn_matches_onnxruntime():
    s = onyx.InferenceSession(TINY_CNN)
    ref = ort.InferenceSession(TINY_CNN, providers=["CPUExecutionProvider"])
    feed = feed_for(s)
    got = s.run(None, feed)
    want = ref.run(None, feed)
    assert [o.name for o in s.get_outputs()] == [o.name for o in ref.get_outputs()]
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert s.get_providers() == ["cpu"]
    got[0][0, 0] = 1.0  # writable, as onnxruntime's outputs are
    m = s.last_memory
    assert 0 < m["peak_bytes"] <= m["no_release_bytes"] and m["live_set_bound_bytes"] > 0


def test_inputs_describe_names_types_and_symbolic_dims_as_onnxruntime_does():
    x = helper.make_tensor_value_info("x", TensorProto.INT64, ["batch", 3])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, ["batch", 3])
    g = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    s = onyx.InferenceSession(model, providers=["CPUExecutionProvider"])
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for a, b in zip(s.get_inputs() + s.get_outputs(), ref.get_inputs() + ref.get_outputs()):
        assert (a.name, a.type, a.shape) == (b.name, b.type, b.shape)
    (out,) = s.run(["y"], {"x": np.arange(6, dtype=np.int64).reshape(2, 3)})
    np.testing.assert_array_equal(out, -np.arange(6).reshape(2, 3))


def test_errors_are_exceptions_carrying_the_whole_chain():
    with pytest.raises(onyx.OnyxError, match="empty"):
        onyx.InferenceSession(b"")
    s = onyx.InferenceSession(TINY_CNN)
    name = s.get_inputs()[0].name
    with pytest.raises(onyx.OnyxError) as e:
        s.run(None, {name: np.zeros((1, 1, 2, 2), np.float32)})
    assert name in str(e.value) or "shape" in str(e.value)
    with pytest.raises(ValueError, match="unknown provider"):
        onyx.InferenceSession(TINY_CNN, providers=["TensorrtExecutionProvider"])


def test_the_quickstart_example_runs_and_agrees_with_onnxruntime():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "quickstart.py")],
                         capture_output=True, text=True, check=True).stdout
    assert "image 1: class" in out, out
    diff = float(out.split("largest difference from onnxruntime: ")[1].split()[0])
    assert diff < 1e-5, out
