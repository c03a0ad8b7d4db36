"""4-bit weight-only quantization as onnxruntime's MatMulNBits and GatherBlockQuantized
store it, for the generated test decoders (tiny_decoder.py --int4, tiny_genai_decoder.py)."""

import numpy as np

BLOCK = 32


def quantize_rows(w, block=BLOCK):
    """Rows of w [n, k] in 4-bit blocks along k: packed data [n, k/2] (low nibble
    first), scales [n, k/block], packed zero points [n, ceil(k/block / 2)]."""
    n, k = w.shape
    blocks = w.reshape(n, k // block, block)
    lo, hi = np.minimum(blocks.min(-1), 0), np.maximum(blocks.max(-1), 0)
    scale = np.where(hi > lo, (hi - lo) / 15, 1.0).astype(np.float32)
    zp = np.clip(np.round(-lo / scale), 0, 15).astype(np.uint8)
    q = np.clip(np.round(blocks / scale[..., None]) + zp[..., None], 0, 15).astype(np.uint8).reshape(n, k)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    nb = k // block
    zpad = np.zeros((n, nb + nb % 2), np.uint8)
    zpad[:, :nb] = zp
    zpacked = (zpad[:, 0::2] | (zpad[:, 1::2] << 4)).astype(np.uint8)
    return packed, scale, zpacked


def matmul_nbits(b, x, w, hint, outputs=1, **attrs):
    """x [.., k] times w [k, n] as a com.microsoft MatMulNBits node of builder `b`
    (with `const` and `op` methods): 4 bits, block 32, zero points."""
    k, n = w.shape
    packed, scale, zp = quantize_rows(w.T.copy())
    return b.op("MatMulNBits", [x, b.const(packed.reshape(n, k // BLOCK, BLOCK // 2), hint),
                                b.const(scale.reshape(-1), hint + "_scales"), b.const(zp.reshape(-1), hint + "_zp")],
                outputs=outputs, domain="com.microsoft", K=k, N=n, bits=4, block_size=BLOCK, **attrs)
