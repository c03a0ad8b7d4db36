"""Default-domain ops onnxruntime checks here: depthwise and grouped Conv,
reductions over integers with axes as an input, and Range in every dtype."""

import numpy as np

from .common import F32, F64, I16, I32, I64, NUMPY, case

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




def fused_conv_cases():
    """com.microsoft FusedConv, the op Onyx's Conv + activation fusion makes:
    pointwise, full and depthwise convolutions with each activation
    onnxruntime's CPU kernel fuses (HardSwish, an Onyx extension, is checked
    on real models instead)."""
    def fused(name, x, w, group, activation, params=None, bias=True, **attrs):
        ins = [("x", F32, x), ("w", F32, w)] + ([("b", F32, [w[0]])] if bias else [])
        extra = {"activation_params": params} if params else {}
        return case(name, "FusedConv", ins, [("y", F32)],
                    dict(group=group, activation=activation, **extra, **attrs))
    return [
        fused("fused_conv_relu_pointwise", [2, 8, 5, 5], [16, 8, 1, 1], 1, "Relu"),
        fused("fused_conv_leaky_relu_3x3_pad1", [1, 3, 9, 9], [8, 3, 3, 3], 1, "LeakyRelu",
              params=[0.1], pads=[1, 1, 1, 1]),
        fused("fused_conv_hard_sigmoid_depthwise_stride2", [1, 4, 9, 8], [4, 1, 3, 3], 4,
              "HardSigmoid", params=[0.25, 0.4], strides=[2, 2], pads=[1, 1, 1, 1]),
        fused("fused_conv_sigmoid_without_bias", [1, 6, 7, 7], [6, 1, 5, 5], 6, "Sigmoid",
              bias=False, pads=[2, 2, 2, 2]),
        fused("fused_conv_tanh_grouped", [1, 4, 6, 6], [4, 2, 3, 3], 2, "Tanh"),
    ]


REDUCE_OPS = ["Sum", "Max", "Min", "Prod", "Mean", "L1", "L2", "LogSum", "LogSumExp", "SumSquare"]


def snake(name):
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in name).lstrip("_")


def reduce_input(op, shape):
    """Integer inputs whose results stay in range and do not sit on a rounding
    edge: onnxruntime truncates Mean, L2 and LogSum results toward zero, and
    computes LogSumExp's exp terms in the integer type, which agrees with the
    truncated exact value only when the non-maximal terms are negligible
    (values in {0, 5, 10})."""
    def gen(rng):
        if op == "Prod":
            return rng.choice([-2, -1, 1, 1, 2], size=shape)
        if op == "LogSum":
            return rng.integers(1, 10, size=shape)
        if op == "LogSumExp":
            return rng.choice([0, 5, 10], size=shape)
        return rng.integers(-9, 10, size=shape)
    return gen


def reduce_cases():
    """Reductions (opset 18: axes is an input) over int32 and int64, where
    onnxruntime's CPU kernels exist for every op. With noop_with_empty_axes=1
    and empty axes nothing is reduced but the elementwise part still applies
    (L1 gives |x|, SumSquare x*x, L2 |x|, LogSum trunc(log x)), as in onnx's
    reference implementation."""
    v = []
    shapes = {"Prod": [2, 3, 4]}
    for op in REDUCE_OPS:
        shape = shapes.get(op, [3, 4, 5])
        tag = f"reduce_{snake(op)}"
        for t, ttag, axes, kd, noop, what in (
                (I32, "int32", [1], 1, 0, "axes_1_keepdims"),
                (I64, "int64", [0, 2], 0, 0, "axes_0_2_no_keepdims"),
                (I32, "int32", [-1], 0, 0, "negative_axis_no_keepdims"),
                (I64, "int64", [], 1, 1, "empty_axes_noop"),
                (I32, "int32", [], 0, 0, "empty_axes_reduce_all")):
            vals = {"data": reduce_input(op, shape), "axes": np.array(axes, np.int64)}
            v.append(case(f"{tag}_{ttag}_{what}", f"Reduce{op}",
                          [("data", t, shape), ("axes", I64, [len(axes)])], [("reduced", t)],
                          {"keepdims": kd, "noop_with_empty_axes": noop}, domain="", opset=18,
                          values=vals))
    # int64 values and sums past 2**53: exact only when handled as integers.
    # onnxruntime 1.32's CPU ReduceSum rounds such int64 sums (by up to ~10
    # here), so that case takes NumPy's exact sum.
    big = {"data": lambda rng: rng.integers(-2**50, 2**50, size=[4, 6]) * 37 + 3,
           "axes": np.array([1], np.int64)}
    for op in ("Sum", "Max", "Min"):
        kw = dict(oracle=NUMPY, ref=lambda vals: [vals["data"].sum(axis=1)],
                  note="onnxruntime 1.32 CPU rounds int64 sums past 2**53") if op == "Sum" else {}
        v.append(case(f"reduce_{snake(op)}_int64_beyond_f64_mantissa", f"Reduce{op}",
                      [("data", I64, [4, 6]), ("axes", I64, [1])], [("reduced", I64)],
                      {"keepdims": 0}, domain="", opset=18, values=big, **kw))
    return v


def range_cases():
    """Range over every dtype onnxruntime's CPU kernel has (int16, int32,
    int64, float, double); scalars as 0-d inputs. The float cases avoid a
    (limit - start) / delta that lands near an integer, where the element
    count depends on rounding."""
    spec = [
        (I16, "int16_positive_delta", 2, 17, 3),
        (I16, "int16_negative_delta", 10, -5, -4),
        (I32, "int32_positive_delta", -3, 9, 2),
        (I32, "int32_negative_delta", 7, -7, -3),
        (I32, "int32_empty", 5, 5, 1),
        (I32, "int32_wrong_sign_empty", 0, 5, -1),
        (I64, "int64_positive_delta", 0, 10, 1),
        (I64, "int64_large_values", 2**40, 2**40 + 17, 4),
        (I64, "int64_negative_delta", -1, -20, -6),
        (F32, "float_fractional_delta", 0.5, 3.2, 0.25),
        (F32, "float_negative_delta", 1.0, -2.0, -0.75),
        (F32, "float_wrong_sign_empty", 1.0, 2.0, -0.5),
        (F64, "double_fractional_delta", -1.25, 2.0, 0.3),
        (F64, "double_negative_delta", 3.5, -1.0, -1.1),
    ]
    return [case(f"range_{tag}", "Range", [("start", t, []), ("limit", t, []), ("delta", t, [])],
                 [("output", t)], domain="", tol=(1e-6, 1e-6),
                 values={"start": np.array(a), "limit": np.array(b), "delta": np.array(d)})
            for t, tag, a, b, d in spec]
