#!/usr/bin/env python3
"""Generates conformance cases for onnxruntime's contrib ops (and other ops
outside the ONNX node suite) with onnxruntime CPU as the oracle, in the node
suite's layout:

    OUT/<case>/model.onnx
    OUT/<case>/test_data_set_0/input_K.pb, output_K.pb
    OUT/<case>/meta.json           {"rtol": .., "atol": ..}
    OUT/SUITE.json                 {"onnxruntime": version, "cases": count}

Each case is a one-node model built with onnx.helper, run by onnxruntime
(CPU execution provider, graph optimizations off) on seeded random inputs.
Where onnxruntime's schema is narrower than what exporters write (statistics
outputs declared float16 on float16 activations), the case is run with the
schema's types and the expected values are cast to the declared ones.

Usage: gen_ort_cases.py OUT
"""

import json
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"
F32, F16, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16


def arr(rng, shape, dtype):
    """Random values in [-2, 2) of an onnx dtype (bfloat16 as float32, cast in the model)."""
    x = rng.uniform(-2, 2, size=shape).astype(np.float32)
    return x.astype(np.float16) if dtype == F16 else x


def case(name, op, inputs, outputs, attrs=None, domain=MS, declared=None, tol=(1e-4, 1e-5)):
    """inputs: [(name, onnx dtype, shape) or None]; outputs: [(name, onnx dtype) or None].
    `declared` overrides output dtypes in the saved model (values are cast to them)."""
    return dict(name=name, op=op, inputs=inputs, outputs=outputs, attrs=attrs or {},
                domain=domain, declared=declared or {}, tol=tol)


def skip_cases():
    cases = []
    for simplified in (False, True):
        op = "SkipSimplifiedLayerNormalization" if simplified else "SkipLayerNormalization"
        tag = "skip_simplified_layer_norm" if simplified else "skip_layer_norm"
        bias_slot = 3 if simplified else 4

        def ins(dtype, shape, skip_shape, beta=True, bias=True):
            h = shape[-1]
            v = [("input", dtype, shape), ("skip", dtype, skip_shape), ("gamma", dtype, [h])]
            if not simplified:
                v.append(("beta", dtype, [h]) if beta else None)
            if bias:
                v.append(("bias", dtype, [h]))
            while v and v[-1] is None:
                v.pop()
            assert len(v) <= bias_slot + 1
            return v

        def outs(dtype, stats=True, total=True):
            o = [("output", dtype)]
            if stats or total:
                o += [("mean", F32) if stats else None, ("inv_std_var", F32) if stats else None]
            if total:
                o.append(("input_skip_bias_sum", dtype))
            return o

        cases += [
            case(f"{tag}_3d", op, ins(F32, [2, 3, 8], [2, 3, 8]), outs(F32, False, False)),
            case(f"{tag}_3d_all_outputs", op, ins(F32, [2, 3, 8], [2, 3, 8]), outs(F32)),
            case(f"{tag}_skip_broadcast_2d", op, ins(F32, [2, 3, 16], [3, 16]), outs(F32)),
            case(f"{tag}_skip_broadcast_batch1", op, ins(F32, [2, 3, 16], [1, 3, 16]), outs(F32)),
            case(f"{tag}_2d_input", op, ins(F32, [5, 32], [5, 32]), outs(F32)),
            case(f"{tag}_no_bias", op, ins(F32, [2, 4, 8], [2, 4, 8], bias=False), outs(F32)),
            case(f"{tag}_epsilon", op, ins(F32, [1, 2, 8], [1, 2, 8]), outs(F32),
                 attrs={"epsilon": 1e-3}),
            case(f"{tag}_wide_rows", op, ins(F32, [2, 2, 768], [2, 2, 768]), outs(F32)),
            case(f"{tag}_sum_only", op, ins(F32, [2, 3, 8], [2, 3, 8]), outs(F32, False, True)),
            case(f"{tag}_f16", op, ins(F16, [2, 3, 16], [2, 3, 16]), outs(F16), tol=(1e-3, 1e-3)),
            # Exporters declare the statistics in the activation dtype; onnxruntime's
            # schema says float. The values are the same, written as declared.
            case(f"{tag}_f16_stats_declared_f16", op, ins(F16, [2, 3, 16], [2, 3, 16]), outs(F16),
                 declared={1: F16, 2: F16}, tol=(1e-3, 1e-3)),
        ]
        if not simplified:
            cases += [
                case(f"{tag}_no_beta", op, ins(F32, [2, 3, 8], [2, 3, 8], beta=False), outs(F32)),
                case(f"{tag}_no_beta_no_bias", op,
                     ins(F32, [2, 3, 8], [2, 3, 8], beta=False, bias=False), outs(F32)),
            ]
    return cases


def simplified_cases():
    op = "SimplifiedLayerNormalization"
    return [
        case("simplified_layer_norm_last_axis", op, [("x", F32, [2, 3, 8]), ("scale", F32, [8])],
             [("y", F32)], domain=""),
        case("simplified_layer_norm_inv_std_var", op,
             [("x", F32, [2, 3, 8]), ("scale", F32, [8])], [("y", F32), ("inv_std_var", F32)],
             domain=""),
        case("simplified_layer_norm_axis_1", op, [("x", F32, [2, 3, 4]), ("scale", F32, [3, 4])],
             [("y", F32), ("inv_std_var", F32)], attrs={"axis": 1}, domain=""),
        case("simplified_layer_norm_f16", op, [("x", F16, [2, 5, 16]), ("scale", F16, [16])],
             [("y", F16), ("inv_std_var", F32)], domain="", tol=(1e-3, 1e-3)),
    ]


def conv_cases():
    """Depthwise and grouped convolutions (default domain): the CPU computes
    depthwise ones directly, so strides, dilations, asymmetric pads and channel
    multipliers are checked against onnxruntime here."""
    def conv(name, x, w, group, bias=True, **attrs):
        ins = [("x", F32, x), ("w", F32, w)] + ([("b", F32, [w[0]])] if bias else [])
        return case(name, "Conv", ins, [("y", F32)], dict(group=group, **attrs), domain="")
    return [
        conv("depthwise_conv_3x3_pad1", [1, 4, 9, 8], [4, 1, 3, 3], 4, bias=False, pads=[1, 1, 1, 1]),
        conv("depthwise_conv_multiplier_stride2_dilation2", [2, 3, 11, 10], [6, 1, 3, 3], 3,
             strides=[2, 2], dilations=[2, 2], pads=[2, 1, 1, 2]),
        conv("depthwise_conv_5x5_strides_2_1_asymmetric_pads", [1, 8, 12, 12], [8, 1, 5, 5], 8,
             strides=[2, 1], pads=[2, 2, 1, 2]),
        conv("depthwise_conv_kernel_wider_than_input", [1, 2, 3, 2], [2, 1, 5, 5], 2, pads=[2, 2, 2, 2]),
        conv("grouped_conv_two_channels_per_group", [1, 4, 6, 6], [4, 2, 3, 3], 2, pads=[1, 1, 1, 1]),
        # Thin convolutions the GPU runs directly, four output channels per invocation.
        conv("grouped_conv_eight_outputs_per_group_strided", [1, 4, 9, 9], [16, 2, 3, 3], 2,
             strides=[2, 2], pads=[1, 0, 1, 1]),
        conv("pointwise_conv_sixteen_outputs", [2, 8, 5, 5], [16, 8, 1, 1], 1),
    ]


def build(c, declared):
    node = helper.make_node(
        c["op"], [i[0] if i else "" for i in c["inputs"]], [o[0] if o else "" for o in c["outputs"]],
        domain=c["domain"], **c["attrs"])
    graph = helper.make_graph(
        [node], c["name"],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in filter(None, c["inputs"])],
        [helper.make_tensor_value_info(o[0], declared.get(k, o[1]), None)
         for k, o in enumerate(c["outputs"]) if o])
    opsets = [helper.make_opsetid("", 17)]
    if c["domain"] == MS:
        opsets.append(helper.make_opsetid(MS, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


NP = {F32: np.float32, F16: np.float16}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    tmp = f"{out}.{os.getpid()}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    cases = skip_cases() + simplified_cases() + conv_cases()
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for k, c in enumerate(cases):
        rng = np.random.default_rng(1000 + k)
        feeds = {n: arr(rng, s, t) for n, t, s in filter(None, c["inputs"])}
        model = build(c, {})
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        names = [o[0] for o in c["outputs"] if o]
        results = dict(zip(names, sess.run(names, feeds)))
        slots = {o[0]: k for k, o in enumerate(c["outputs"]) if o}
        for name, dtype in ((n, c["declared"].get(slots[n])) for n in names):
            if dtype is not None:
                results[name] = results[name].astype(NP[dtype])
        d = os.path.join(tmp, c["name"])
        ds = os.path.join(d, "test_data_set_0")
        os.makedirs(ds)
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(build(c, c["declared"]).SerializeToString())
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump({"rtol": c["tol"][0], "atol": c["tol"][1]}, f)
        for j, (n, v) in enumerate(feeds.items()):
            with open(os.path.join(ds, f"input_{j}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(v, n).SerializeToString())
        for j, n in enumerate(names):
            with open(os.path.join(ds, f"output_{j}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(results[n], n).SerializeToString())
    with open(os.path.join(tmp, "SUITE.json"), "w") as f:
        json.dump({"onnxruntime": ort.__version__, "cases": len(cases)}, f)
    if os.path.exists(os.path.join(out, "SUITE.json")):
        shutil.rmtree(tmp)  # another generator finished first
    else:
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    print(f"wrote {len(cases)} onnxruntime cases (onnxruntime {ort.__version__}) to {out}")


if __name__ == "__main__":
    main()
