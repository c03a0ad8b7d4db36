"""com.microsoft quantized ops: MatMulNBits, GatherBlockQuantized,
DynamicQuantizeLSTM. (QOrderedMatMul has only a CUDA kernel: no cases.)

Quantized weights are initializers, as in real models; one case per op feeds
them as graph inputs instead."""

import numpy as np

from .common import F16, F32, I4, I8, I32, I64, U4, U8, case


def pack(q, bits):
    """Packs integers < 2**bits along the last axis, low bits first; the last
    axis is padded with zeros to whole bytes."""
    per = 8 // bits
    q = np.asarray(q, np.uint8)
    pad = (-q.shape[-1]) % per
    q = np.concatenate([q, np.zeros(q.shape[:-1] + (pad,), np.uint8)], -1)
    q = q.reshape(q.shape[:-1] + (-1, per))
    out = np.zeros(q.shape[:-1], np.uint8)
    for i in range(per):
        out |= (q[..., i] << (bits * i)).astype(np.uint8)
    return out


def nbits_activation(shape, block):
    """A = k / 64 for integers |k| <= 127, with 127 / 64 at the start of every
    K block: accuracy_level 4 quantizes A to int8 per block (scale max|A| / 127),
    and this A quantizes exactly, so every accuracy level has the same answer."""
    def gen(rng):
        a = rng.integers(-127, 128, size=shape).astype(np.float32)
        a[..., ::block] = 127
        return a / 64
    return gen


def matmul_nbits_cases():
    """MatMulNBits: Y = A @ dequant(B)^T (+ bias). B is uint8 [N, k_blocks,
    blob_size], k_blocks = ceil(K / block_size), blob_size = block_size * bits / 8:
    row n's K weights, block after block, two 4-bit values a byte, the even k
    in the low nibble; the last block is zero-padded. scales [N, k_blocks] in
    A's dtype. zero_points: uint8 packed the same way along the block axis
    ([N, ceil(k_blocks * bits / 8)]), or unpacked in A's dtype [N, k_blocks];
    absent means 2**(bits - 1). w = (q - zero_point) * scale."""
    v = []

    def nb(name, k, bs, m=3, n=8, bits=4, zp=None, t=F32, acc=0, bias=False, a3d=False,
           weights_as_inputs=False):
        kb = -(-k // bs)

        def weights(rng):
            q = rng.integers(0, 2 ** bits, size=[n, kb * bs])
            return pack(q, bits).reshape(n, kb, bs * bits // 8)

        ashape = [2, m, k] if a3d else [m, k]
        ins = [("A", t, ashape), ("B", U8, [n, kb, bs * bits // 8]), ("scales", t, [n, kb])]
        vals = {"A": nbits_activation(ashape, bs), "B": weights,
                "scales": lambda rng: rng.uniform(0.05, 0.3, size=[n, kb])}
        if zp == "packed":
            ins.append(("zero_points", U8, [n, -(-kb * bits // 8)]))
            vals["zero_points"] = lambda rng: pack(rng.integers(0, 2 ** bits, size=[n, kb]), bits)
        elif zp == "float":
            ins.append(("zero_points", t, [n, kb]))
            vals["zero_points"] = lambda rng: rng.integers(0, 2 ** bits, size=[n, kb])
        else:
            ins.append(None)
        if bias:
            ins += [None, ("bias", t, [n])]
        while ins[-1] is None:
            ins.pop()
        consts = [] if weights_as_inputs else [i[0] for i in ins[1:] if i]
        attrs = {"K": k, "N": n, "bits": bits, "block_size": bs}
        if acc:
            attrs["accuracy_level"] = acc
        v.append(case(name, "MatMulNBits", ins, [("Y", t)], attrs, values=vals, consts=consts,
                      tol=(1e-2, 5e-2) if t == F16 else (1e-4, 1e-4)))

    nb("matmul_nbits_4bit_bs16", 64, 16)
    nb("matmul_nbits_4bit_bs32_zp_packed", 128, 32, zp="packed")
    nb("matmul_nbits_4bit_bs64", 128, 64)
    nb("matmul_nbits_4bit_bs128_zp_packed", 256, 128, zp="packed")
    nb("matmul_nbits_4bit_bs16_k40_partial_block_zp_packed", 40, 16, zp="packed")
    nb("matmul_nbits_4bit_bs64_k100_partial_block", 100, 64)
    nb("matmul_nbits_4bit_bs16_three_blocks_zp_packed", 48, 16, zp="packed")
    nb("matmul_nbits_4bit_bs32_zp_float", 64, 32, zp="float")
    nb("matmul_nbits_4bit_accuracy_level_4", 128, 32, acc=4)
    nb("matmul_nbits_4bit_accuracy_level_4_zp_packed", 128, 32, zp="packed", acc=4)
    nb("matmul_nbits_4bit_accuracy_level_4_partial_block", 40, 16, zp="packed", acc=4)
    nb("matmul_nbits_4bit_bias", 64, 32, bias=True)
    nb("matmul_nbits_4bit_zp_packed_bias", 64, 16, zp="packed", bias=True)
    nb("matmul_nbits_4bit_3d_input", 64, 32, a3d=True, zp="packed")
    nb("matmul_nbits_4bit_single_row", 64, 16, m=1, n=5)
    nb("matmul_nbits_4bit_weights_as_inputs", 64, 32, zp="packed", weights_as_inputs=True)
    nb("matmul_nbits_f16_4bit_bs32", 64, 32, t=F16)
    nb("matmul_nbits_f16_4bit_bs16_zp_packed", 64, 16, zp="packed", t=F16)
    nb("matmul_nbits_f16_4bit_zp_f16", 64, 32, zp="float", t=F16)
    nb("matmul_nbits_f16_4bit_accuracy_level_4", 64, 32, acc=4, t=F16)
    nb("matmul_nbits_f16_4bit_bias", 64, 32, bias=True, t=F16)
    nb("matmul_nbits_f16_4bit_k40_partial_block_zp_packed", 40, 16, zp="packed", t=F16)
    nb("matmul_nbits_f16_4bit_bs128", 128, 128, t=F16)
    nb("matmul_nbits_8bit_bs32_zp_packed", 64, 32, bits=8, zp="packed")
    nb("matmul_nbits_2bit_bs32_zp_packed", 64, 32, bits=2, zp="packed")
    return v


def gather_block_quantized_cases():
    """GatherBlockQuantized: Gather(dequant(data), indices, gather_axis).
    data int4/uint4 (one value per element; onnx packs two a byte, low nibble
    first) or uint8 (bits 2/4 values packed along the last axis, low bits first,
    and then gather_axis must be 0 and differ from quantize_axis). scales have
    data's rank, ceil(dim / block_size) on quantize_axis (of the logical,
    unpacked shape). zero_points: data's dtype, scales' shape (uint8: packed like
    data); absent means 0 for int4/uint4 and 2**(bits - 1) for uint8. An index
    outside [-s, s) gives zeros. data, scales and zero_points are initializers
    (onnxruntime's binding cannot feed int4)."""
    v = []

    def gbq(name, shape, dt, ga, qa, bs, idx, zp=False, t=F32, bits=4, itype=I64,
            data_as_input=False):
        r = len(shape)
        sshape = list(shape)
        sshape[qa % r] = -(-shape[qa % r] // bs)
        lo, hi = {I4: (-8, 8), U4: (0, 16)}.get(dt, (0, 2 ** bits))
        packed = dt == U8 and bits < 8
        dshape = shape[:-1] + [shape[-1] * bits // 8] if packed else shape

        def quant(s):
            return lambda rng: (pack(rng.integers(lo, hi, size=s), bits) if packed
                                else rng.integers(lo, hi, size=s))

        ins = [("data", dt, dshape), ("indices", itype, list(np.shape(idx))), ("scales", t, sshape)]
        vals = {"data": quant(shape), "indices": np.array(idx),
                "scales": lambda rng: rng.uniform(0.1, 1.0, size=sshape)}
        if zp:
            zshape = sshape[:-1] + [-(-sshape[-1] * bits // 8)] if packed else sshape
            ins.append(("zero_points", dt, zshape))
            vals["zero_points"] = quant(sshape)
        attrs = {"gather_axis": ga, "quantize_axis": qa, "block_size": bs}
        if dt == U8:
            attrs["bits"] = bits
        consts = [i[0] for i in ins if i[0] != "indices" and not (data_as_input and i[0] == "data")]
        four = dt in (I4, U4)
        v.append(case(name, "GatherBlockQuantized", ins, [("output", t)], attrs, values=vals,
                      consts=consts, opset=21 if four else 17, ir=10 if four else 8,
                      tol=(1e-3, 1e-3) if t == F16 else (1e-6, 1e-6)))

    gbq("gather_block_quantized_int4_gather_0_quantize_1", [6, 32], I4, 0, 1, 16, [[0, 5], [2, 2]])
    gbq("gather_block_quantized_int4_zero_points", [6, 32], I4, 0, 1, 16, [1, 3, 5], zp=True)
    gbq("gather_block_quantized_uint4_zero_points", [6, 32], U4, 0, 1, 16, [1, 3, 5], zp=True)
    gbq("gather_block_quantized_uint4_default_zero_point", [6, 32], U4, 0, 1, 16, [4, 0])
    gbq("gather_block_quantized_int4_gather_1_quantize_0", [32, 6], I4, 1, 0, 16, [4, 0], zp=True)
    gbq("gather_block_quantized_int4_3d_gather_1_quantize_2", [3, 4, 32], I4, 1, 2, 16, [3, 1],
        zp=True)
    gbq("gather_block_quantized_int4_3d_gather_2_quantize_1", [3, 32, 6], I4, 2, 1, 16, [5, 0])
    gbq("gather_block_quantized_int4_negative_quantize_axis_bs32", [6, 64], I4, 0, -1, 32, [1, 2],
        zp=True)
    gbq("gather_block_quantized_int4_partial_block", [6, 40], I4, 0, 1, 16, [1, 2], zp=True)
    gbq("gather_block_quantized_int4_negative_indices_int32", [6, 32], I4, 0, 1, 16, [-1, -6, 2],
        zp=True, itype=I32)
    gbq("gather_block_quantized_int4_out_of_range_index_gives_zeros", [6, 32], I4, 0, 1, 16,
        [7, 2], zp=True)
    gbq("gather_block_quantized_int4_f16", [6, 32], I4, 0, 1, 16, [1, 2], zp=True, t=F16)
    gbq("gather_block_quantized_uint8_4bit_default_zero_point", [6, 32], U8, 0, 1, 16, [1, 4])
    gbq("gather_block_quantized_uint8_4bit_zero_points", [6, 32], U8, 0, 1, 16, [[1], [4]], zp=True)
    gbq("gather_block_quantized_uint8_4bit_three_blocks_zero_points", [6, 48], U8, 0, 1, 16,
        [1, 4], zp=True)
    gbq("gather_block_quantized_uint8_4bit_bs32_f16", [5, 64], U8, 0, 1, 32, [0, 4, 4], zp=True,
        t=F16)
    gbq("gather_block_quantized_uint8_4bit_3d_quantize_2", [4, 3, 32], U8, 0, 2, 16, [3, 0],
        zp=True)
    gbq("gather_block_quantized_uint8_8bit_zero_points", [6, 32], U8, 0, 1, 16, [1, 4], zp=True,
        bits=8)
    gbq("gather_block_quantized_uint8_8bit_default_zero_point", [6, 32], U8, 0, 1, 32, [5], bits=8)
    gbq("gather_block_quantized_uint8_2bit_zero_points", [6, 32], U8, 0, 1, 16, [1, 4], zp=True,
        bits=2)
    gbq("gather_block_quantized_uint8_4bit_data_as_input", [6, 32], U8, 0, 1, 16, [2, 3], zp=True,
        data_as_input=True)
    return v


def lstm_case(name, wt, dirs=1, direction="forward", per_channel=False, extra=False, lens=None):
    s, b, i, h = 3, 2, 8, 4
    zshape = [dirs, 4 * h] if per_channel else [dirs]
    lo, hi = (-127, 128) if wt == I8 else (0, 256)
    zlo, zhi = (0, 1) if wt == I8 else (100, 156)

    def zero_point(rng):
        # onnxruntime's CPU kernel wants one zero point for all channels.
        return (np.full(zshape, rng.integers(zlo, zhi)) if per_channel
                else rng.integers(zlo, zhi, size=zshape))

    ins = [("X", F32, [s, b, i]), ("W", wt, [dirs, i, 4 * h]), ("R", wt, [dirs, h, 4 * h]),
           ("B", F32, [dirs, 8 * h]), ("sequence_lens", I32, [b]) if lens else None]
    vals = {"W": lambda rng: rng.integers(lo, hi, size=[dirs, i, 4 * h]),
            "R": lambda rng: rng.integers(lo, hi, size=[dirs, h, 4 * h]),
            "W_scale": lambda rng: rng.uniform(0.002, 0.01, size=zshape),
            "R_scale": lambda rng: rng.uniform(0.002, 0.01, size=zshape),
            "W_zero_point": zero_point, "R_zero_point": zero_point,
            "sequence_lens": np.array(lens or [], np.int32)}
    ins += ([("initial_h", F32, [dirs, b, h]), ("initial_c", F32, [dirs, b, h]),
             ("P", F32, [dirs, 3 * h])] if extra else [None, None, None])
    ins += [("W_scale", F32, zshape), ("W_zero_point", wt, zshape),
            ("R_scale", F32, zshape), ("R_zero_point", wt, zshape)]
    consts = ["W", "R", "W_scale", "W_zero_point", "R_scale", "R_zero_point"]
    return case(name, "DynamicQuantizeLSTM", ins, [("Y", F32), ("Y_h", F32), ("Y_c", F32)],
                {"hidden_size": h, "direction": direction}, values=vals, consts=consts,
                tol=(3e-2, 3e-2), note="X and H are quantized to uint8 at run time")


def lstm_cases():
    """DynamicQuantizeLSTM: ONNX LSTM (gates iofc) with W [D, input, 4 hidden]
    and R [D, hidden, 4 hidden] quantized (int8 or uint8, note the transposed
    layout against LSTM's [D, 4 hidden, input]), W_scale/W_zero_point [D] per
    tensor or [D, 4 hidden] per output channel. onnxruntime also quantizes X and
    H to uint8 at run time, so a float LSTM on the dequantized weights differs by
    ~1e-2: the tolerance allows for it. Per-channel zero points must all be equal
    (onnxruntime's CPU kernel refuses others); per-tensor ones may differ by
    direction."""
    return [
        lstm_case("dynamic_quantize_lstm_forward_int8", I8),
        lstm_case("dynamic_quantize_lstm_forward_uint8_zero_points", U8),
        lstm_case("dynamic_quantize_lstm_reverse_int8_per_channel", I8, direction="reverse",
                  per_channel=True),
        lstm_case("dynamic_quantize_lstm_bidirectional_uint8_per_channel_initial_state_peephole",
                  U8, dirs=2, direction="bidirectional", per_channel=True, extra=True),
        lstm_case("dynamic_quantize_lstm_forward_int8_sequence_lens", I8, lens=[3, 2]),
    ]
