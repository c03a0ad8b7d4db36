#!/usr/bin/env python3
"""Generates conformance cases for onnxruntime's contrib ops (and other ops
outside the ONNX node suite) with onnxruntime CPU as the oracle, in the node
suite's layout:

    OUT/<case>/model.onnx
    OUT/<case>/test_data_set_0/input_K.pb, output_K.pb
    OUT/<case>/meta.json           {"rtol": .., "atol": .., "oracle": .., "note": ..}
    OUT/SUITE.json                 {"onnxruntime": version, "cases": count}

Each case is a one-node model built with onnx.helper (inputs that are weights
in real models, such as MatMulNBits' packed B, are initializers), run on
seeded random inputs. meta.json's "oracle" says where the expected outputs
come from:

    onnxruntime      onnxruntime's CPU execution provider, graph optimizations
                     off (bfloat16 values cross the Python binding as float32
                     through exact Cast nodes added to the oracle's copy only);
    onnxruntime-f32  onnxruntime CPU on the same node with float16/bfloat16
                     replaced by float32 and fed the (exact) half-precision
                     inputs, the outputs rounded back: for dtypes onnxruntime's
                     CPU kernels lack. Tolerances are looser, since a half-
                     precision implementation rounds intermediates;
    numpy            a NumPy reference in the case module: for ops or dtypes
                     that onnxruntime's CPU provider does not implement.

Where onnxruntime's schema is narrower than what exporters write (statistics
outputs declared float16 on float16 activations), the case is run with the
schema's types and the expected values are cast to the declared ones.

The cases live in ort_cases/ (one module per op family); new cases go at the
end of CASES so that the seeds (1000 + position) of the earlier ones stay put.

Usage: gen_ort_cases.py OUT
"""

import json
import os
import shutil
import sys

import onnxruntime as ort

from ort_cases import activations, attention, default_domain, norm, quant
from ort_cases.common import write_case


def all_cases():
    return (norm.skip_cases() + norm.simplified_cases() + default_domain.conv_cases()
            + activations.cases() + norm.cases() + attention.rotary_cases()
            + attention.attention_cases() + attention.mha_cases() + attention.gqa_cases()
            + quant.matmul_nbits_cases() + quant.gather_block_quantized_cases()
            + quant.lstm_cases() + default_domain.reduce_cases() + default_domain.range_cases())


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    tmp = f"{out}.{os.getpid()}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    cases = all_cases()
    names = [c["name"] for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        sys.exit(f"duplicate case names: {sorted(dup)}")
    for k, c in enumerate(cases):
        try:
            write_case(tmp, c, 1000 + k)
        except Exception as e:
            shutil.rmtree(tmp, ignore_errors=True)
            sys.exit(f"case {c['name']}: {e}")
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
