//! `Tensor`: a host tensor with onnxruntime-web's shape (`type`, `data`, `dims`).

use js_sys::{Array, ArrayBuffer, Uint8Array};
use onyx::core::dtype::DType;
use onyx::core::tensor::Tensor as HostTensor;
use prost::Message;
use wasm_bindgen::prelude::*;

use crate::error::{chain, js_error};
use crate::js::view_bytes;

/// A tensor on the host: `new Tensor('float32', new Float32Array(6), [2, 3])`.
#[wasm_bindgen]
pub struct Tensor {
    pub(crate) inner: HostTensor,
    name: String,
}

impl Tensor {
    pub(crate) fn from_host(inner: HostTensor) -> Tensor {
        Tensor { inner, name: String::new() }
    }
}

fn dtype_of(name: &str) -> Result<DType, String> {
    DType::from_name(name).ok_or_else(|| format!("unknown tensor type '{name}'"))
}

/// Elements of a plain JavaScript array as little-endian bytes of `dtype`.
fn array_bytes(dtype: DType, items: &Array) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(items.length() as usize * 8);
    for v in items.iter() {
        let num = || {
            v.as_f64()
                .or_else(|| v.is_bigint().then(|| js_sys::Number::from(v.clone()).value_of()))
                .ok_or_else(|| "tensor data must hold numbers".to_string())
        };
        match dtype {
            DType::F32 => out.extend((num()? as f32).to_le_bytes()),
            DType::F64 => out.extend(num()?.to_le_bytes()),
            DType::F16 => out.extend(half::f16::from_f64(num()?).to_le_bytes()),
            DType::I32 => out.extend((num()? as i32).to_le_bytes()),
            DType::U32 => out.extend((num()? as u32).to_le_bytes()),
            DType::I16 => out.extend((num()? as i16).to_le_bytes()),
            DType::U16 => out.extend((num()? as u16).to_le_bytes()),
            DType::I8 => out.push(num()? as i8 as u8),
            DType::U8 => out.push(num()? as u8),
            DType::Bool => out.push(v.is_truthy() as u8),
            DType::I64 | DType::U64 => {
                let x = if v.is_bigint() {
                    i64::try_from(js_sys::BigInt::from(v.clone()))
                        .map_err(|_| "an int64 value out of range".to_string())?
                } else {
                    num()? as i64
                };
                out.extend(x.to_le_bytes());
            }
            other => return Err(format!("{other} tensors need a typed array")),
        }
    }
    Ok(out)
}

/// A host tensor of `type_` from a typed array (copied) or a plain array, with
/// `dims` (default: one dim of the data's length). `Err` says what is wrong.
pub(crate) fn host_tensor(
    type_: &str,
    data: &JsValue,
    dims: Option<Vec<f64>>,
) -> Result<HostTensor, String> {
    let dtype = dtype_of(type_)?;
    if dtype == DType::String {
        let items: Vec<String> = Array::from(data).iter().filter_map(|v| v.as_string()).collect();
        let shape = dims.map_or(vec![items.len()], |d| d.iter().map(|&x| x as usize).collect());
        return HostTensor::from_strings(shape, items).map_err(|e| chain(&e));
    }
    let bytes = if ArrayBuffer::is_view(data) {
        view_bytes(data)
    } else {
        array_bytes(dtype, &Array::from(data))?
    };
    let width = dtype.byte_size(1).unwrap_or(1).max(1);
    let shape: Vec<usize> = match dims {
        Some(d) => d.iter().map(|&x| x as usize).collect(),
        None => vec![bytes.len() / width],
    };
    HostTensor::from_bytes(dtype, shape, bytes.into()).map_err(|e| chain(&e))
}

#[wasm_bindgen]
impl Tensor {
    /// A tensor of `type` ('float32', 'int64', 'bool', …) from a typed array
    /// (copied) or a plain array, with `dims` (default: one dim of the data's length).
    ///
    /// # Errors
    /// An `Error` for unknown types or data that does not fill the dims.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(js_name = type)] type_: &str,
        data: JsValue,
        dims: Option<Vec<f64>>,
    ) -> Result<Tensor, JsError> {
        host_tensor(type_, &data, dims).map(Tensor::from_host).map_err(|e| JsError::new(&e))
    }

    /// Decodes a serialized ONNX `TensorProto` (the node suite's `.pb` files).
    ///
    /// # Errors
    /// An `Error` for malformed protobuf.
    #[wasm_bindgen(js_name = fromProto)]
    pub fn from_proto(bytes: &[u8]) -> Result<Tensor, JsError> {
        let proto = onyx::core::onnx::pb::TensorProto::decode(bytes)
            .map_err(|e| js_error("decoding a TensorProto", &e))?;
        let inner = onyx::core::onnx::tensor_from_proto(
            &proto,
            &onyx::core::onnx::external::NoExternalData,
        )
        .map_err(|e| js_error("decoding a TensorProto", &e))?;
        Ok(Tensor { inner, name: proto.name.unwrap_or_default() })
    }

    /// The element type, as onnxruntime-web names it.
    #[wasm_bindgen(getter, js_name = type)]
    pub fn dtype(&self) -> String {
        self.inner.dtype().name().to_string()
    }

    /// The dims.
    #[wasm_bindgen(getter)]
    pub fn dims(&self) -> Vec<f64> {
        self.inner.shape().iter().map(|&d| d as f64).collect()
    }

    /// The element count.
    #[wasm_bindgen(getter)]
    pub fn size(&self) -> f64 {
        self.inner.numel() as f64
    }

    /// The name a `.pb` file gives the tensor (empty for constructed tensors).
    #[wasm_bindgen(getter)]
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// A copy of the data as the matching typed array (`Float32Array`,
    /// `BigInt64Array`, `Uint8Array` for bool, `Uint16Array` for float16 and
    /// bfloat16 bits…), or an array of strings.
    #[wasm_bindgen(getter)]
    pub fn data(&self) -> JsValue {
        if let Ok(s) = self.inner.strings() {
            return s.iter().map(|x| JsValue::from_str(x)).collect::<Array>().into();
        }
        let bytes = self.inner.bytes().map(|b| b.to_vec()).unwrap_or_default();
        let buffer = Uint8Array::from(&bytes[..]).buffer();
        match self.inner.dtype() {
            DType::F32 => js_sys::Float32Array::new(&buffer).into(),
            DType::F64 => js_sys::Float64Array::new(&buffer).into(),
            DType::I32 => js_sys::Int32Array::new(&buffer).into(),
            DType::U32 => js_sys::Uint32Array::new(&buffer).into(),
            DType::I16 => js_sys::Int16Array::new(&buffer).into(),
            DType::U16 | DType::F16 | DType::BF16 => js_sys::Uint16Array::new(&buffer).into(),
            DType::I8 => js_sys::Int8Array::new(&buffer).into(),
            DType::I64 => js_sys::BigInt64Array::new(&buffer).into(),
            DType::U64 => js_sys::BigUint64Array::new(&buffer).into(),
            _ => Uint8Array::new(&buffer).into(),
        }
    }

    /// The values as JavaScript numbers (float16/bfloat16 decoded, int64 as
    /// doubles), for display and comparisons.
    #[wasm_bindgen(js_name = toNumbers)]
    pub fn to_numbers(&self) -> Result<Vec<f64>, JsError> {
        self.inner.to_f64_vec().map_err(|e| js_error("reading tensor values", &e))
    }
}
