#!/usr/bin/env python3
"""Writes a tiny Llama-shaped language-model decoder in the Optimum /
transformers.js "decoder with past" layout, with seeded random weights, built
with onnx.helper (no torch needed):

    tiny_decoder.py OUT.onnx [--layers 4] [--hidden 128] [--heads 4] [--kv-heads 2]
                    [--ffn 256] [--vocab 1024] [--seed 0] [--int4] [--fp16]

Inputs:  input_ids int64 [batch, seq], attention_mask int64 [batch, past + seq],
         position_ids int64 [batch, seq],
         past_key_values.N.key / .value float32 [batch, kv_heads, past, head_dim]
Outputs: logits float32 [batch, seq, vocab],
         present.N.key / .value float32 [batch, kv_heads, past + seq, head_dim]

The graph is written the way PyTorch's exporter writes a transformers decoder,
standard ops only: RMSNorm as Pow → ReduceMean → Add → Sqrt → Div → Mul;
rotary embeddings from position_ids (Cos, Sin, rotate-half through Slice and
Concat); heads reshaped with targets computed by Shape → Gather → Unsqueeze →
Concat; the KV cache grown by Concat; grouped-query heads repeated through
Unsqueeze → Expand → Reshape; the causal mask built from Range, the padding
mask and Where; eager attention (MatMul, scale, Add mask, Softmax, MatMul);
a SiLU-gated MLP. With --int4 the projections and the lm_head are com.microsoft
MatMulNBits (4 bits, block 32, with zero points), as onnxruntime's weight-only
quantizer writes them. With --fp16 every float is float16 (weights, cache,
logits; fp16.py). A decode step (seq 1) is hundreds of small nodes, so it
measures a runtime's per-node host cost: the benchmark of "Compiled schedules"
(benches/ort_cpu.py --preset tiny_decoder).
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fp16 import to_fp16  # noqa: E402
from int4 import matmul_nbits  # noqa: E402


class Builder:
    def __init__(self, seed, int4=False):
        self.nodes, self.inits, self.n = [], [], 0
        self.rng = np.random.default_rng(seed)
        self.int4 = int4

    def matmul(self, x, shape, hint, outputs=1):
        """x times a seeded [k, n] weight: MatMul, or MatMulNBits with --int4."""
        k, n = shape
        w = (self.rng.standard_normal(shape) / np.sqrt(k)).astype(np.float32)
        if not self.int4:
            return self.op("MatMul", [x, self.const(w, hint)], outputs=outputs)
        return matmul_nbits(self, x, w, hint, outputs=outputs)

    def name(self, hint):
        self.n += 1
        return f"/{hint}_{self.n}"

    def const(self, value, hint="c"):
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, shape, hint, scale=None):
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), hint)

    def op(self, op_type, inputs, outputs=1, domain=None, **attrs):
        base = self.name(op_type)
        outs = [f"{base}_out{i}" for i in range(outputs)] if isinstance(outputs, int) else outputs
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=base, domain=domain, **attrs))
        return outs[0] if len(outs) == 1 else outs

    def dim(self, x, axis):
        """Shape(x)[axis] as a 1-element int64 tensor, as exporters compute it."""
        shape = self.op("Shape", [x])
        return self.op("Unsqueeze", [self.op("Gather", [shape, self.const(np.int64(axis))], axis=0),
                                     self.const(np.array([0], np.int64))])

    def rms_norm(self, x, hidden, eps=1e-6):
        w = self.const(np.ones(hidden, np.float32) + 0.1 * self.rng.standard_normal(hidden).astype(np.float32), "norm")
        var = self.op("ReduceMean", [self.op("Pow", [x, self.const(np.float32(2.0))])], axes=[-1], keepdims=1)
        rms = self.op("Sqrt", [self.op("Add", [var, self.const(np.float32(eps))])])
        return self.op("Mul", [self.op("Div", [x, rms]), w])

    def heads(self, x, batch, seq, n, head_dim):
        """[b, s, n*d] → [b, n, s, d] with an exporter-style reshape target."""
        target = self.op("Concat", [batch, seq, self.const(np.array([n], np.int64)),
                                    self.const(np.array([head_dim], np.int64))], axis=0)
        return self.op("Transpose", [self.op("Reshape", [x, target])], perm=[0, 2, 1, 3])

    def rotate(self, x, cos, sin, head_dim):
        half = head_dim // 2
        x1 = self.op("Slice", [x, self.const(np.array([0], np.int64)), self.const(np.array([half], np.int64)),
                               self.const(np.array([-1], np.int64))])
        x2 = self.op("Slice", [x, self.const(np.array([half], np.int64)),
                               self.const(np.array([np.iinfo(np.int64).max], np.int64)),
                               self.const(np.array([-1], np.int64))])
        rotated = self.op("Concat", [self.op("Neg", [x2]), x1], axis=-1)
        return self.op("Add", [self.op("Mul", [x, cos]), self.op("Mul", [rotated, sin])])


def build(a):
    b = Builder(a.seed, a.int4)
    head_dim = a.hidden // a.heads
    rep = a.heads // a.kv_heads
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", a.vocab])]
    for i in range(a.layers):
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(
                f"past_key_values.{i}.{kv}", TensorProto.FLOAT,
                ["batch_size", a.kv_heads, "past_sequence_length", head_dim]))
            outputs.append(helper.make_tensor_value_info(
                f"present.{i}.{kv}", TensorProto.FLOAT,
                ["batch_size", a.kv_heads, "total_sequence_length", head_dim]))

    embed = b.weight([a.vocab, a.hidden], "embed", scale=0.5)
    x = b.op("Gather", [embed, "input_ids"], axis=0)
    batch, seq = b.dim("input_ids", 0), b.dim("input_ids", 1)
    total = b.dim("attention_mask", 1)

    # Causal mask [b, 1, s, t]: key j is visible to query i when j <= past + i and the key is not padding.
    past = b.op("Sub", [total, seq])
    zero, one = b.const(np.int64(0)), b.const(np.int64(1))
    rows = b.op("Add", [b.op("Range", [zero, b.op("Squeeze", [seq, b.const(np.array([0], np.int64))]), one]),
                        b.op("Squeeze", [past, b.const(np.array([0], np.int64))])])
    cols = b.op("Range", [zero, b.op("Squeeze", [total, b.const(np.array([0], np.int64))]), one])
    future = b.op("Greater", [b.op("Unsqueeze", [cols, b.const(np.array([0], np.int64))]),
                              b.op("Unsqueeze", [rows, b.const(np.array([1], np.int64))])])
    padding = b.op("Equal", [b.op("Unsqueeze", ["attention_mask", b.const(np.array([1, 2], np.int64))]),
                             b.const(np.int64(0))])
    hidden_mask = b.op("Or", [b.op("Unsqueeze", [future, b.const(np.array([0, 1], np.int64))]), padding])
    mask = b.op("Where", [hidden_mask, b.const(np.float32(-3.4028234663852886e38)), b.const(np.float32(0.0))])

    # Rotary tables [b, 1, s, head_dim] from position_ids.
    inv_freq = b.const((1.0 / (10000 ** (np.arange(0, head_dim, 2) / head_dim))).astype(np.float32), "inv_freq")
    pos = b.op("Unsqueeze", [b.op("Cast", ["position_ids"], to=TensorProto.FLOAT), b.const(np.array([-1], np.int64))])
    freqs = b.op("Mul", [pos, inv_freq])
    emb = b.op("Unsqueeze", [b.op("Concat", [freqs, freqs], axis=-1), b.const(np.array([1], np.int64))])
    cos, sin = b.op("Cos", [emb]), b.op("Sin", [emb])

    scale = b.const(np.float32(1.0 / np.sqrt(head_dim)))
    for i in range(a.layers):
        h = b.rms_norm(x, a.hidden)
        q = b.heads(b.matmul(h, [a.hidden, a.hidden], "q_proj"), batch, seq, a.heads, head_dim)
        k = b.heads(b.matmul(h, [a.hidden, a.kv_heads * head_dim], "k_proj"),
                    batch, seq, a.kv_heads, head_dim)
        v = b.heads(b.matmul(h, [a.hidden, a.kv_heads * head_dim], "v_proj"),
                    batch, seq, a.kv_heads, head_dim)
        q, k = b.rotate(q, cos, sin, head_dim), b.rotate(k, cos, sin, head_dim)
        k = b.op("Concat", [f"past_key_values.{i}.key", k], axis=2, outputs=[f"present.{i}.key"])
        v = b.op("Concat", [f"past_key_values.{i}.value", v], axis=2, outputs=[f"present.{i}.value"])

        def repeat(t):
            target = b.op("Concat", [batch, b.const(np.array([a.kv_heads, rep], np.int64)), total,
                                     b.const(np.array([head_dim], np.int64))], axis=0)
            flat = b.op("Concat", [batch, b.const(np.array([a.heads], np.int64)), total,
                                   b.const(np.array([head_dim], np.int64))], axis=0)
            wide = b.op("Expand", [b.op("Unsqueeze", [t, b.const(np.array([2], np.int64))]), target])
            return b.op("Reshape", [wide, flat])

        scores = b.op("Mul", [b.op("MatMul", [q, b.op("Transpose", [repeat(k)], perm=[0, 1, 3, 2])]), scale])
        probs = b.op("Softmax", [b.op("Add", [scores, mask])], axis=-1)
        ctx = b.op("Transpose", [b.op("MatMul", [probs, repeat(v)])], perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", [ctx, b.op("Concat", [batch, seq, b.const(np.array([a.hidden], np.int64))], axis=0)])
        x = b.op("Add", [x, b.matmul(ctx, [a.hidden, a.hidden], "o_proj")])

        h = b.rms_norm(x, a.hidden)
        gate = b.matmul(h, [a.hidden, a.ffn], "gate_proj")
        up = b.matmul(h, [a.hidden, a.ffn], "up_proj")
        act = b.op("Mul", [b.op("Mul", [gate, b.op("Sigmoid", [gate])]), up])
        x = b.op("Add", [x, b.matmul(act, [a.ffn, a.hidden], "down_proj")])

    b.matmul(b.rms_norm(x, a.hidden), [a.hidden, a.vocab], "lm_head", outputs=["logits"])
    graph = helper.make_graph(b.nodes, "tiny_decoder", inputs, outputs, b.inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)] if a.int4 else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name="onyx-tiny-decoder")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--int4", action="store_true")
    ap.add_argument("--fp16", action="store_true", help="float16 weights, cache and logits (fp16.py)")
    a = ap.parse_args()
    model = build(a)
    onnx.save(to_fp16(model) if a.fp16 else model, a.out)


if __name__ == "__main__":
    main()
