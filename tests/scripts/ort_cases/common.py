"""The case record, model building, the oracles and the writer shared by the
case modules. See gen_ort_cases.py for the layout written. ml_dtypes (bfloat16,
int4, uint4 arrays) comes with the onnx package."""

import json
import os

import ml_dtypes
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"
T = TensorProto
F32, F16, BF16, F64 = T.FLOAT, T.FLOAT16, T.BFLOAT16, T.DOUBLE
I8, U8, I16, I32, I64, I4, U4 = T.INT8, T.UINT8, T.INT16, T.INT32, T.INT64, T.INT4, T.UINT4

NP = {F32: np.float32, F16: np.float16, BF16: ml_dtypes.bfloat16, F64: np.float64, I8: np.int8,
      U8: np.uint8, I16: np.int16, I32: np.int32, I64: np.int64, I4: ml_dtypes.int4,
      U4: ml_dtypes.uint4}

# Tolerances (rtol, atol) for float32, float16 and bfloat16 outputs. The
# harness loosens them to at least 1e-3 (float16) and 1e-2 (bfloat16) itself.
TOL_F32 = (1e-4, 1e-5)
TOL_F16 = (1e-2, 1e-2)
TOL_BF16 = (4e-2, 4e-2)

# Oracles, recorded in meta.json as "oracle".
ORT = "onnxruntime"
# onnxruntime runs the same node with float16/bfloat16 replaced by float32, on
# the (exactly representable) half-precision inputs; outputs are rounded back.
ORT_F32 = "onnxruntime-f32"
NUMPY = "numpy"


def arr(rng, shape, dtype):
    """Seeded random values of an onnx dtype: floats in [-2, 2), integers in [-4, 4]."""
    if dtype in (F32, F16, BF16):
        x = rng.uniform(-2, 2, size=shape).astype(np.float32)
        return x.astype(NP[dtype]) if dtype != F32 else x
    if dtype == F64:
        return rng.uniform(-2, 2, size=shape)
    lo = 0 if dtype in (U8, U4) else -4
    return rng.integers(lo, 5, size=shape).astype(NP[dtype])


def case(name, op, inputs, outputs, attrs=None, domain=MS, declared=None, tol=TOL_F32, *,
         values=None, consts=(), oracle=ORT, ref=None, opset=17, ir=8, note=None):
    """One single-node case.

    inputs: [(name, onnx dtype, shape) or None for an omitted optional input];
    outputs: [(name, onnx dtype) or None]. `declared` overrides output dtypes in the
    saved model (values are cast to them). `values` gives an input's value (an
    array, or a function of the case's rng) instead of `arr`; inputs named in
    `consts` become initializers of the model instead of graph inputs. `oracle` is
    ORT, ORT_F32 or NUMPY; NUMPY needs `ref(vals) -> [outputs]`, vals by input name."""
    assert oracle != NUMPY or ref is not None
    return dict(name=name, op=op, inputs=inputs, outputs=outputs, attrs=attrs or {},
                domain=domain, declared=declared or {}, tol=tol, values=values or {},
                consts=set(consts), oracle=oracle, ref=ref, opset=opset, ir=ir, note=note)


def input_values(c, rng):
    vals = {}
    for n, t, s in filter(None, c["inputs"]):
        v = c["values"].get(n)
        if v is None:
            vals[n] = arr(rng, s, t)
        else:
            v = v(rng) if callable(v) else v
            vals[n] = np.asarray(v).astype(NP[t])
    return vals


def build(c, vals, declared, retype=None):
    """The model; `retype` maps dtypes (the ORT_F32 oracle's float16 -> float32)."""
    rt = (lambda t: retype.get(t, t)) if retype else (lambda t: t)
    node = helper.make_node(
        c["op"], [i[0] if i else "" for i in c["inputs"]],
        [o[0] if o else "" for o in c["outputs"]], domain=c["domain"], **c["attrs"])
    present = list(filter(None, c["inputs"]))
    consts = [numpy_helper.from_array(vals[n].astype(NP[rt(t)]), n)
              for n, t, _ in present if n in c["consts"]]
    graph = helper.make_graph(
        [node], c["name"],
        [helper.make_tensor_value_info(n, rt(t), list(vals[n].shape))
         for n, t, _ in present if n not in c["consts"]],
        [helper.make_tensor_value_info(o[0], rt(declared.get(k, o[1])), None)
         for k, o in enumerate(c["outputs"]) if o],
        consts)
    opsets = [helper.make_opsetid("", c["opset"])]
    if c["domain"] == MS:
        opsets.append(helper.make_opsetid(MS, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=c["ir"])


def with_bf16_casts(model):
    """onnxruntime's Python binding has no bfloat16 arrays: bfloat16 graph inputs
    become float32 inputs Cast to bfloat16 and bfloat16 outputs are Cast to
    float32 (both exact), inside the oracle's copy of the model only."""
    g = model.graph
    nodes = []
    for vi in g.input:
        if vi.type.tensor_type.elem_type == BF16:
            nodes.append(helper.make_node("Cast", [vi.name + "_f32"], [vi.name], to=BF16))
            vi.name += "_f32"
            vi.type.tensor_type.elem_type = F32
    for vi in g.output:
        if vi.type.tensor_type.elem_type == BF16:
            for n in g.node:
                n.output[:] = [o + "_bf16" if o == vi.name else o for o in n.output]
            nodes.append(helper.make_node("Cast", [vi.name + "_bf16"], [vi.name], to=F32))
            vi.type.tensor_type.elem_type = F32
    g.node.extend(nodes)
    return model


def ort_run(model, feeds, names):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    model = with_bf16_casts(model)
    bf16 = ml_dtypes.bfloat16
    feeds = {(n + "_f32" if v.dtype == bf16 else n): (v.astype(np.float32) if v.dtype == bf16 else v)
             for n, v in feeds.items()}
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(names, feeds)


def expected(c, vals):
    """The expected outputs by name, in the saved model's declared dtypes."""
    outs = [(k, o) for k, o in enumerate(c["outputs"]) if o]
    names = [o[0] for _, o in outs]
    feeds = {n: v for n, v in vals.items() if n not in c["consts"]}
    if c["oracle"] == ORT:
        res = ort_run(build(c, vals, {}), feeds, names)
    elif c["oracle"] == ORT_F32:
        half = {F16: F32, BF16: F32}
        up = {n: (v.astype(np.float32) if v.dtype in (np.float16, ml_dtypes.bfloat16) else v)
              for n, v in vals.items()}
        res = ort_run(build(c, up, {}, half), {n: up[n] for n in feeds}, names)
    else:
        res = c["ref"](vals)
    return {o[0]: np.asarray(r).astype(NP[c["declared"].get(k, o[1])])
            for (k, o), r in zip(outs, res)}


def write_case(root, c, seed):
    rng = np.random.default_rng(seed)
    vals = input_values(c, rng)
    results = expected(c, vals)
    for n, v in results.items():
        if v.dtype.kind == "f" or v.dtype in (np.float16, ml_dtypes.bfloat16):
            if not np.isfinite(v.astype(np.float64)).all():
                raise ValueError(f"{c['name']}: output {n} is not finite")
    d = os.path.join(root, c["name"])
    ds = os.path.join(d, "test_data_set_0")
    os.makedirs(ds)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(build(c, vals, c["declared"]).SerializeToString())
    meta = {"rtol": c["tol"][0], "atol": c["tol"][1], "oracle": c["oracle"]}
    if c["note"]:
        meta["note"] = c["note"]
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f)
    feeds = [(n, v) for n, v in vals.items() if n not in c["consts"]]
    for j, (n, v) in enumerate(feeds):
        with open(os.path.join(ds, f"input_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, n).SerializeToString())
    for j, (n, v) in enumerate(results.items()):
        with open(os.path.join(ds, f"output_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, n).SerializeToString())
