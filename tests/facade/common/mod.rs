//! Building small ONNX models in tests, through the same protobuf types the loader reads.
#![allow(dead_code)]

use onyx::DType;
use onyx::Tensor;
use onyx::core::onnx::pb;
use onyx::core::onnx::tensor_to_proto;
use prost::Message;

/// An attribute value for [`node`].
#[derive(Clone)]
pub enum A {
    I(i64),
    F(f32),
    Is(Vec<i64>),
    S(&'static str),
    G(Box<pb::GraphProto>),
}

pub fn node(
    op: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    attrs: Vec<(&str, A)>,
) -> pb::NodeProto {
    use pb::attribute_proto::AttributeType as T;
    let attribute = attrs
        .into_iter()
        .map(|(n, a)| {
            let mut p = pb::AttributeProto { name: Some(n.into()), ..Default::default() };
            match a {
                A::I(v) => (p.i, p.r#type) = (Some(v), Some(T::Int as i32)),
                A::F(v) => (p.f, p.r#type) = (Some(v), Some(T::Float as i32)),
                A::Is(v) => (p.ints, p.r#type) = (v, Some(T::Ints as i32)),
                A::S(v) => (p.s, p.r#type) = (Some(v.as_bytes().to_vec()), Some(T::String as i32)),
                A::G(g) => (p.g, p.r#type) = (Some(*g), Some(T::Graph as i32)),
            }
            p
        })
        .collect();
    pb::NodeProto {
        op_type: Some(op.into()),
        name: Some(name.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute,
        ..Default::default()
    }
}

/// A tensor value info; negative dims become symbols `d0`, `d1`, ….
pub fn value(name: &str, dtype: DType, dims: &[i64]) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{Dimension, dimension::Value as D};
    let dim = dims
        .iter()
        .enumerate()
        .map(|(i, &d)| Dimension {
            value: Some(if d >= 0 { D::DimValue(d) } else { D::DimParam(format!("d{i}")) }),
            ..Default::default()
        })
        .collect();
    pb::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: Some(dtype.to_onnx()),
                shape: Some(pb::TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An output with no declared type (subgraph outputs, outputs we do not want to constrain).
pub fn untyped(name: &str) -> pb::ValueInfoProto {
    pb::ValueInfoProto { name: Some(name.into()), ..Default::default() }
}

pub fn graph(
    nodes: Vec<pb::NodeProto>,
    inputs: Vec<pb::ValueInfoProto>,
    outputs: Vec<pb::ValueInfoProto>,
    initializers: Vec<(&str, Tensor)>,
) -> pb::GraphProto {
    pb::GraphProto {
        name: Some("g".into()),
        node: nodes,
        input: inputs,
        output: outputs,
        initializer: initializers.into_iter().map(|(n, t)| tensor_to_proto(n, &t)).collect(),
        ..Default::default()
    }
}

pub fn model(graph: pb::GraphProto, opset: i64) -> Vec<u8> {
    pb::ModelProto {
        ir_version: Some(8),
        opset_import: vec![pb::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        producer_name: Some("onyx-tests".into()),
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

pub fn f32s(shape: &[usize], f: impl Fn(usize) -> f32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(shape.to_vec(), (0..n).map(f).collect()).unwrap()
}

pub fn session(bytes: Vec<u8>, release: bool) -> onyx::Session {
    onyx::Session::builder()
        .with_release_dead_values(release)
        .commit_from_bytes(bytes, None)
        .unwrap()
}

/// A strict session on `provider` (no CPU fallback), recording runs as CUDA
/// graphs or not.
pub fn strict_on(
    bytes: Vec<u8>,
    provider: std::sync::Arc<dyn onyx::core::ep::ExecutionProvider>,
    graphs: bool,
) -> onyx::Session {
    onyx::Session::builder()
        .with_provider(provider)
        .with_strict(true)
        .with_cuda_graphs(graphs)
        .commit_from_bytes(bytes, None)
        .unwrap()
}

/// Makes the first dimension of a declared value symbolic (`name`).
pub fn symbolic_first_dim(v: &mut pb::ValueInfoProto, name: &str) {
    use pb::{tensor_shape_proto::dimension::Value as D, type_proto::Value as T};
    if let Some(T::TensorType(t)) = v.r#type.as_mut().and_then(|t| t.value.as_mut()) {
        if let Some(d) = t.shape.as_mut().and_then(|s| s.dim.first_mut()) {
            d.value = Some(D::DimParam(name.into()));
        }
    }
}

/// `y = If(ReduceSum(x) > 0) { Neg(x) } else { Abs(x) }` over `x: f32[3]`:
/// an `If` whose condition is computed from the input, so a device provider
/// must read it back mid-run.
pub fn if_on_input_data() -> Vec<u8> {
    let branch = |op: &str| {
        graph(vec![node(op, op, &["x"], &["r"], vec![])], vec![], vec![untyped("r")], vec![])
    };
    model(
        graph(
            vec![
                node("ReduceSum", "sum", &["x"], &["t"], vec![("keepdims", A::I(0))]),
                node("Greater", "positive", &["t", "zero"], &["c"], vec![]),
                node(
                    "If",
                    "if",
                    &["c"],
                    &["y"],
                    vec![
                        ("then_branch", A::G(Box::new(branch("Neg")))),
                        ("else_branch", A::G(Box::new(branch("Abs")))),
                    ],
                ),
            ],
            vec![value("x", DType::F32, &[3])],
            vec![value("y", DType::F32, &[3])],
            vec![("zero", Tensor::from_vec(vec![], vec![0f32]).unwrap())],
        ),
        13,
    )
}

/// Inputs for [`if_on_input_data`] with their expected outputs: each sign
/// of the sum, twice.
pub fn if_on_input_data_cases() -> Vec<(Vec<f32>, Vec<f32>)> {
    [[1f32, -2., 3.], [-1., -2., 1.], [4., 0., -1.], [-5., 1., 1.]]
        .iter()
        .map(|x| {
            let y = if x.iter().sum::<f32>() > 0.0 {
                x.iter().map(|v| -v).collect()
            } else {
                x.iter().map(|v| v.abs()).collect()
            };
            (x.to_vec(), y)
        })
        .collect()
}
