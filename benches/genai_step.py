#!/usr/bin/env python3
"""One prefill and one decode step of an onnxruntime-genai folder (benches/build_genai.py)
on onnxruntime's CPU provider and through Onyx's CLI, compared: logits and present KV.

    genai_step.py MODEL_DIR ONYX_BINARY [KV_HEADS HEAD_SIZE]

MatMulNBits' accuracy_level is set to 0 for onnxruntime (4 makes it quantize activations
to int8; Onyx keeps them f32), so the two compute the same thing.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

d, onyx = sys.argv[1], sys.argv[2]
kv, head = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (2, 32)
model = onnx.load(os.path.join(d, "model.onnx"))
for node in model.graph.node:
    for a in node.attribute:
        if a.name == "accuracy_level":
            a.i = 0
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
names = [o.name for o in sess.get_outputs()]
pasts = [i.name for i in sess.get_inputs() if i.name.startswith("past_key_values")]
tmp = tempfile.mkdtemp()


def onyx_run(feeds, tag):
    args = []
    for k, v in feeds.items():
        p = os.path.join(tmp, f"{tag}_{k}.npy")
        np.save(p, v)
        args += ["--input", f"{k}={p}"]
    out = os.path.join(tmp, tag)
    subprocess.run([onyx, "run", os.path.join(d, "model.onnx"), "--device", "cpu",
                    "--output-dir", out, *args], check=True, stdout=subprocess.DEVNULL)
    return {n: np.load(os.path.join(out, f"{n}.npy")) for n in names}


def compare(tag, got, want):
    for n in names:
        diff = float(np.abs(got[n].astype(np.float32) - want[n].astype(np.float32)).max())
        print(f"{tag} {n} {list(want[n].shape)} max|diff| {diff:.3g}")
    print(f"{tag} next token: onyx {int(got['logits'][0, -1].argmax())}, "
          f"onnxruntime {int(want['logits'][0, -1].argmax())}")


s = 7
prompt = np.random.default_rng(0).integers(0, 8192, size=(1, s)).astype(np.int64)
feeds = {"input_ids": prompt, "attention_mask": np.ones((1, s), np.int64)}
feeds.update({p: np.zeros((1, kv, 0, head), np.float32) for p in pasts})
want = dict(zip(names, sess.run(None, feeds)))
compare("prefill", onyx_run(feeds, "prefill"), want)
step = {"input_ids": np.array([[int(want["logits"][0, -1].argmax())]], np.int64),
        "attention_mask": np.ones((1, s + 1), np.int64)}
step.update({p: want[p.replace("past_key_values", "present")] for p in pasts})
compare("decode", onyx_run(step, "decode"), dict(zip(names, sess.run(None, step))))
