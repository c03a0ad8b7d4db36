//! Cast, CastLike and BitCast between every non-string type ONNX defines.
//!
//! The common numeric pairs (the byte-sized integers, f16, bf16, f32, f64) convert
//! through typed loops: integers through i128 (exact, wrapping like C), anything
//! with a float through f64, rounded once to the target. Every other pair (bool,
//! the packed 2- and 4-bit integers, float8, float6, float4, float8e8m0) goes
//! through [`read`] and [`write`], one element at a time, following the ONNX
//! reference (`ml_dtypes`) conversions exactly.

use half::{bf16, f16};
use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::float8::{self, RoundMode};
use onyx_core::ops::generate::{Cast, CastLike};
use onyx_core::tensor::{packed_bits, unpack_int};
use rayon::prelude::*;

use crate::par::Loop;

use super::dispatch::{AsF64, numeric};
use super::elementwise::map_to;
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// Rounds an f64 to f32 with round-to-odd, so that a second rounding to a
/// narrower float (f16, bf16) gives the correctly rounded result of the f64.
fn f32_round_odd(x: f64) -> f32 {
    let r = x as f32;
    if r.is_finite() && r as f64 != x && r.to_bits() & 1 == 0 {
        let up = (r as f64).abs() < x.abs();
        f32::from_bits(if up { r.to_bits() + 1 } else { r.to_bits() - 1 })
    } else {
        r
    }
}

/// f64 to f16, correctly rounded (nearest even).
pub(crate) fn to_f16(x: f64) -> f16 {
    f16::from_f32(f32_round_odd(x))
}

/// f64 to bf16, correctly rounded (nearest even).
pub(crate) fn to_bf16(x: f64) -> bf16 {
    bf16::from_f32(f32_round_odd(x))
}

trait Elem: AsF64 + bytemuck::Pod + Send + Sync {
    const INT: bool;
    fn to_i128(self) -> i128;
    fn from_i128(v: i128) -> Self;
    /// From f64, rounded once (floats) or truncated and saturated (integers).
    fn from_float(v: f64) -> Self {
        Self::from_f64(v)
    }
}

macro_rules! elem_int {
    ($($t:ty),*) => { $(impl Elem for $t {
        const INT: bool = true;
        fn to_i128(self) -> i128 { self as i128 }
        fn from_i128(v: i128) -> Self { v as $t }
    })* };
}
elem_int!(i8, i16, i32, i64, u8, u16, u32, u64);

impl Elem for f32 {
    const INT: bool = false;
    fn to_i128(self) -> i128 {
        self as i128
    }
    fn from_i128(v: i128) -> Self {
        v as f32
    }
}

impl Elem for f64 {
    const INT: bool = false;
    fn to_i128(self) -> i128 {
        self as i128
    }
    fn from_i128(v: i128) -> Self {
        v as f64
    }
}

impl Elem for f16 {
    const INT: bool = false;
    fn to_i128(self) -> i128 {
        self.to_f64() as i128
    }
    fn from_i128(v: i128) -> Self {
        to_f16(v as f64)
    }
    fn from_float(v: f64) -> Self {
        to_f16(v)
    }
}

impl Elem for bf16 {
    const INT: bool = false;
    fn to_i128(self) -> i128 {
        self.to_f64() as i128
    }
    fn from_i128(v: i128) -> Self {
        to_bf16(v as f64)
    }
    fn from_float(v: f64) -> Self {
        to_bf16(v)
    }
}

fn convert<S: Elem, D: Elem>(x: S) -> D {
    if S::INT { D::from_i128(x.to_i128()) } else { D::from_float(x.to_f64()) }
}

fn cast_typed<S: Elem, D: Elem>(io: &KernelIo) -> Result<(), EpError> {
    map_to(io, convert::<S, D>)
}

fn to_bool<S: Elem>(io: &KernelIo) -> Result<(), EpError> {
    map_to(io, |x: S| (x.to_f64() != 0.0) as u8)
}

/// A number read from an element of any real type: integers (and bool)
/// exactly, floats widened to f64 (exact for every float type).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Num {
    /// An integer or bool element.
    Int(i128),
    /// A float element.
    Float(f64),
}

impl Num {
    /// The value as f64 (large integers round).
    pub(crate) fn to_f64(self) -> f64 {
        match self {
            Num::Int(v) => v as f64,
            Num::Float(v) => v,
        }
    }
}

/// Whether [`read`] and [`write`] handle a dtype: every real type (not strings or complex).
pub(crate) fn is_real(d: DType) -> bool {
    !matches!(d, DType::String | DType::C64 | DType::C128)
}

fn le<const N: usize>(b: &[u8], i: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[i * N..(i + 1) * N]);
    a
}

/// Reads element `i` of a tensor of a real dtype from its bytes.
/// Strings and complex numbers (excluded by [`is_real`]) read as NaN.
pub(crate) fn read(dtype: DType, b: &[u8], i: usize) -> Num {
    use DType::*;
    match dtype {
        Bool | U8 => Num::Int(b[i] as i128),
        I8 => Num::Int(b[i] as i8 as i128),
        U16 => Num::Int(u16::from_le_bytes(le(b, i)) as i128),
        I16 => Num::Int(i16::from_le_bytes(le(b, i)) as i128),
        U32 => Num::Int(u32::from_le_bytes(le(b, i)) as i128),
        I32 => Num::Int(i32::from_le_bytes(le(b, i)) as i128),
        U64 => Num::Int(u64::from_le_bytes(le(b, i)) as i128),
        I64 => Num::Int(i64::from_le_bytes(le(b, i)) as i128),
        F16 => Num::Float(f16::from_le_bytes(le(b, i)).to_f64()),
        BF16 => Num::Float(bf16::from_le_bytes(le(b, i)).to_f64()),
        F32 => Num::Float(f32::from_le_bytes(le(b, i)) as f64),
        F64 => Num::Float(f64::from_le_bytes(le(b, i))),
        U4 | I4 | U2 | I2 => Num::Int(unpack_int(b, dtype, i) as i128),
        String | C64 | C128 => Num::Float(f64::NAN),
        d => Num::Float(float8::decode(d, packed_bits(b, d, i))),
    }
}

fn put<const N: usize>(out: &mut [u8], i: usize, bytes: [u8; N]) {
    out[i * N..(i + 1) * N].copy_from_slice(&bytes);
}

/// Stores the low `bits` bits of `code` as element `i` of a packed buffer
/// (LSB-first within each byte, as ONNX packs 2-, 4- and 6-bit types).
fn put_packed(out: &mut [u8], bits: usize, i: usize, code: u32) {
    let pos = i * bits;
    let mask = ((1u32 << bits) - 1) << (pos % 8);
    let shifted = (code << (pos % 8)) & mask;
    let (lo, hi) = (pos / 8, pos / 8 + 1);
    out[lo] = (out[lo] & !(mask as u8)) | shifted as u8;
    if mask > 0xFF
        && let Some(b) = out.get_mut(hi)
    {
        *b = (*b & !((mask >> 8) as u8)) | (shifted >> 8) as u8;
    }
}

/// A packed integer from a float, as `ml_dtypes` converts: truncated toward
/// zero, and 0 when that falls outside the type's range (NaN and inf included).
fn packed_int_from_float(dtype: DType, v: f64) -> i128 {
    let bits = dtype.bits() as i32;
    let (lo, hi) = if dtype.is_signed_int() {
        (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
    } else {
        (0, (1i64 << bits) - 1)
    };
    let t = v.trunc();
    if t >= lo as f64 && t <= hi as f64 { t as i128 } else { 0 }
}

/// How values are converted into a float8 target (Cast's attributes).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rounding {
    /// Saturate out-of-range values for float8 targets.
    pub saturate: bool,
    /// Rounding of float8e8m0 targets.
    pub mode: RoundMode,
}

impl Default for Rounding {
    fn default() -> Self {
        Rounding { saturate: true, mode: RoundMode::Up }
    }
}

/// Writes `v` as element `i` of a buffer of a real dtype, converting as Cast does:
/// integers wrap (from integers) or truncate and saturate (from floats; packed
/// integers take 0 out of range), floats round to nearest even, float8 targets
/// saturate or overflow as `r` says. Strings and complex targets are left untouched.
pub(crate) fn write(dtype: DType, out: &mut [u8], i: usize, v: Num, r: Rounding) {
    use DType::*;
    macro_rules! int {
        ($t:ty) => {
            match v {
                Num::Int(x) => x as $t,
                Num::Float(x) => x as $t,
            }
            .to_le_bytes()
        };
    }
    match dtype {
        Bool => out[i] = (v.to_f64() != 0.0) as u8,
        U8 => put(out, i, int!(u8)),
        I8 => put(out, i, int!(i8)),
        U16 => put(out, i, int!(u16)),
        I16 => put(out, i, int!(i16)),
        U32 => put(out, i, int!(u32)),
        I32 => put(out, i, int!(i32)),
        U64 => put(out, i, int!(u64)),
        I64 => put(out, i, int!(i64)),
        F64 => put(out, i, v.to_f64().to_le_bytes()),
        F32 => put(
            out,
            i,
            match v {
                Num::Int(x) => x as f32,
                Num::Float(x) => x as f32,
            }
            .to_le_bytes(),
        ),
        F16 => put(out, i, to_f16(v.to_f64()).to_le_bytes()),
        BF16 => put(out, i, to_bf16(v.to_f64()).to_le_bytes()),
        U4 | I4 | U2 | I2 => {
            let x = match v {
                Num::Int(x) => x,
                Num::Float(x) => packed_int_from_float(dtype, x),
            };
            put_packed(out, dtype.bits(), i, (x & ((1 << dtype.bits()) - 1)) as u32);
        }
        F8E8M0 => out[i] = float8::encode_e8m0(v.to_f64() as f32, r.saturate, r.mode) as u8,
        String | C64 | C128 => {}
        d => {
            if let Some(code) = float8::encode(d, v.to_f64(), r.saturate) {
                if d.bits() == 8 {
                    out[i] = code as u8;
                } else {
                    put_packed(out, d.bits(), i, code);
                }
            }
        }
    }
}

/// Elements per parallel task; a multiple of 8, so that every task owns whole
/// bytes of a packed buffer.
const CHUNK: usize = 4096;

/// Fills output 0 with `f(i)` for every element `i`, through [`write`], in parallel.
pub(crate) fn write_all(
    io: &KernelIo,
    dtype: DType,
    r: Rounding,
    f: impl Fn(usize) -> Num + Sync,
) -> Result<(), EpError> {
    let n = io.out_view(0)?.numel();
    let out = io.output_bytes(0)?;
    let chunk_bytes = CHUNK * dtype.bits() / 8;
    if chunk_bytes == 0 {
        return Err(unsupported_dtype("conversion", dtype));
    }
    out.par_chunks_mut(chunk_bytes).enumerate().each(|(c, dst)| {
        let start = c * CHUNK;
        for j in 0..CHUNK.min(n.saturating_sub(start)) {
            write(dtype, dst, j, f(start + j), r);
        }
    });
    Ok(())
}

struct CastKernel {
    from: DType,
    to: DType,
    rounding: Rounding,
}

/// Bool is stored as bytes 0/1: read it as u8.
fn storage(d: DType) -> DType {
    if d == DType::Bool { DType::U8 } else { d }
}

/// The types of the typed fast path.
fn classic(d: DType) -> bool {
    d.is_byte_aligned()
        && (d.is_int()
            || matches!(d, DType::Bool | DType::F32 | DType::F64 | DType::F16 | DType::BF16))
}

impl CpuKernel for CastKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        if io.aliased(0, 0) {
            // The planner only aliases equal dtypes: the bytes are already the result.
            return Ok(());
        }
        if self.from == self.to {
            let x = io.input_bytes(0)?;
            io.output_bytes(0)?.copy_from_slice(x);
            return Ok(());
        }
        if classic(self.from) && classic(self.to) {
            let unsupported = || unsupported_dtype("Cast", self.from);
            if self.to == DType::Bool {
                return numeric!(storage(self.from), S => to_bool::<S>(io), else Err(unsupported()));
            }
            return numeric!(storage(self.from), S => numeric!(self.to, D => cast_typed::<S, D>(io),
                else Err(unsupported())), else Err(unsupported()));
        }
        let x = io.input_bytes(0)?;
        let from = self.from;
        write_all(io, self.to, self.rounding, |i| read(from, x, i))
    }
}

fn build_cast(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let from = spec.input_dtype(0)?;
    let to = spec.output_dtype(0)?;
    if !is_real(from) || !is_real(to) {
        return Err(EpError::Unsupported(format!(
            "Cast from {from} to {to} is not implemented on the CPU"
        )));
    }
    let rounding = if let Ok(c) = spec.op_as::<Cast>() {
        Rounding { saturate: c.saturate, mode: c.round_mode }
    } else if let Ok(c) = spec.op_as::<CastLike>() {
        Rounding { saturate: c.saturate, mode: c.round_mode }
    } else {
        Rounding::default()
    };
    Ok(Box::new(CastKernel { from, to, rounding }))
}

/// BitCast: the output holds the input's bytes unchanged.
struct BitCastKernel;

impl CpuKernel for BitCastKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let x = io.input_bytes(0)?;
        let out = io.output_bytes(0)?;
        if x.len() != out.len() {
            return Err(EpError::Kernel(format!(
                "BitCast of {} bytes into {} bytes",
                x.len(),
                out.len()
            )));
        }
        out.copy_from_slice(x);
        Ok(())
    }
}

fn build_bitcast(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let from = spec.input_dtype(0)?;
    let to = spec.output_dtype(0)?;
    if from.bits() != to.bits() || from == DType::String || to == DType::String {
        return Err(EpError::Unsupported(format!("BitCast from {from} to {to}")));
    }
    Ok(Box::new(BitCastKernel))
}

/// Registers Cast, CastLike and BitCast.
pub fn register_all(r: &mut KernelRegistry) {
    r.register("Cast", build_cast);
    r.register("CastLike", build_cast);
    r.register("BitCast", build_bitcast);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(dtype: DType, values: &[Num]) -> Vec<Num> {
        let mut buf = vec![0u8; dtype.byte_size(values.len()).unwrap()];
        for (i, &v) in values.iter().enumerate() {
            write(dtype, &mut buf, i, v, Rounding::default());
        }
        (0..values.len()).map(|i| read(dtype, &buf, i)).collect()
    }

    #[test]
    fn packed_integers_wrap_from_integers_and_zero_out_of_range_floats() {
        let got = round_trip(
            DType::I4,
            &[Num::Int(-9), Num::Int(7), Num::Float(-8.5), Num::Float(8.0), Num::Float(-3.7)],
        );
        let want: Vec<Num> = [7, 7, -8, 0, -3].iter().map(|&v| Num::Int(v)).collect();
        assert_eq!(got, want);
        let got = round_trip(DType::U2, &[Num::Int(5), Num::Float(3.9), Num::Float(-1.0)]);
        assert_eq!(got, vec![Num::Int(1), Num::Int(3), Num::Int(0)]);
    }

    #[test]
    fn six_bit_elements_straddle_byte_boundaries() {
        let values: Vec<Num> = [0.5, -7.5, 3.0, 1.25, 6.0].iter().map(|&v| Num::Float(v)).collect();
        assert_eq!(round_trip(DType::F6E2M3, &values), values);
    }

    #[test]
    fn half_types_round_an_f64_once() {
        // Just above the midpoint between two bf16 values: rounding through f32 first would tie.
        let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        assert_eq!(to_bf16(x), bf16::from_bits(0x3F81));
        assert_eq!(to_f16(65520.0), f16::INFINITY);
        assert_eq!(to_f16(1.0 + 2f64.powi(-11)), f16::ONE);
    }
}
