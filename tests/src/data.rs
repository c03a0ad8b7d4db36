//! Reading a case's `.pb` data sets, matched to graph inputs and outputs by the
//! name stored inside each file (position is only the fallback).

use std::path::Path;

use prost::Message;

use onyx_core::dtype::DType;
use onyx_core::onnx::external::NoExternalData;
use onyx_core::onnx::pb;
use onyx_core::onnx::tensor_from_proto;
use onyx_core::tensor::Value;

use crate::suite::Case;

/// One data set: named inputs and expected outputs.
#[derive(Clone, Debug)]
pub struct DataSet {
    /// Inputs by graph input name.
    pub inputs: Vec<(String, Value)>,
    /// Expected outputs by graph output name.
    pub outputs: Vec<(String, Value)>,
}

/// All data sets of a case.
#[derive(Clone, Debug)]
pub struct CaseData {
    /// `test_data_set_0`, `_1`, … in order.
    pub sets: Vec<DataSet>,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Kind {
    Tensor,
    Sequence,
    Optional,
    Other,
}

fn kind(vi: &pb::ValueInfoProto) -> Kind {
    use pb::type_proto::Value as V;
    match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(V::TensorType(_)) => Kind::Tensor,
        Some(V::SequenceType(_)) => Kind::Sequence,
        Some(V::OptionalType(_)) => Kind::Optional,
        _ => Kind::Other,
    }
}

fn sequence_value(s: &pb::SequenceProto, vi: Option<&pb::ValueInfoProto>) -> Result<Value, String> {
    let tensors = s
        .tensor_values
        .iter()
        .map(|t| tensor_from_proto(t, &NoExternalData).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    if !s.sequence_values.is_empty() || !s.map_values.is_empty() || !s.optional_values.is_empty() {
        return Err("nested sequences, maps and optionals are not supported".into());
    }
    // An empty sequence takes its dtype from the declared sequence type.
    let declared = vi
        .and_then(|v| v.r#type.as_ref())
        .and_then(onyx_core::onnx::type_info)
        .and_then(|t| match t {
            onyx_core::graph::TypeInfo::Sequence(Some(inner)) => inner.tensor_dtype(),
            _ => None,
        });
    let dtype = tensors.first().map(|t| t.dtype()).or(declared).unwrap_or(DType::F32);
    Ok(Value::Sequence(dtype, tensors))
}

/// An optional's value: its element, or [`Value::Empty`] typed from the declaration.
fn optional_value(o: &pb::OptionalProto, vi: &pb::ValueInfoProto) -> Result<Value, String> {
    if let Some(t) = &o.tensor_value {
        return Ok(Value::Tensor(
            tensor_from_proto(t, &NoExternalData).map_err(|e| e.to_string())?,
        ));
    }
    if let Some(s) = &o.sequence_value {
        return sequence_value(s, None);
    }
    if o.sparse_tensor_value.is_some() || o.map_value.is_some() || o.optional_value.is_some() {
        return Err("optionals of sparse tensors, maps and optionals are not supported".into());
    }
    use onyx_core::graph::TypeInfo as T;
    let declared = vi.r#type.as_ref().and_then(onyx_core::onnx::type_info);
    let (dtype, sequence) = match declared {
        Some(T::Optional(Some(inner))) => match *inner {
            T::Tensor { dtype, .. } => (dtype, false),
            T::Sequence(Some(e)) => (e.tensor_dtype().unwrap_or(DType::F32), true),
            _ => (DType::F32, false),
        },
        _ => (DType::F32, false),
    };
    Ok(Value::Empty { dtype, sequence })
}

/// Decodes one `.pb` file for the graph's values `infos`; returns the matched name and value.
fn decode(
    path: &Path,
    infos: &[pb::ValueInfoProto],
    position: usize,
) -> Result<(String, Value), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let named = |name: &str, k: Kind| {
        infos.iter().find(|i| i.name.as_deref() == Some(name) && kind(i) == k)
    };
    if let Ok(t) = pb::TensorProto::decode(&bytes[..]) {
        if let Some(vi) = t.name.as_deref().and_then(|n| named(n, Kind::Tensor)) {
            let v = tensor_from_proto(&t, &NoExternalData).map_err(|e| e.to_string())?;
            return Ok((vi.name.clone().unwrap_or_default(), Value::Tensor(v)));
        }
    }
    if let Ok(s) = pb::SequenceProto::decode(&bytes[..]) {
        if let Some(vi) = s.name.as_deref().and_then(|n| named(n, Kind::Sequence)) {
            return Ok((vi.name.clone().unwrap_or_default(), sequence_value(&s, Some(vi))?));
        }
    }
    if let Ok(o) = pb::OptionalProto::decode(&bytes[..]) {
        if let Some(vi) = o.name.as_deref().and_then(|n| named(n, Kind::Optional)) {
            return Ok((vi.name.clone().unwrap_or_default(), optional_value(&o, vi)?));
        }
    }
    // No usable name inside: fall back to the file's position.
    let vi =
        infos.get(position).ok_or_else(|| format!("{} matches no graph value", path.display()))?;
    let name = vi.name.clone().unwrap_or_default();
    match kind(vi) {
        Kind::Tensor => {
            let t = pb::TensorProto::decode(&bytes[..]).map_err(|e| e.to_string())?;
            Ok((
                name,
                Value::Tensor(tensor_from_proto(&t, &NoExternalData).map_err(|e| e.to_string())?),
            ))
        }
        Kind::Sequence => {
            let s = pb::SequenceProto::decode(&bytes[..]).map_err(|e| e.to_string())?;
            Ok((name, sequence_value(&s, Some(vi))?))
        }
        Kind::Optional => {
            let o = pb::OptionalProto::decode(&bytes[..]).map_err(|e| e.to_string())?;
            Ok((name, optional_value(&o, vi)?))
        }
        Kind::Other => Err(format!("'{name}': map values are not supported")),
    }
}

fn numbered(dir: &Path, prefix: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<(usize, std::path::PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let n = name.strip_prefix(prefix)?.strip_suffix(".pb")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

/// Loads every data set of a case.
///
/// # Errors
/// A message for unreadable or unmatched files.
pub fn load_case_data(case: &Case) -> Result<CaseData, String> {
    let bytes = std::fs::read(&case.model).map_err(|e| e.to_string())?;
    let model = pb::ModelProto::decode(&bytes[..]).map_err(|e| e.to_string())?;
    let graph = model.graph.ok_or("no graph")?;
    let mut sets = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(&case.dir)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_dir()
                && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("test_data_set_"))
        })
        .collect();
    dirs.sort();
    for dir in dirs {
        let inputs = numbered(&dir, "input_")
            .iter()
            .enumerate()
            .map(|(k, p)| decode(p, &graph.input, k))
            .collect::<Result<_, _>>()?;
        let outputs = numbered(&dir, "output_")
            .iter()
            .enumerate()
            .map(|(k, p)| decode(p, &graph.output, k))
            .collect::<Result<_, _>>()?;
        sets.push(DataSet { inputs, outputs });
    }
    Ok(CaseData { sets })
}
