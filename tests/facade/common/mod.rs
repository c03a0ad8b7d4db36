//! Building small ONNX models in tests, through the same protobuf types the loader reads.
#![allow(dead_code)]

use onyx::DType;
use onyx::Tensor;
use onyx::core::onnx::pb;
use onyx::core::onnx::tensor_to_proto;
use prost::Message;

/// An attribute value for [`node`].
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
