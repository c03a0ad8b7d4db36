//! `TensorProto` / `SparseTensorProto` → host [`Tensor`], for every dtype and storage field.

use bytes::Bytes;

use super::external::ExternalData;
use super::pb;
use crate::dtype::DType;
use crate::error::{LoadError, TensorLoadError};
use crate::tensor::Tensor;

const EXTERNAL: i32 = pb::tensor_proto::DataLocation::External as i32;

/// Converts a `TensorProto` to a host tensor, reading external data through `external`.
///
/// # Errors
/// [`LoadError::Tensor`] naming the tensor and what is wrong with it.
pub fn tensor_from_proto(
    t: &pb::TensorProto,
    external: &dyn ExternalData,
) -> Result<Tensor, LoadError> {
    let name = t.name.clone().unwrap_or_default();
    convert(t, external).map_err(|source| LoadError::Tensor { name, source })
}

fn dims_of(dims: &[i64]) -> Result<Vec<usize>, TensorLoadError> {
    let shape: Option<Vec<usize>> = dims.iter().map(|&d| usize::try_from(d).ok()).collect();
    let shape = shape.ok_or_else(|| TensorLoadError::Dims(dims.to_vec()))?;
    // Reject element counts that overflow before anything is allocated.
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|n| n.checked_mul(16).is_some())
        .ok_or_else(|| TensorLoadError::Dims(dims.to_vec()))?;
    Ok(shape)
}

fn convert(t: &pb::TensorProto, external: &dyn ExternalData) -> Result<Tensor, TensorLoadError> {
    let code = t.data_type.unwrap_or(0);
    let dtype = DType::from_onnx(code).ok_or(TensorLoadError::DType(code))?;
    let shape = dims_of(&t.dims)?;
    let numel: usize = shape.iter().product();

    if dtype == DType::String {
        if t.string_data.len() != numel {
            return Err(TensorLoadError::Length { expected: numel, actual: t.string_data.len() });
        }
        let strings =
            t.string_data.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect();
        return Ok(Tensor::from_strings(shape, strings)?);
    }
    let byte_len = dtype.byte_size(numel).expect("non-string dtypes have a byte size");

    if t.data_location == Some(EXTERNAL) {
        let bytes = read_external(t, external, byte_len)?;
        return Ok(Tensor::from_bytes(dtype, shape, bytes)?);
    }
    if let Some(raw) = &t.raw_data {
        if raw.len() != byte_len {
            return Err(TensorLoadError::Length { expected: byte_len, actual: raw.len() });
        }
        return Ok(Tensor::from_bytes(dtype, shape, raw.clone())?);
    }
    let bytes = typed_field_bytes(t, dtype, numel)?;
    if bytes.len() != byte_len {
        return Err(TensorLoadError::Length { expected: byte_len, actual: bytes.len() });
    }
    Ok(Tensor::from_bytes(dtype, shape, Bytes::from(bytes))?)
}

fn read_external(
    t: &pb::TensorProto,
    external: &dyn ExternalData,
    byte_len: usize,
) -> Result<Bytes, TensorLoadError> {
    let mut location = None;
    let mut offset = 0u64;
    let mut length = None;
    for kv in &t.external_data {
        let key = kv.key.as_deref().unwrap_or("");
        let value = kv.value.as_deref().unwrap_or("");
        let parse = |v: &str| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| TensorLoadError::ExternalEntry(format!("{key}={v}")))
        };
        match key {
            "location" => location = Some(value.to_string()),
            "offset" => offset = parse(value)?,
            "length" => length = Some(parse(value)?),
            _ => {}
        }
    }
    let location =
        location.ok_or_else(|| TensorLoadError::ExternalEntry("no 'location' key".into()))?;
    let length = length.unwrap_or(byte_len as u64);
    if length != byte_len as u64 {
        return Err(TensorLoadError::Length { expected: byte_len, actual: length as usize });
    }
    external.read(&location, offset, length)
}

/// Little-endian bytes from the typed `*_data` fields.
fn typed_field_bytes(
    t: &pb::TensorProto,
    dtype: DType,
    numel: usize,
) -> Result<Vec<u8>, TensorLoadError> {
    use DType::*;
    let le = |v: &mut Vec<u8>, bytes: &[u8]| v.extend_from_slice(bytes);
    let mut out = Vec::new();
    match dtype {
        F32 | C64 => t.float_data.iter().for_each(|x| le(&mut out, &x.to_le_bytes())),
        F64 | C128 => t.double_data.iter().for_each(|x| le(&mut out, &x.to_le_bytes())),
        I64 => t.int64_data.iter().for_each(|x| le(&mut out, &x.to_le_bytes())),
        U32 => t.uint64_data.iter().for_each(|&x| le(&mut out, &(x as u32).to_le_bytes())),
        U64 => t.uint64_data.iter().for_each(|x| le(&mut out, &x.to_le_bytes())),
        I32 => t.int32_data.iter().for_each(|x| le(&mut out, &x.to_le_bytes())),
        I16 | U16 | F16 | BF16 => {
            t.int32_data.iter().for_each(|&x| le(&mut out, &(x as u16).to_le_bytes()))
        }
        I8 | U8 | Bool | F8E4M3FN | F8E4M3FNUZ | F8E5M2 | F8E5M2FNUZ | F8E8M0 => {
            out.extend(t.int32_data.iter().map(|&x| x as u8))
        }
        // Already packed: each int32 entry carries one byte of 2 (4-bit) or 4 (2-bit) elements.
        U4 | I4 | F4E2M1 | U2 | I2 => {
            out.extend(t.int32_data.iter().map(|&x| x as u8));
            out.truncate(dtype.byte_size(numel).unwrap_or(0));
        }
        // One 6-bit code per entry; pack them as a little-endian bitstream.
        F6E2M3 | F6E3M2 => {
            out = vec![0u8; dtype.byte_size(t.int32_data.len()).unwrap_or(0)];
            for (i, &x) in t.int32_data.iter().enumerate() {
                let bit = i * 6;
                let v = ((x as u32) & 0x3F) << (bit % 8);
                out[bit / 8] |= v as u8;
                if bit % 8 > 2 {
                    out[bit / 8 + 1] |= (v >> 8) as u8;
                }
            }
        }
        String => unreachable!("strings are handled by the caller"),
    }
    Ok(out)
}

/// Densifies a `SparseTensorProto` (indices as `[NNZ]` linear or `[NNZ, rank]` coordinates).
///
/// # Errors
/// [`LoadError::Tensor`] when values or indices are malformed or out of range.
pub fn sparse_to_dense(
    s: &pb::SparseTensorProto,
    external: &dyn ExternalData,
) -> Result<Tensor, LoadError> {
    let values_proto = s.values.as_ref().ok_or_else(|| sparse_err("", "no values"))?;
    let name = values_proto.name.clone().unwrap_or_default();
    let values = tensor_from_proto(values_proto, external)?;
    let shape =
        dims_of(&s.dims).map_err(|source| LoadError::Tensor { name: name.clone(), source })?;
    let nnz = values.numel();
    let indices = match &s.indices {
        Some(i) => tensor_from_proto(i, external)?.to_i64_vec().map_err(|e| LoadError::Tensor {
            name: name.clone(),
            source: TensorLoadError::Tensor(e),
        })?,
        None => vec![],
    };
    let dtype = values.dtype();
    let elem = dtype.bits() / 8;
    if elem == 0 || !dtype.is_byte_aligned() {
        return Err(sparse_err(
            &name,
            "sparse tensors of packed or string types are not supported",
        ));
    }
    let numel: usize = shape.iter().product();
    let strides = crate::shape::strides(&shape);
    let linear: Vec<usize> = if indices.len() == nnz {
        indices.iter().map(|&i| i as usize).collect()
    } else if indices.len() == nnz * shape.len() {
        indices
            .chunks_exact(shape.len().max(1))
            .map(|c| c.iter().zip(&strides).map(|(&i, &s)| i as usize * s).sum())
            .collect()
    } else {
        return Err(sparse_err(&name, "indices match neither [NNZ] nor [NNZ, rank]"));
    };
    let src = values.bytes().map_err(|e| LoadError::Tensor {
        name: name.clone(),
        source: TensorLoadError::Tensor(e),
    })?;
    let mut dense = vec![0u8; numel * elem];
    for (k, &pos) in linear.iter().enumerate() {
        if pos >= numel {
            return Err(sparse_err(&name, &format!("index {pos} outside {numel} elements")));
        }
        dense[pos * elem..(pos + 1) * elem].copy_from_slice(&src[k * elem..(k + 1) * elem]);
    }
    Tensor::from_bytes(dtype, shape, Bytes::from(dense))
        .map_err(|e| LoadError::Tensor { name, source: TensorLoadError::Tensor(e) })
}

fn sparse_err(name: &str, msg: &str) -> LoadError {
    LoadError::Tensor { name: name.into(), source: TensorLoadError::Sparse(msg.into()) }
}

/// Encodes a host tensor as a `TensorProto` with `raw_data` (strings in `string_data`).
pub fn tensor_to_proto(name: &str, t: &Tensor) -> pb::TensorProto {
    let mut p = pb::TensorProto {
        name: Some(name.to_string()),
        data_type: Some(t.dtype().to_onnx()),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        ..Default::default()
    };
    match t.data() {
        crate::tensor::TensorData::Bytes(b) => p.raw_data = Some(b.clone()),
        crate::tensor::TensorData::Strings(s) => {
            p.string_data = s.iter().map(|x| x.as_bytes().to_vec()).collect()
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::external::NoExternalData;

    fn proto(dtype: DType, dims: &[i64]) -> pb::TensorProto {
        pb::TensorProto {
            data_type: Some(dtype.to_onnx()),
            dims: dims.to_vec(),
            name: Some("t".into()),
            ..Default::default()
        }
    }

    #[test]
    fn typed_int32_field_holds_float16_bits() {
        let mut p = proto(DType::F16, &[2]);
        p.int32_data = vec![0x3C00, 0xC000]; // 1.0, -2.0
        let t = tensor_from_proto(&p, &NoExternalData).unwrap();
        assert_eq!(t.to_f64_vec().unwrap(), vec![1.0, -2.0]);
    }

    #[test]
    fn raw_data_of_the_wrong_length_is_an_error() {
        let mut p = proto(DType::F32, &[3]);
        p.raw_data = Some(Bytes::from(vec![0u8; 8]));
        let err = tensor_from_proto(&p, &NoExternalData).unwrap_err();
        assert!(format!("{:?}", err).contains("Length"), "{err:?}");
    }

    #[test]
    fn negative_dims_are_rejected() {
        let p = proto(DType::F32, &[-1]);
        assert!(tensor_from_proto(&p, &NoExternalData).is_err());
    }

    #[test]
    fn sparse_coordinates_densify() {
        let mut values = proto(DType::F32, &[2]);
        values.float_data = vec![5.0, 7.0];
        let mut idx = proto(DType::I64, &[2, 2]);
        idx.int64_data = vec![0, 1, 1, 2];
        let s =
            pb::SparseTensorProto { values: Some(values), indices: Some(idx), dims: vec![2, 3] };
        let t = sparse_to_dense(&s, &NoExternalData).unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![0.0, 5.0, 0.0, 0.0, 0.0, 7.0]);
    }

    #[test]
    fn uint32_comes_from_the_uint64_field() {
        let mut p = proto(DType::U32, &[2]);
        p.uint64_data = vec![7, 4_000_000_000];
        let t = tensor_from_proto(&p, &NoExternalData).unwrap();
        assert_eq!(t.to_vec::<u32>().unwrap(), vec![7, 4_000_000_000]);
    }
}
