#!/usr/bin/env python3
"""Generates conformance cases for onnxruntime's contrib ops (and other ops
outside the ONNX node suite) with onnxruntime CPU as the oracle, in the node
suite's layout:

    OUT/<case>/model.onnx
    OUT/<case>/test_data_set_0/input_K.pb, output_K.pb
    OUT/<case>/meta.json           {"rtol": .., "atol": .., "oracle": .., "note": ..}
    OUT/SUITE.json                 {"onnxruntime": version, "cases": count,
                                    "generator": fingerprint of these scripts}

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

"generator" is FNV-1a (64-bit, hex) over this script and ort_cases/*.py in
name order, each as its relative path, a NUL, its bytes and a NUL. The
conformance harness (tests/src/suite.rs) computes the same and regenerates a
suite whose fingerprint differs, so edited cases never run stale. An OUT that
is already current is left alone.

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
            + quant.lstm_cases() + default_domain.reduce_cases() + default_domain.range_cases()
            + default_domain.fused_conv_cases())


def generator_fingerprint():
    """See the module docstring; tests/src/suite.rs mirrors it."""
    here = os.path.dirname(os.path.abspath(__file__))
    modules = sorted(f"ort_cases/{n}" for n in os.listdir(os.path.join(here, "ort_cases"))
                     if n.endswith(".py"))
    h = 0xcbf29ce484222325
    for rel in ["gen_ort_cases.py"] + modules:
        with open(os.path.join(here, rel), "rb") as f:
            data = rel.encode() + b"\0" + f.read() + b"\0"
        for byte in data:
            h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def is_current(out, fingerprint):
    try:
        with open(os.path.join(out, "SUITE.json")) as f:
            return json.load(f).get("generator") == fingerprint
    except (OSError, ValueError):
        return False


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    fingerprint = generator_fingerprint()
    if is_current(out, fingerprint):
        print(f"{out} is current (generator {fingerprint})")
        return
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
        json.dump({"onnxruntime": ort.__version__, "cases": len(cases),
                   "generator": fingerprint}, f)
    if is_current(out, fingerprint):
        shutil.rmtree(tmp)  # another generator finished first
    else:
        # A stale suite is moved aside before the new one takes its place.
        old = f"{out}.{os.getpid()}.stale"
        if os.path.exists(out):
            os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    print(f"wrote {len(cases)} onnxruntime cases (onnxruntime {ort.__version__}) to {out}")


if __name__ == "__main__":
    main()
