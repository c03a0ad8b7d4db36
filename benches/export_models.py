#!/usr/bin/env python3
"""Exports real architectures with random weights to ONNX, for benchmarks on a
machine that has torch, torchvision and transformers but no network (the H200
device machine has them; see BENCHMARKS.md).

    export_models.py OUT [--small] [--fp16]

Writes OUT/bert_base.onnx (transformers BertModel, bert-base-uncased's config:
12 layers, hidden 768, 12 heads; inputs input_ids and attention_mask with
dynamic batch and sequence) and OUT/resnet50.onnx (torchvision ResNet-50,
dynamic batch). --small writes the same architectures shrunk (2 layers, hidden
128; ResNet-18 at 32 channels wide is not an option in torchvision, so
ResNet-18) for debugging elsewhere. --fp16 writes only OUT/bert_base_fp16.onnx: the same
BERT in half precision, exported on the GPU (for the CUDA backend). Weights are seeded, so the files are the
same on every run with the same package versions.
"""

import os
import sys

import torch


def export(model, args, path, input_names, output_names, dynamic_axes):
    model.eval()
    # The TorchScript exporter gives the classic op set (opset 17); the dynamo
    # exporter is the fallback where it is gone.
    try:
        torch.onnx.export(model, args, path, input_names=input_names,
                          output_names=output_names, dynamic_axes=dynamic_axes,
                          opset_version=17, dynamo=False)
    except Exception as e:  # noqa: BLE001 - report and try the other exporter
        print(f"{path}: TorchScript exporter failed ({e}); trying dynamo", file=sys.stderr)
        torch.onnx.export(model, args, path, input_names=input_names,
                          output_names=output_names, dynamic_axes=dynamic_axes,
                          opset_version=18, dynamo=True, external_data=False)
    print(f"{path}: {os.path.getsize(path)} bytes")


class Encoder(torch.nn.Module):
    """BertModel called with keyword arguments, returning plain tensors."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        o = self.model(input_ids=input_ids, attention_mask=attention_mask)
        return o.last_hidden_state, o.pooler_output


def bert(out, small):
    from transformers import BertConfig, BertModel
    cfg = BertConfig() if not small else BertConfig(
        hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
        vocab_size=1000)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = Encoder(BertModel(cfg))
    ids = torch.randint(0, cfg.vocab_size, (2, 16))
    mask = torch.ones_like(ids)
    dyn = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
           "last_hidden_state": {0: "batch", 1: "sequence"}, "pooler_output": {0: "batch"}}
    export(model, (ids, mask), os.path.join(out, "bert_base.onnx" if not small else "bert_small.onnx"),
           ["input_ids", "attention_mask"], ["last_hidden_state", "pooler_output"], dyn)


def bert_fp16(out):
    from transformers import BertConfig, BertModel
    cfg = BertConfig()
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = Encoder(BertModel(cfg).half().cuda())
    ids = torch.randint(0, cfg.vocab_size, (2, 16), device="cuda")
    mask = torch.ones_like(ids)
    dyn = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
           "last_hidden_state": {0: "batch", 1: "sequence"}, "pooler_output": {0: "batch"}}
    export(model, (ids, mask), os.path.join(out, "bert_base_fp16.onnx"),
           ["input_ids", "attention_mask"], ["last_hidden_state", "pooler_output"], dyn)


def resnet(out, small):
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18() if small else torchvision.models.resnet50()
    x = torch.randn(1, 3, 224, 224)
    name = "resnet18.onnx" if small else "resnet50.onnx"
    export(model, (x,), os.path.join(out, name), ["input"], ["logits"],
           {"input": {0: "batch"}, "logits": {0: "batch"}})


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    small = "--small" in sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    if "--fp16" in sys.argv[2:]:
        bert_fp16(out)
        return
    bert(out, small)
    resnet(out, small)


if __name__ == "__main__":
    main()
