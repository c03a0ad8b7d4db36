//! Host tensors: the values that cross the API (inputs, outputs, initializers).

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use half::{bf16, f16};

use crate::dtype::DType;
use crate::error::TensorError;

/// A fixed-width element type that can be viewed directly in a tensor's bytes.
pub trait Element: bytemuck::Pod + Copy + Send + Sync + 'static {
    /// The dtype these elements have.
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => { $(impl Element for $t { const DTYPE: DType = DType::$d; })* };
}
element!(f32 => F32, f64 => F64, f16 => F16, bf16 => BF16, i8 => I8, u8 => U8, i16 => I16,
    u16 => U16, i32 => I32, u32 => U32, i64 => I64, u64 => U64);

/// Where a tensor's elements live on the host.
#[derive(Clone)]
pub enum TensorData {
    /// Little-endian packed elements. Shared, so memory-mapped weights are never copied.
    Bytes(Bytes),
    /// UTF-8 strings, for `DType::String`.
    Strings(Arc<[String]>),
}

/// A host tensor: dtype, concrete shape and data.
#[derive(Clone)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    data: TensorData,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({} {:?})", self.dtype, self.shape)
    }
}

impl Tensor {
    /// A tensor over existing bytes. The byte length must match dtype and shape.
    ///
    /// # Errors
    /// [`TensorError::SizeMismatch`] when the length is wrong, [`TensorError::NotBytes`] for strings.
    pub fn from_bytes(dtype: DType, shape: Vec<usize>, data: Bytes) -> Result<Tensor, TensorError> {
        let numel: usize = shape.iter().product();
        let expected = dtype.byte_size(numel).ok_or(TensorError::NotBytes { dtype })?;
        if data.len() != expected {
            return Err(TensorError::SizeMismatch { dtype, shape, expected, actual: data.len() });
        }
        Ok(Tensor { dtype, shape, data: TensorData::Bytes(data) })
    }

    /// A tensor from a typed vector.
    ///
    /// # Errors
    /// [`TensorError::SizeMismatch`] when `data.len()` is not the product of `shape`.
    pub fn from_vec<T: Element>(shape: Vec<usize>, data: Vec<T>) -> Result<Tensor, TensorError> {
        let bytes = Bytes::from(bytemuck::cast_slice::<T, u8>(&data).to_vec());
        Tensor::from_bytes(T::DTYPE, shape, bytes)
    }

    /// A boolean tensor (one byte per element, 0 or 1).
    ///
    /// # Errors
    /// [`TensorError::SizeMismatch`] when `data.len()` is not the product of `shape`.
    pub fn from_bools(shape: Vec<usize>, data: &[bool]) -> Result<Tensor, TensorError> {
        let bytes: Vec<u8> = data.iter().map(|&b| b as u8).collect();
        Tensor::from_bytes(DType::Bool, shape, Bytes::from(bytes))
    }

    /// A string tensor.
    ///
    /// # Errors
    /// [`TensorError::SizeMismatch`] when `data.len()` is not the product of `shape`.
    pub fn from_strings(shape: Vec<usize>, data: Vec<String>) -> Result<Tensor, TensorError> {
        let numel: usize = shape.iter().product();
        if data.len() != numel {
            return Err(TensorError::SizeMismatch {
                dtype: DType::String,
                shape,
                expected: numel,
                actual: data.len(),
            });
        }
        Ok(Tensor { dtype: DType::String, shape, data: TensorData::Strings(data.into()) })
    }

    /// A zero-filled tensor.
    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Tensor {
        let numel: usize = shape.iter().product();
        match dtype.byte_size(numel) {
            Some(n) => Tensor { dtype, shape, data: TensorData::Bytes(Bytes::from(vec![0u8; n])) },
            None => Tensor {
                dtype,
                shape,
                data: TensorData::Strings(vec![String::new(); numel].into()),
            },
        }
    }

    /// A scalar (rank 0) tensor.
    pub fn scalar<T: Element>(value: T) -> Tensor {
        Tensor::from_vec(vec![], vec![value]).expect("one element fits a scalar")
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The concrete shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes of storage (0 for strings).
    pub fn byte_len(&self) -> usize {
        match &self.data {
            TensorData::Bytes(b) => b.len(),
            TensorData::Strings(_) => 0,
        }
    }

    /// The raw storage.
    pub fn data(&self) -> &TensorData {
        &self.data
    }

    /// The packed little-endian bytes.
    ///
    /// # Errors
    /// [`TensorError::NotBytes`] for string tensors.
    pub fn bytes(&self) -> Result<&Bytes, TensorError> {
        match &self.data {
            TensorData::Bytes(b) => Ok(b),
            TensorData::Strings(_) => Err(TensorError::NotBytes { dtype: self.dtype }),
        }
    }

    /// The strings of a string tensor.
    ///
    /// # Errors
    /// [`TensorError::WrongDType`] for any other dtype.
    pub fn strings(&self) -> Result<&[String], TensorError> {
        match &self.data {
            TensorData::Strings(s) => Ok(s),
            TensorData::Bytes(_) => {
                Err(TensorError::WrongDType { expected: DType::String, actual: self.dtype })
            }
        }
    }

    /// A copy with a new shape of the same element count.
    ///
    /// # Errors
    /// [`TensorError::SizeMismatch`] when the element counts differ.
    pub fn reshaped(&self, shape: Vec<usize>) -> Result<Tensor, TensorError> {
        let numel: usize = shape.iter().product();
        if numel != self.numel() {
            return Err(TensorError::SizeMismatch {
                dtype: self.dtype,
                shape,
                expected: self.numel(),
                actual: numel,
            });
        }
        Ok(Tensor { dtype: self.dtype, shape, data: self.data.clone() })
    }

    /// The elements as a typed vector (a copy; works for unaligned storage).
    ///
    /// # Errors
    /// [`TensorError::WrongDType`] when `T` is not this tensor's dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, TensorError> {
        if T::DTYPE != self.dtype {
            return Err(TensorError::WrongDType { expected: T::DTYPE, actual: self.dtype });
        }
        let bytes = self.bytes()?;
        Ok(bytes
            .chunks_exact(std::mem::size_of::<T>())
            .map(bytemuck::pod_read_unaligned::<T>)
            .collect())
    }

    /// The elements of an integer or bool tensor widened to i64 (shape arguments, indices).
    ///
    /// # Errors
    /// [`TensorError::NotInteger`] for float, string and packed dtypes.
    pub fn to_i64_vec(&self) -> Result<Vec<i64>, TensorError> {
        let b = self.bytes()?;
        macro_rules! widen {
            ($t:ty) => {
                b.chunks_exact(std::mem::size_of::<$t>())
                    .map(|c| bytemuck::pod_read_unaligned::<$t>(c) as i64)
                    .collect()
            };
        }
        Ok(match self.dtype {
            DType::I64 => widen!(i64),
            DType::I32 => widen!(i32),
            DType::I16 => widen!(i16),
            DType::I8 => widen!(i8),
            DType::U8 | DType::Bool => widen!(u8),
            DType::U16 => widen!(u16),
            DType::U32 => widen!(u32),
            DType::U64 => widen!(u64),
            dtype => return Err(TensorError::NotInteger { dtype }),
        })
    }

    /// The elements of any real numeric tensor as f64 (for comparison and reports).
    ///
    /// # Errors
    /// [`TensorError::NotBytes`] for strings; [`TensorError::NotInteger`] is never returned.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>, TensorError> {
        let b = self.bytes()?;
        macro_rules! conv {
            ($t:ty, $f:expr) => {
                b.chunks_exact(std::mem::size_of::<$t>())
                    .map(|c| $f(bytemuck::pod_read_unaligned::<$t>(c)))
                    .collect()
            };
        }
        Ok(match self.dtype {
            DType::F32 => conv!(f32, |x: f32| x as f64),
            DType::F64 => conv!(f64, |x: f64| x),
            DType::F16 => conv!(f16, |x: f16| x.to_f64()),
            DType::BF16 => conv!(bf16, |x: bf16| x.to_f64()),
            DType::C64 => conv!(f32, |x: f32| x as f64),
            DType::C128 => conv!(f64, |x: f64| x),
            d if d.is_float() => {
                (0..self.numel()).map(|i| crate::float8::decode(d, packed_bits(b, d, i))).collect()
            }
            d if d.is_int() && !d.is_byte_aligned() => {
                (0..self.numel()).map(|i| unpack_int(b, d, i) as f64).collect()
            }
            _ => self.to_i64_vec()?.into_iter().map(|x| x as f64).collect(),
        })
    }
}

/// Tensors are equal when dtype, shape and contents are (bitwise for numbers).
/// Packed 2-, 4- and 6-bit tensors compare element by element: the unused
/// bits of their last byte are not part of the value.
impl PartialEq for Tensor {
    fn eq(&self, other: &Self) -> bool {
        self.dtype() == other.dtype()
            && self.shape() == other.shape()
            && match (self.bytes(), other.bytes()) {
                (Ok(a), Ok(b)) if (1..8).contains(&self.dtype().bits()) => (0..self.numel())
                    .all(|i| packed_bits(a, self.dtype(), i) == packed_bits(b, other.dtype(), i)),
                (Ok(a), Ok(b)) => a == b,
                _ => self.strings().ok() == other.strings().ok(),
            }
    }
}

/// Reads element `i` of a packed or byte-sized tensor as its raw bit pattern.
pub fn packed_bits(bytes: &[u8], dtype: DType, i: usize) -> u32 {
    let bits = dtype.bits();
    match bits {
        8 => bytes[i] as u32,
        4 => (bytes[i / 2] >> ((i % 2) * 4)) as u32 & 0xF,
        2 => (bytes[i / 4] >> ((i % 4) * 2)) as u32 & 0x3,
        6 => {
            let bit = i * 6;
            let lo = bytes[bit / 8] as u32;
            let hi = bytes.get(bit / 8 + 1).copied().unwrap_or(0) as u32;
            ((lo | (hi << 8)) >> (bit % 8)) & 0x3F
        }
        _ => panic!("packed_bits called on a {bits}-bit type"),
    }
}

/// Reads element `i` of a packed 2- or 4-bit integer tensor, sign-extended for signed types.
pub fn unpack_int(bytes: &[u8], dtype: DType, i: usize) -> i64 {
    let bits = dtype.bits();
    let raw = packed_bits(bytes, dtype, i) as i64;
    if dtype.is_signed_int() && raw >> (bits - 1) & 1 == 1 { raw - (1 << bits) } else { raw }
}

/// A host value: what a graph input or output holds.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A tensor.
    Tensor(Tensor),
    /// A sequence of tensors of one dtype.
    Sequence(DType, Vec<Tensor>),
    /// An optional holding nothing. A present optional is just its element.
    Empty {
        /// The element dtype the optional would hold.
        dtype: DType,
        /// Whether that element would be a sequence.
        sequence: bool,
    },
}

impl Value {
    /// The tensor, if this is one.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            Value::Sequence(..) | Value::Empty { .. } => None,
        }
    }

    /// The element dtype.
    pub fn dtype(&self) -> DType {
        match self {
            Value::Tensor(t) => t.dtype(),
            Value::Sequence(d, _) => *d,
            Value::Empty { dtype, .. } => *dtype,
        }
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Self {
        Value::Tensor(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_round_trip_keeps_values() {
        let t = Tensor::from_vec(vec![2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
        assert!(t.to_vec::<i32>().is_err());
    }

    #[test]
    fn wrong_byte_length_is_rejected() {
        let err = Tensor::from_bytes(DType::F32, vec![3], Bytes::from(vec![0u8; 8])).unwrap_err();
        assert!(err.to_string().contains("needs 12 bytes"), "{err}");
    }

    #[test]
    fn packed_tensors_are_equal_whatever_their_unused_bits_hold() {
        let t = |b: u8| Tensor::from_bytes(DType::I4, vec![3], Bytes::from(vec![0x21, b])).unwrap();
        assert_eq!(t(0x03), t(0xF3));
        assert_ne!(t(0x03), t(0x04));
    }

    #[test]
    fn packed_int4_unpacks_with_sign() {
        // elements: 1, -1 (0xF), 7, -8 (0x8)
        let b = [0xF1u8, 0x87];
        assert_eq!(
            (0..4).map(|i| unpack_int(&b, DType::I4, i)).collect::<Vec<_>>(),
            vec![1, -1, 7, -8]
        );
        assert_eq!(unpack_int(&b, DType::U4, 1), 15);
    }
}
