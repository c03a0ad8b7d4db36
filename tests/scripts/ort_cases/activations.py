"""com.microsoft activations: Gelu (erf), FastGelu (tanh approximation,
optional bias added first), BiasGelu (Gelu(A + B)), QuickGelu (x * sigmoid(alpha
x), alpha 1.702 by default) and BiasAdd (X + bias + skip).

onnxruntime's CPU kernels for the Gelu family are float32 only, so the
float16 and bfloat16 cases use the ORT_F32 oracle. BiasAdd has no CPU kernel
(CUDA only) and uses a NumPy reference (float32 sums, rounded once)."""

import numpy as np

from .common import BF16, F16, F32, NUMPY, ORT_F32, TOL_BF16, TOL_F16, case


def wide(scale, shape):
    """Inputs in [-scale, scale), past the [-2, 2) default, for the tails."""
    return {"x": lambda rng: rng.uniform(-scale, scale, size=shape)}


def bias_add(vals):
    x, b, s = (vals[n].astype(np.float32) for n in ("x", "bias", "skip"))
    return [x + b + s]


def cases():
    v = [
        case("gelu_contrib", "Gelu", [("x", F32, [2, 3, 16])], [("y", F32)]),
        case("gelu_contrib_wide_range", "Gelu", [("x", F32, [4, 50])], [("y", F32)],
             values=wide(8, [4, 50])),
        case("fast_gelu", "FastGelu", [("x", F32, [2, 3, 16])], [("y", F32)]),
        case("fast_gelu_wide_range_4d", "FastGelu", [("x", F32, [2, 2, 3, 10])], [("y", F32)],
             values=wide(8, [2, 2, 3, 10])),
        case("fast_gelu_bias", "FastGelu", [("x", F32, [2, 3, 16]), ("bias", F32, [16])],
             [("y", F32)]),
        case("fast_gelu_bias_2d_odd_width", "FastGelu", [("x", F32, [5, 33]), ("bias", F32, [33])],
             [("y", F32)]),
        case("bias_gelu", "BiasGelu", [("a", F32, [2, 3, 16]), ("b", F32, [16])], [("c", F32)]),
        case("bias_gelu_2d_odd_width", "BiasGelu", [("a", F32, [7, 19]), ("b", F32, [19])],
             [("c", F32)]),
        case("quick_gelu_default_alpha", "QuickGelu", [("x", F32, [2, 3, 16])], [("y", F32)]),
        case("quick_gelu_alpha_1", "QuickGelu", [("x", F32, [2, 3, 16])], [("y", F32)],
             {"alpha": 1.0}),
        case("quick_gelu_alpha_negative_wide_range", "QuickGelu", [("x", F32, [3, 40])],
             [("y", F32)], {"alpha": -0.5}, values=wide(8, [3, 40])),
    ]
    for t, tag, tol in ((F16, "_f16", TOL_F16), (BF16, "_bf16", TOL_BF16)):
        kw = dict(tol=tol, oracle=ORT_F32)
        v += [
            case(f"gelu_contrib{tag}", "Gelu", [("x", t, [2, 3, 16])], [("y", t)], **kw),
            case(f"fast_gelu{tag}", "FastGelu", [("x", t, [2, 3, 16])], [("y", t)], **kw),
            case(f"fast_gelu_bias{tag}", "FastGelu", [("x", t, [2, 3, 16]), ("bias", t, [16])],
                 [("y", t)], **kw),
            case(f"bias_gelu{tag}", "BiasGelu", [("a", t, [2, 3, 16]), ("b", t, [16])], [("c", t)],
                 **kw),
            case(f"quick_gelu{tag}", "QuickGelu", [("x", t, [2, 3, 16])], [("y", t)], **kw),
        ]
    for t, tag, tol in ((F32, "", (1e-6, 1e-6)), (F16, "_f16", TOL_F16)):
        for n, s, c in ((f"bias_add{tag}", 4, 8), (f"bias_add_320_channels{tag}", 3, 320)):
            ins = [("x", t, [2, s, c]), ("bias", t, [c]), ("skip", t, [2, s, c])]
            v.append(case(n, "BiasAdd", ins, [("y", t)], tol=tol, oracle=NUMPY, ref=bias_add))
    return v
