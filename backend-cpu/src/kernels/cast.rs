//! Cast and CastLike between the real numeric types and bool.
//! Integers convert through i128 (exact, wrapping like C), anything with a float through f64.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};

use super::dispatch::{AsF64, numeric};
use super::elementwise::map_to;
use super::{CpuKernel, KernelIo, KernelRegistry, in_dtype, out_dtype, unsupported_dtype};

trait Elem: AsF64 + bytemuck::Pod + Send + Sync {
    const INT: bool;
    fn to_i128(self) -> i128;
    fn from_i128(v: i128) -> Self;
}

macro_rules! elem_int {
    ($($t:ty),*) => { $(impl Elem for $t {
        const INT: bool = true;
        fn to_i128(self) -> i128 { self as i128 }
        fn from_i128(v: i128) -> Self { v as $t }
    })* };
}
elem_int!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! elem_float {
    ($($t:ty),*) => { $(impl Elem for $t {
        const INT: bool = false;
        fn to_i128(self) -> i128 { AsF64::to_f64(self) as i128 }
        fn from_i128(v: i128) -> Self { <$t as AsF64>::from_f64(v as f64) }
    })* };
}
elem_float!(f32, f64, half::f16, half::bf16);

fn convert<S: Elem, D: Elem>(x: S) -> D {
    if S::INT && D::INT { D::from_i128(x.to_i128()) } else { D::from_f64(x.to_f64()) }
}

fn cast<S: Elem, D: Elem>(io: &KernelIo) -> Result<(), EpError> {
    map_to(io, convert::<S, D>)
}

fn to_bool<S: Elem>(io: &KernelIo) -> Result<(), EpError> {
    map_to(io, |x: S| (x.to_f64() != 0.0) as u8)
}

struct CastKernel {
    from: DType,
    to: DType,
}

/// Bool is stored as bytes 0/1: read it as u8.
fn storage(d: DType) -> DType {
    if d == DType::Bool { DType::U8 } else { d }
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
        let unsupported = || unsupported_dtype("Cast", self.from);
        if self.to == DType::Bool {
            return numeric!(storage(self.from), S => to_bool::<S>(io), else Err(unsupported()));
        }
        numeric!(storage(self.from), S => numeric!(self.to, D => cast::<S, D>(io), else Err(unsupported())),
            else Err(unsupported()))
    }
}

fn castable(d: DType) -> bool {
    d == DType::Bool
        || d.is_byte_aligned()
            && (d.is_int() || matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16))
}

fn build_cast(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let from = in_dtype(spec, 0)?;
    let to = out_dtype(spec, 0)?;
    for d in [from, to] {
        if !castable(d) {
            return Err(EpError::Unsupported(format!(
                "Cast from {from} to {to} is not implemented on the CPU"
            )));
        }
    }
    Ok(Box::new(CastKernel { from, to }))
}

/// Registers Cast and CastLike.
pub fn register_all(r: &mut KernelRegistry) {
    r.register("Cast", build_cast);
    r.register("CastLike", build_cast);
}
