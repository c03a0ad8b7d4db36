#!/usr/bin/env python3
"""Generates the official ONNX backend node test suite into a cache folder.

The onnx wheel no longer ships the .pb test data, so the cases are generated
from the package's own test-case generators (onnx.backend.test.case.node),
in the same layout as onnx/backend/test/data/node:

    OUT/<case>/model.onnx
    OUT/<case>/test_data_set_N/input_K.pb, output_K.pb
    OUT/<case>/meta.json           {"rtol": .., "atol": ..}
    OUT/SUITE.json                 {"onnx": version, "cases": count}

Usage: fetch_node_suite.py OUT
"""

import json
import os
import shutil
import sys
import warnings


def write_value(path, value, type_proto, name):
    from onnx import TensorProto, numpy_helper

    if type_proto.HasField("map_type"):
        proto = numpy_helper.from_dict(value, name)
    elif type_proto.HasField("sequence_type"):
        proto = numpy_helper.from_list(value, name)
    elif type_proto.HasField("optional_type"):
        proto = numpy_helper.from_optional(value, name)
    elif isinstance(value, TensorProto):
        proto = value
    else:
        proto = numpy_helper.from_array(value, name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    import onnx
    from onnx.backend.test.case import node

    warnings.simplefilter("ignore")
    cases = node.collect_testcases(None)
    # A private temporary folder, so concurrent generators cannot collide.
    tmp = f"{out}.{os.getpid()}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for case in cases:
        case_dir = os.path.join(tmp, case.name)
        os.makedirs(case_dir)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        with open(os.path.join(case_dir, "meta.json"), "w") as f:
            json.dump({"rtol": case.rtol, "atol": case.atol}, f)
        graph = case.model.graph
        for i, (inputs, outputs) in enumerate(case.data_sets):
            ds = os.path.join(case_dir, f"test_data_set_{i}")
            os.makedirs(ds)
            for j, value in enumerate(inputs):
                info = graph.input[j]
                write_value(os.path.join(ds, f"input_{j}.pb"), value, info.type, info.name)
            for j, value in enumerate(outputs):
                info = graph.output[j]
                write_value(os.path.join(ds, f"output_{j}.pb"), value, info.type, info.name)
    with open(os.path.join(tmp, "SUITE.json"), "w") as f:
        json.dump({"onnx": onnx.__version__, "cases": len(cases)}, f)
    if os.path.exists(os.path.join(out, "SUITE.json")):
        shutil.rmtree(tmp)  # another generator finished first
    else:
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    print(f"wrote {len(cases)} node-suite cases from onnx {onnx.__version__} to {out}")


if __name__ == "__main__":
    main()
