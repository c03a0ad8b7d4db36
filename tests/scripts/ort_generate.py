#!/usr/bin/env python3
"""The reference for Onyx's generation tests: a greedy loop on onnxruntime's CPU
provider over a decoder with past (Optimum or onnxruntime-genai layout, batch 1).

    ort_generate.py MODEL OUT_DIR [--new 64] [--prompt-len 8] [--seed 0] [--margin 1e-3]

Random-weight decoders have near-ties, where two runtimes that differ by rounding
pick different tokens. So the prompt is drawn from a seeded generator, and the
first draw (seed, seed+1, ...) whose top-1 / top-2 logit margin stays above
--margin at every step is kept. Writes OUT_DIR/reference.json (prompt, tokens,
the smallest margin, the seed that gave it) and OUT_DIR/logits.npy (the last
position's logits at every step, [steps, vocab], float32).

MatMulNBits' accuracy_level is set to 0, so onnxruntime keeps activations in
float as Onyx does.

Where the model folder has a genai_config.json (the onnxruntime-genai layout) and
the onnxruntime_genai package is installed, its own greedy search over the folder
must give the same tokens (with --genai, the package is required); reference.json
then says "onnxruntime_genai": true.
"""

import argparse
import json
import os

import numpy as np
import onnx
import onnxruntime as ort

NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
      "tensor(int32)": np.int32}


def session(path):
    model = onnx.load(path)
    for node in model.graph.node:
        for a in node.attribute:
            if a.name == "accuracy_level":
                a.i = 0
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def head_size(folder):
    with open(os.path.join(folder, "genai_config.json")) as f:
        return json.load(f)["model"]["decoder"]["head_size"]


def greedy(sess, prompt, steps, folder):
    inputs = {i.name: i for i in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs()]
    ids_t = NP[inputs["input_ids"].type]
    pasts = [n for n in inputs if n.startswith("past_key_values.")]
    feeds = {"input_ids": np.array([prompt], ids_t)}
    for p in pasts:
        shape = inputs[p].shape
        # onnxruntime-genai's builder declares the head size symbolic: its config gives it.
        head = shape[3] if isinstance(shape[3], int) else head_size(folder)
        feeds[p] = np.zeros((1, shape[1], 0, head), NP[inputs[p].type])
    tokens, rows, margins = [], [], []
    total = len(prompt)
    for step in range(steps):
        s = feeds["input_ids"].shape[1]
        if "attention_mask" in inputs:
            feeds["attention_mask"] = np.ones((1, total), NP[inputs["attention_mask"].type])
        if "position_ids" in inputs:
            feeds["position_ids"] = np.arange(total - s, total, dtype=NP[inputs["position_ids"].type])[None]
        out = dict(zip(names, sess.run(None, feeds)))
        last = out["logits"][0, -1].astype(np.float32)
        top2 = np.sort(last)[-2:]
        margins.append(float(top2[1] - top2[0]))
        rows.append(last)
        t = int(last.argmax())
        tokens.append(t)
        feeds = {"input_ids": np.array([[t]], ids_t)}
        for p in pasts:
            feeds[p] = out[p.replace("past_key_values.", "present.", 1)]
        total += 1
    return tokens, np.stack(rows), min(margins)


def genai_greedy(folder, prompt, steps):
    import onnxruntime_genai as og

    model = og.Model(folder)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + steps, do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens([prompt])
    out = []
    while not gen.is_done() and len(out) < steps:
        gen.generate_next_token()
        out.append(int(gen.get_next_tokens()[0]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--margin", type=float, default=1e-3)
    ap.add_argument("--genai", action="store_true", help="require onnxruntime_genai's check")
    a = ap.parse_args()
    sess = session(a.model)
    folder = os.path.dirname(os.path.abspath(a.model))
    vocab = sess.get_outputs()[0].shape[-1]
    for seed in range(a.seed, a.seed + 100):
        prompt = [int(x) for x in np.random.default_rng(seed).integers(0, vocab, a.prompt_len)]
        tokens, logits, margin = greedy(sess, prompt, a.new, folder)
        if margin > a.margin:
            break
    else:
        raise SystemExit(f"no prompt of 100 kept every top-1/top-2 margin above {a.margin}")
    report = {"prompt": prompt, "tokens": tokens, "min_margin": margin, "seed": seed}
    if os.path.exists(os.path.join(folder, "genai_config.json")):
        try:
            theirs = genai_greedy(folder, prompt, a.new)
        except ImportError:
            if a.genai:
                raise
        else:
            if theirs != tokens:
                raise SystemExit(f"onnxruntime_genai's greedy tokens {theirs} differ from the loop's {tokens}")
            report["onnxruntime_genai"] = True
    os.makedirs(a.out, exist_ok=True)
    np.save(os.path.join(a.out, "logits.npy"), logits)
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
