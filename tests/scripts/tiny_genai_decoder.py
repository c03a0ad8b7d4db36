#!/usr/bin/env python3
"""Writes a tiny Qwen2-shaped decoder in the layout of onnxruntime-genai's model
builder, with seeded random weights, built with onnx.helper (no torch needed),
and a genai_config.json beside it:

    tiny_genai_decoder.py OUT_DIR/model.onnx [--int4] [--fp16] [--layers 2] [--hidden 128]
                          [--heads 8] [--kv-heads 2] [--ffn 256] [--vocab 1024]
                          [--max-length 256] [--seed 0]

The graph is the builder's (onnxruntime-genai 0.18, `-e cpu`):
- inputs input_ids, attention_mask, past_key_values.N.key/value [b, kv, past, d];
  outputs logits, present.N.key/value;
- seqlens_k = ReduceSum(attention_mask) - 1 and total_sequence_length =
  Shape(attention_mask)[1], both int32, computed once;
- SimplifiedLayerNormalization first, then SkipSimplifiedLayerNormalization
  between blocks (its 4th output carries the residual);
- com.microsoft GroupQueryAttention with do_rotary=1 and cos/sin caches, q/k/v
  projections with biases (Qwen2);
- a SiLU-gated MLP; an untied lm_head (tied, a random model only repeats itself).
With --int4 every projection and the lm_head is a MatMulNBits (4 bits, block 32,
asymmetric, zero points) and the embedding a GatherBlockQuantized, as the builder
writes for `-p int4`; otherwise they are MatMul and Gather in float32. With
--fp16 every float becomes float16 (weights, scales, cache, logits), as `-p fp16`.
"""

import argparse
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fp16 import to_fp16  # noqa: E402
from int4 import BLOCK, matmul_nbits, quantize_rows  # noqa: E402
from tiny_decoder import Builder as Base  # noqa: E402


class Builder(Base):
    """tiny_decoder's builder, with biased projections and norm weights."""

    def linear(self, x, k, n, hint, bias=False, outputs=1):
        """x [.., k] times a [k, n] weight (MatMulNBits with --int4), plus a bias."""
        w = (self.rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        if self.int4:
            y = matmul_nbits(self, x, w, hint, outputs=outputs if not bias else 1, accuracy_level=4)
        else:
            y = self.op("MatMul", [x, self.const(w, hint)], outputs=outputs if not bias else 1)
        if bias:
            b = (0.1 * self.rng.standard_normal(n)).astype(np.float32)
            y = self.op("Add", [y, self.const(b, hint + "_bias")], outputs=outputs)
        return y

    def norm_weight(self, hidden):
        return self.const((1 + 0.1 * self.rng.standard_normal(hidden)).astype(np.float32), "norm")


def build(a):
    b = Builder(a.seed, a.int4)
    d = a.hidden // a.heads
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", a.vocab])]
    for i in range(a.layers):
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(
                # The last dim is symbolic, as onnxruntime-genai 0.18's builder writes
                # it (one export for plain and quantized caches): the head size
                # comes from genai_config.json.
                f"past_key_values.{i}.{kv}", TensorProto.FLOAT,
                ["batch_size", a.kv_heads, "past_sequence_length", "kv_cache_dim"]))
            outputs.append(helper.make_tensor_value_info(
                f"present.{i}.{kv}", TensorProto.FLOAT,
                ["batch_size", a.kv_heads, "total_sequence_length", "kv_cache_dim"]))

    embed = (0.5 * b.rng.standard_normal((a.vocab, a.hidden))).astype(np.float32)
    if a.int4:
        packed, scale, zp = quantize_rows(embed)
        x = b.op("GatherBlockQuantized", [b.const(packed, "embed"), "input_ids", b.const(scale, "embed_scales"),
                                          b.const(zp, "embed_zp")],
                 domain="com.microsoft", bits=4, block_size=BLOCK, gather_axis=0, quantize_axis=1)
    else:
        x = b.op("Gather", [b.const(embed, "embed"), "input_ids"], axis=0)

    # The builder's attention-mask subgraph, shared by every layer.
    seqlens = b.op("Cast", [b.op("Sub", [b.op("ReduceSum", ["attention_mask", b.const(np.array([1], np.int64))],
                                              keepdims=0), b.const(np.int64(1))])], to=TensorProto.INT32)
    total = b.op("Cast", [b.op("Gather", [b.op("Shape", ["attention_mask"]), b.const(np.int64(1))], axis=0)],
                 to=TensorProto.INT32)
    inv_freq = 1.0 / (1000000.0 ** (np.arange(0, d, 2) / d))
    freqs = np.outer(np.arange(a.max_length), inv_freq)
    cos, sin = b.const(np.cos(freqs).astype(np.float32), "cos_cache"), b.const(np.sin(freqs).astype(np.float32), "sin_cache")

    h = b.op("SimplifiedLayerNormalization", [x, b.norm_weight(a.hidden)], axis=-1, epsilon=1e-6, stash_type=1)
    residual = x
    for i in range(a.layers):
        q = b.linear(h, a.hidden, a.hidden, f"layers.{i}/attn/q_proj", bias=True)
        k = b.linear(h, a.hidden, a.kv_heads * d, f"layers.{i}/attn/k_proj", bias=True)
        v = b.linear(h, a.hidden, a.kv_heads * d, f"layers.{i}/attn/v_proj", bias=True)
        attn, _, _ = b.op("GroupQueryAttention",
                    [q, k, v, f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens, total, cos, sin],
                    outputs=[f"/model/layers.{i}/attn/output", f"present.{i}.key", f"present.{i}.value"],
                    domain="com.microsoft", num_heads=a.heads, kv_num_heads=a.kv_heads, do_rotary=1,
                    rotary_interleaved=0, local_window_size=-1, scale=float(1 / np.sqrt(d)))
        o = b.linear(attn, a.hidden, a.hidden, f"layers.{i}/attn/o_proj")
        h, _, _, residual = b.op("SkipSimplifiedLayerNormalization", [o, residual, b.norm_weight(a.hidden)],
                                 outputs=4, domain="com.microsoft", epsilon=1e-6)
        gate = b.linear(h, a.hidden, a.ffn, f"layers.{i}/mlp/gate_proj")
        up = b.linear(h, a.hidden, a.ffn, f"layers.{i}/mlp/up_proj")
        act = b.op("Mul", [b.op("Mul", [gate, b.op("Sigmoid", [gate])]), up])
        down = b.linear(act, a.ffn, a.hidden, f"layers.{i}/mlp/down_proj")
        h, _, _, residual = b.op("SkipSimplifiedLayerNormalization", [down, residual, b.norm_weight(a.hidden)],
                                 outputs=4, domain="com.microsoft", epsilon=1e-6)
    # Untied: with the embedding as lm_head, a random-weight model of this size
    # only repeats its last token (the residual stream is mostly the embedding).
    b.linear(h, a.hidden, a.vocab, "lm_head", outputs=["logits"])

    graph = helper.make_graph(b.nodes, "tiny_genai_decoder", inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                              producer_name="onyx-tiny-genai-decoder")
    model.ir_version = 10
    return model


def config(a):
    return {
        "model": {
            "bos_token_id": 1, "eos_token_id": [a.vocab - 1], "pad_token_id": 0, "context_length": a.max_length,
            "type": "qwen2", "vocab_size": a.vocab,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": "model.onnx", "head_size": a.hidden // a.heads, "hidden_size": a.hidden,
                "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "num_hidden_layers": a.layers,
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
            },
        },
        "search": {"do_sample": False, "max_length": a.max_length, "num_beams": 1, "past_present_share_buffer": False,
                   "temperature": 1.0, "top_k": 1, "top_p": 1.0, "repetition_penalty": 1.0},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--int4", action="store_true")
    ap.add_argument("--fp16", action="store_true", help="float16 weights, cache and logits (fp16.py)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    model = build(a)
    onnx.save(to_fp16(model) if a.fp16 else model, a.out)
    with open(os.path.join(os.path.dirname(os.path.abspath(a.out)), "genai_config.json"), "w") as f:
        json.dump(config(a), f, indent=2)


if __name__ == "__main__":
    main()
