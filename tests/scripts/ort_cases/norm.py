"""Layer normalizations: com.microsoft SkipLayerNormalization and
SkipSimplifiedLayerNormalization, and SimplifiedLayerNormalization and
LayerNormalization (which onnxruntime registers in the default domain)."""

from .common import BF16, F16, F32, TOL_BF16, TOL_F16, case

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



def cases():
    """bfloat16 skip normalizations (onnxruntime's CPU kernels run bfloat16, so
    it is the oracle), more SimplifiedLayerNormalization variants, and
    LayerNormalization (opset 17, stash_type 1) with float32 Mean/InvStdDev on
    float16 and bfloat16 activations."""
    v = []
    for op, tag, extra in (("SkipLayerNormalization", "skip_layer_norm", [("beta", BF16, [16])]),
                           ("SkipSimplifiedLayerNormalization", "skip_simplified_layer_norm", [])):
        outs = [("output", BF16), ("mean", F32), ("inv_std_var", F32),
                ("input_skip_bias_sum", BF16)]
        base = [("input", BF16, [2, 3, 16]), ("skip", BF16, [2, 3, 16]), ("gamma", BF16, [16])]
        v += [
            case(f"{tag}_bf16", op, base + extra + [("bias", BF16, [16])], outs[:1], tol=TOL_BF16),
            case(f"{tag}_bf16_all_outputs", op, base + extra + [("bias", BF16, [16])], outs,
                 tol=TOL_BF16),
            case(f"{tag}_bf16_skip_broadcast_2d_no_bias", op,
                 [base[0], ("skip", BF16, [3, 16]), base[2]] + extra, outs, tol=TOL_BF16),
            case(f"{tag}_bf16_2d_input_sum_only", op,
                 [("input", BF16, [4, 32]), ("skip", BF16, [4, 32]), ("gamma", BF16, [32])],
                 [outs[0], None, None, outs[3]], tol=TOL_BF16),
        ]
    op = "SimplifiedLayerNormalization"
    v += [
        case("simplified_layer_norm_epsilon_2d", op, [("x", F32, [4, 24]), ("scale", F32, [24])],
             [("y", F32), ("inv_std_var", F32)], {"epsilon": 0.1}, domain=""),
        case("simplified_layer_norm_axis_negative_2", op,
             [("x", F32, [2, 3, 4, 5]), ("scale", F32, [4, 5])], [("y", F32), ("inv_std_var", F32)],
             {"axis": -2}, domain=""),
        case("simplified_layer_norm_bf16", op, [("x", BF16, [2, 3, 32]), ("scale", BF16, [32])],
             [("y", BF16), ("inv_std_var", F32)], domain="", tol=TOL_BF16),
        case("simplified_layer_norm_f16_wide_rows", op,
             [("x", F16, [2, 1024]), ("scale", F16, [1024])], [("y", F16)], domain="", tol=TOL_F16),
    ]
    op = "LayerNormalization"
    for t, tag, tol in ((F16, "f16", TOL_F16), (BF16, "bf16", TOL_BF16)):
        stats = [("y", t), ("mean", F32), ("inv_std_dev", F32)]
        v += [
            case(f"layer_norm_{tag}_stats_f32", op,
                 [("x", t, [2, 3, 16]), ("scale", t, [16]), ("b", t, [16])], stats,
                 {"stash_type": 1}, domain="", tol=tol),
            case(f"layer_norm_{tag}_axis_1_stats_f32", op,
                 [("x", t, [2, 3, 8]), ("scale", t, [3, 8]), ("b", t, [3, 8])], stats,
                 {"axis": 1, "stash_type": 1, "epsilon": 1e-3}, domain="", tol=tol),
            case(f"layer_norm_{tag}_no_bias_axis_negative_1", op,
                 [("x", t, [3, 2, 40]), ("scale", t, [40])], stats,
                 {"axis": -1, "stash_type": 1}, domain="", tol=tol),
            case(f"layer_norm_{tag}_y_only", op,
                 [("x", t, [5, 64]), ("scale", t, [64]), ("b", t, [64])], stats[:1],
                 {"stash_type": 1}, domain="", tol=tol),
        ]
    v.append(case("layer_norm_f16_mean_only", op,
                  [("x", F16, [2, 2, 16]), ("scale", F16, [16]), ("b", F16, [16])],
                  [("y", F16), ("mean", F32)], {"stash_type": 1}, domain="", tol=TOL_F16))
    return v
