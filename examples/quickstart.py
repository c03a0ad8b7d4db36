"""Onyx from Python in a screenful: the bundled classifier on a batch of two
images, next to onnxruntime's answer, and what the run held in memory.

    python examples/quickstart.py        (after `maturin develop` in python/)
"""

import os

import numpy as np

import onyx

model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_cnn.onnx")
session = onyx.InferenceSession(model, providers=["cuda", "wgpu", "cpu"])
for i in session.get_inputs():
    print(f"input  {i.name}: {i.type} {i.shape}")

# Two 64×64 RGB images: a gradient and its mirror.
gradient = np.tile(np.arange(64, dtype=np.float32) / 64, (3, 64, 1))
batch = np.stack([gradient, gradient[:, :, ::-1]])

(probs,) = session.run(["probabilities"], {"input": batch})
for i, row in enumerate(probs):
    print(f"image {i}: class {row.argmax()} (p = {row.max():.3f}) on {session.get_providers()[0]}")

try:
    import onnxruntime as ort

    (want,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"input": batch})
    print(f"largest difference from onnxruntime: {np.abs(probs - want).max():.2e}")
except ImportError:
    pass

m = session.last_memory
print(f"peak {m['peak_bytes'] // 1024} KiB, {m['no_release_bytes'] // 1024} KiB without release, "
      f"live-set bound {m['live_set_bound_bytes'] // 1024} KiB")
