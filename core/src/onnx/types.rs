//! `TypeProto` → [`TypeInfo`], keeping symbolic dimensions.

use super::pb;
use super::pb::type_proto::Value;
use crate::dtype::DType;
use crate::graph::TypeInfo;
use crate::shape::{Dim, Shape};

/// Converts a declared type. Unknown element types give `None` (the declaration is only a hint).
pub fn type_info(t: &pb::TypeProto) -> Option<TypeInfo> {
    Some(match t.value.as_ref()? {
        Value::TensorType(tt) => TypeInfo::Tensor {
            dtype: DType::from_onnx(tt.elem_type?)?,
            shape: tt.shape.as_ref().map(shape),
        },
        Value::SparseTensorType(tt) => TypeInfo::SparseTensor {
            dtype: DType::from_onnx(tt.elem_type?)?,
            shape: tt.shape.as_ref().map(shape),
        },
        Value::SequenceType(s) => {
            TypeInfo::Sequence(s.elem_type.as_deref().and_then(type_info).map(Box::new))
        }
        Value::OptionalType(o) => {
            TypeInfo::Optional(o.elem_type.as_deref().and_then(type_info).map(Box::new))
        }
        Value::MapType(m) => TypeInfo::Map {
            key: DType::from_onnx(m.key_type?)?,
            value: m.value_type.as_deref().and_then(type_info).map(Box::new),
        },
        Value::OpaqueType(_) => return None,
    })
}

fn shape(s: &pb::TensorShapeProto) -> Shape {
    use pb::tensor_shape_proto::dimension::Value as D;
    Shape(
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(D::DimValue(v)) if *v >= 0 => Dim::Known(*v as usize),
                Some(D::DimParam(p)) if !p.is_empty() => Dim::Sym(p.as_str().into()),
                _ => Dim::Unknown,
            })
            .collect(),
    )
}
