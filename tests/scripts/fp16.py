"""Turns a float32 test model into float16 the way onnxruntime-genai's builder
writes `-p fp16` models: float initializers, float graph inputs and outputs
(the KV cache and the logits) and Cast targets become float16, values beyond
its range clipped to its finite extremes; integer parts and attributes such as
stash_type stay. Used by the tiny decoders' `--fp16`."""

import numpy as np
from onnx import TensorProto, numpy_helper


def to_fp16(model):
    g = model.graph
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            # Beyond float16's range (a mask's float32 minimum) becomes its
            # finite extreme, as transformers' float16 masks use finfo.min.
            a = np.clip(numpy_helper.to_array(t), -65504.0, 65504.0)
            half = numpy_helper.from_array(a.astype(np.float16), t.name)
            g.initializer[i].CopyFrom(half)
    for v in list(g.input) + list(g.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    for n in g.node:
        if n.op_type == "Cast":
            for a in n.attribute:
                if a.name == "to" and a.i == TensorProto.FLOAT:
                    a.i = TensorProto.FLOAT16
    return model
