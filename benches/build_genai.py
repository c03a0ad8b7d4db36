#!/usr/bin/env python3
"""Builds tiny onnxruntime-genai decoder folders (random Qwen2: hidden 256, 4 layers,
8 query and 2 KV heads, vocabulary 8,192) with onnxruntime-genai's model builder, int4
and fp32, for the CPU (`-e cpu`), as `genai_int4.tgz` and `genai_fp32.tgz` in OUT_DIR.

    build_genai.py OUT_DIR

Needs torch and transformers (the GPU machine has them) and onnxruntime-genai 0.18 with
onnxruntime 1.32 (carried there as wheels: ../shared/TOOLCHAIN.md). Each folder holds
model.onnx (GroupQueryAttention in its 12-input schema, MatMulNBits for int4,
SkipSimplifiedLayerNormalization), genai_config.json and tokenizer.json.
"""

import os
import subprocess
import sys

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

out = sys.argv[1]
torch.manual_seed(0)
cfg = Qwen2Config(hidden_size=256, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, intermediate_size=512, vocab_size=8192,
                  max_position_embeddings=512, tie_word_embeddings=True)
hf = "/tmp/genai_hf"
Qwen2ForCausalLM(cfg).eval().save_pretrained(hf)
for prec in ["int4", "fp32"]:
    d = f"/tmp/genai_{prec}"
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", hf, "-o", d,
                    "-p", prec, "-e", "cpu", "-c", "/tmp/genai_cache"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["tar", "czf", os.path.join(out, f"genai_{prec}.tgz"), "-C", d, "."], check=True)
