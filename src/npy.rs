//! Tensors to and from `.npy` files (through `npyz`), for every dtype.
//!
//! Types numpy lacks are written as their raw bit patterns so any numpy loads
//! them without pickle: bfloat16 as `<u2`, float8 as `|u1`, 4- and 2-bit types
//! unpacked to one `|u1` per element, float6 likewise; complex numbers as
//! float pairs in an extra trailing dimension of 2; strings as `<U` arrays.

use std::io::{Read, Write};
use std::str::FromStr;

use bytes::Bytes;
use half::f16;
use npyz::{TypeStr, WriterBuilder};
use onyx_core::dtype::DType;
use onyx_core::tensor::{Tensor, TensorData, packed_bits};

/// Errors reading or writing `.npy` data.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    /// I/O failure.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A dtype this reader does not map to ONNX.
    #[error("npy dtype '{0}' is not supported")]
    DType(String),
    /// The array is malformed.
    #[error("{0}")]
    Invalid(String),
}

fn dtype_str(s: &str) -> TypeStr {
    TypeStr::from_str(s).expect("static type strings are valid")
}

fn write_plain<T: npyz::Serialize + Copy, W: Write>(
    w: W,
    ts: &str,
    shape: &[u64],
    data: impl Iterator<Item = T>,
) -> Result<(), NpyError> {
    let mut writer = npyz::WriteOptions::new()
        .dtype(npyz::DType::Plain(dtype_str(ts)))
        .shape(shape)
        .writer(w)
        .begin_nd()?;
    writer.extend(data)?;
    writer.finish()?;
    Ok(())
}

fn le<const N: usize>(b: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    b.chunks_exact(N).map(|c| c.try_into().expect("exact chunks"))
}

/// Writes a tensor as `.npy`.
///
/// # Errors
/// [`NpyError::Io`] on write failures.
pub fn write_npy<W: Write>(w: W, t: &Tensor) -> Result<(), NpyError> {
    let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
    let bytes = match t.data() {
        TensorData::Strings(s) => {
            let width = s.iter().map(|x| x.chars().count()).max().unwrap_or(0).max(1);
            let mut writer = npyz::WriteOptions::<str>::new()
                .dtype(npyz::DType::Plain(dtype_str(&format!("<U{width}"))))
                .shape(&shape)
                .writer(w)
                .begin_nd()?;
            for x in s.iter() {
                writer.push(x.as_str())?;
            }
            writer.finish()?;
            return Ok(());
        }
        TensorData::Bytes(b) => b,
    };
    use DType::*;
    match t.dtype() {
        F32 => write_plain(w, "<f4", &shape, le::<4>(bytes).map(f32::from_le_bytes)),
        F64 => write_plain(w, "<f8", &shape, le::<8>(bytes).map(f64::from_le_bytes)),
        F16 => write_plain(
            w,
            "<f2",
            &shape,
            le::<2>(bytes).map(|b| f16::from_bits(u16::from_le_bytes(b))),
        ),
        BF16 | U16 => write_plain(w, "<u2", &shape, le::<2>(bytes).map(u16::from_le_bytes)),
        I8 => write_plain(w, "|i1", &shape, bytes.iter().map(|&b| b as i8)),
        U8 | F8E4M3FN | F8E4M3FNUZ | F8E5M2 | F8E5M2FNUZ | F8E8M0 => {
            write_plain(w, "|u1", &shape, bytes.iter().copied())
        }
        Bool => write_plain(w, "|b1", &shape, bytes.iter().map(|&b| b != 0)),
        I16 => write_plain(w, "<i2", &shape, le::<2>(bytes).map(i16::from_le_bytes)),
        I32 => write_plain(w, "<i4", &shape, le::<4>(bytes).map(i32::from_le_bytes)),
        I64 => write_plain(w, "<i8", &shape, le::<8>(bytes).map(i64::from_le_bytes)),
        U32 => write_plain(w, "<u4", &shape, le::<4>(bytes).map(u32::from_le_bytes)),
        U64 => write_plain(w, "<u8", &shape, le::<8>(bytes).map(u64::from_le_bytes)),
        // Complex numbers as (real, imaginary) pairs in a trailing dimension of 2.
        C64 => write_plain(
            w,
            "<f4",
            &[shape, vec![2]].concat(),
            le::<4>(bytes).map(f32::from_le_bytes),
        ),
        C128 => write_plain(
            w,
            "<f8",
            &[shape, vec![2]].concat(),
            le::<8>(bytes).map(f64::from_le_bytes),
        ),
        d @ (U4 | I4 | F4E2M1 | U2 | I2 | F6E2M3 | F6E3M2) => {
            write_plain(w, "|u1", &shape, (0..t.numel()).map(|i| packed_bits(bytes, d, i) as u8))
        }
        String => unreachable!("strings are written above"),
    }
}

/// Reads an `.npy` file into a tensor. Supports the plain numeric types, bool and `<U` strings.
///
/// # Errors
/// [`NpyError`] for unsupported dtypes, Fortran order or malformed files.
pub fn read_npy<R: Read>(r: R) -> Result<Tensor, NpyError> {
    let npy = npyz::NpyFile::new(r)?;
    if npy.order() != npyz::Order::C {
        return Err(NpyError::Invalid("Fortran-ordered arrays are not supported".into()));
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let npyz::DType::Plain(ts) = npy.dtype() else {
        return Err(NpyError::DType(format!("{:?}", npy.dtype())));
    };
    let desc = ts.to_string();
    let code = desc.trim_start_matches(['<', '>', '|', '=']);
    let invalid = |e: onyx_core::error::TensorError| NpyError::Invalid(e.to_string());
    macro_rules! numeric {
        ($t:ty) => {{
            let v: Vec<$t> = npy.into_vec()?;
            Tensor::from_vec(shape, v).map_err(invalid)
        }};
    }
    match code {
        "f4" => numeric!(f32),
        "f8" => numeric!(f64),
        "f2" => numeric!(f16),
        "i1" => numeric!(i8),
        "u1" => numeric!(u8),
        "i2" => numeric!(i16),
        "u2" => numeric!(u16),
        "i4" => numeric!(i32),
        "u4" => numeric!(u32),
        "i8" => numeric!(i64),
        "u8" => numeric!(u64),
        "b1" => {
            let v: Vec<bool> = npy.into_vec()?;
            Tensor::from_bools(shape, &v).map_err(invalid)
        }
        c if c.starts_with('U') => {
            let v: Vec<String> = npy.into_vec()?;
            Tensor::from_strings(shape, v).map_err(invalid)
        }
        _ => Err(NpyError::DType(desc)),
    }
}

/// Reinterprets a tensor written by [`write_npy`] with raw bits as the ONNX dtype it came from.
///
/// # Errors
/// [`NpyError::Invalid`] when the bits do not fit the dtype.
pub fn with_dtype(t: Tensor, dtype: DType) -> Result<Tensor, NpyError> {
    if t.dtype() == dtype {
        return Ok(t);
    }
    let bytes = t.bytes().map_err(|e| NpyError::Invalid(e.to_string()))?.clone();
    let packed: Bytes = if dtype.is_byte_aligned() {
        bytes
    } else {
        let bits = dtype.bits();
        let mut out = vec![0u8; dtype.byte_size(t.numel()).unwrap_or(0)];
        for (i, &b) in bytes.iter().enumerate() {
            let bit = i * bits;
            let v = (b as u32 & ((1 << bits) - 1)) << (bit % 8);
            out[bit / 8] |= v as u8;
            if bit % 8 + bits > 8 {
                out[bit / 8 + 1] |= (v >> 8) as u8;
            }
        }
        out.into()
    };
    Tensor::from_bytes(dtype, t.shape().to_vec(), packed)
        .map_err(|e| NpyError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(t: &Tensor) -> Tensor {
        let mut buf = Vec::new();
        write_npy(&mut buf, t).unwrap();
        read_npy(&buf[..]).unwrap()
    }

    #[test]
    fn floats_ints_and_bools_round_trip() {
        let t = Tensor::from_vec(vec![2, 2], vec![1.5f32, -2.0, 0.0, 7.25]).unwrap();
        assert_eq!(round_trip(&t), t);
        let t = Tensor::from_vec(vec![3], vec![i64::MIN, 0, i64::MAX]).unwrap();
        assert_eq!(round_trip(&t), t);
        let t = Tensor::from_bools(vec![2], &[true, false]).unwrap();
        assert_eq!(round_trip(&t), t);
    }

    #[test]
    fn strings_are_unicode_arrays() {
        let t = Tensor::from_strings(vec![2], vec!["héllo".into(), "x".into()]).unwrap();
        let mut buf = Vec::new();
        write_npy(&mut buf, &t).unwrap();
        assert!(String::from_utf8_lossy(&buf).contains("<U5"));
        assert_eq!(round_trip(&t), t);
    }

    #[test]
    fn int4_is_written_unpacked_and_packs_back() {
        let t = Tensor::from_bytes(DType::I4, vec![3], Bytes::from(vec![0xF1, 0x07])).unwrap();
        let back = round_trip(&t);
        assert_eq!(back.dtype(), DType::U8);
        assert_eq!(back.to_vec::<u8>().unwrap(), vec![1, 15, 7]);
        assert_eq!(with_dtype(back, DType::I4).unwrap(), t);
    }
}
