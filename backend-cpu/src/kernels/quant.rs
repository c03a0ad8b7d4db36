//! CPU kernels for the quantization ops: QuantizeLinear, DequantizeLinear and
//! DynamicQuantizeLinear here, the integer products in [`qlinear`].
//!
//! Arithmetic follows the ONNX reference implementation (numpy): `x / scale` in
//! numpy's promoted type, round half to even, then the zero point and the
//! saturation; dequantization in float32.

mod qlinear;

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::quant::{DequantizeLinear, QuantizeLinear, ScaleLayout};

use super::cast::{Num, Rounding, read, to_bf16, to_f16, write_all};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// Rounds `v` to the precision of a float dtype (f64 and integers keep f64).
pub(crate) fn round_to(d: DType, v: f64) -> f64 {
    match d {
        DType::F32 => v as f32 as f64,
        DType::F16 => to_f16(v).to_f64(),
        DType::BF16 => to_bf16(v).to_f64(),
        _ => v,
    }
}

/// The type numpy computes `a op b` in, for the float and int32 inputs quantization takes.
pub(crate) fn promote(a: DType, b: DType) -> DType {
    use DType::*;
    match (a, b) {
        (F8E8M0, o) | (o, F8E8M0) if matches!(o, F16 | BF16 | F32 | F64) => o,
        (x, y) if x == y && matches!(x, F16 | BF16 | F32 | F64) => x,
        (x, y) if matches!(x, I32 | F64) || matches!(y, I32 | F64) => F64,
        _ => F32,
    }
}

/// Maps element indices of x to indices of its scale (and zero point).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScaleIndex {
    layout: ScaleLayout,
    /// Elements after the axis.
    inner: usize,
    /// x's length along the axis.
    len: usize,
    /// The scale's length along the axis.
    scale_len: usize,
}

impl ScaleIndex {
    /// Resolves the layout of `scale` for `x`.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when the shapes do not fit.
    pub(crate) fn new(
        x: &[usize],
        scale: &[usize],
        axis: i64,
        block: usize,
    ) -> Result<Self, EpError> {
        let layout = ScaleLayout::resolve(x, scale, axis, block)
            .map_err(|e| EpError::Kernel(e.to_string()))?;
        let (inner, len, scale_len) = match layout {
            ScaleLayout::PerTensor => (1, 1, 1),
            ScaleLayout::PerAxis { axis } | ScaleLayout::Blocked { axis, .. } => {
                (x[axis + 1..].iter().product(), x[axis], scale[if block == 0 { 0 } else { axis }])
            }
        };
        Ok(ScaleIndex { layout, inner, len, scale_len })
    }

    /// The scale index of element `i` of x.
    pub(crate) fn of(&self, i: usize) -> usize {
        match self.layout {
            ScaleLayout::PerTensor => 0,
            ScaleLayout::PerAxis { .. } => (i / self.inner) % self.len,
            ScaleLayout::Blocked { block, .. } => {
                let (outer, a, n) =
                    (i / (self.len * self.inner), (i / self.inner) % self.len, i % self.inner);
                (outer * self.scale_len + a / block) * self.inner + n
            }
        }
    }
}

/// The scale (input 1) and optional zero point (input 2) as f64, with their index map.
struct Params {
    index: ScaleIndex,
    scales: Vec<f64>,
    zeros: Option<Vec<f64>>,
}

impl Params {
    fn read(io: &KernelIo, axis: i64, block: usize) -> Result<Self, EpError> {
        let x = &io.in_view(0)?.shape;
        let s_shape = &io.in_view(1)?.shape;
        let index = ScaleIndex::new(x, s_shape, axis, block)?;
        let scales = io.floats(1)?;
        let zeros = match io.input_view(2) {
            Some(z) => {
                if z.numel() != scales.len() {
                    return Err(EpError::Kernel(format!(
                        "zero point of shape {:?} does not match the scale's {s_shape:?}",
                        z.shape
                    )));
                }
                Some(io.floats(2)?)
            }
            None => None,
        };
        Ok(Params { index, scales, zeros })
    }
}

/// The inclusive range of an integer quantized type.
fn int_range(d: DType) -> Option<(f64, f64)> {
    use DType::*;
    Some(match d {
        U8 => (0.0, 255.0),
        I8 => (-128.0, 127.0),
        U16 => (0.0, 65535.0),
        I16 => (-32768.0, 32767.0),
        U4 => (0.0, 15.0),
        I4 => (-8.0, 7.0),
        U2 => (0.0, 3.0),
        I2 => (-2.0, 1.0),
        _ => return None,
    })
}

fn is_float8(d: DType) -> bool {
    matches!(d, DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ)
}

struct QuantizeKernel {
    op: QuantizeLinear,
    x: DType,
    compute: DType,
    out: DType,
}

impl CpuKernel for QuantizeKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let Params { index, scales, zeros } = Params::read(io, self.op.axis, self.op.block_size)?;
        let x = io.input_bytes(0)?;
        let ct = self.compute;
        let range = int_range(self.out);
        let float8 = is_float8(self.out);
        let rounding = Rounding { saturate: self.op.saturate, ..Rounding::default() };
        write_all(io, self.out, rounding, |i| {
            let si = index.of(i);
            let xv = round_to(ct, read(self.x, x, i).to_f64());
            let q = round_to(ct, xv / round_to(ct, scales[si]));
            let zp = zeros.as_ref().map_or(0.0, |z| z[si]);
            match range {
                Some((lo, hi)) => Num::Int((q.round_ties_even() + zp).clamp(lo, hi) as i128),
                // The reference ignores float8 zero points (the spec requires them to be 0).
                None if float8 => Num::Float(q),
                None => Num::Float(round_to(ct, q + zp)),
            }
        })
    }
}

fn build_quantize(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let q = spec.op_as::<QuantizeLinear>()?.clone();
    let x = spec.input_dtype(0)?;
    let s = spec.input_dtype(1)?;
    let out = spec.output_dtype(0)?;
    if !matches!(x, DType::F32 | DType::F16 | DType::BF16 | DType::I32) {
        return Err(unsupported_dtype("QuantizeLinear", x));
    }
    if !matches!(s, DType::F32 | DType::F16 | DType::BF16 | DType::I32 | DType::F8E8M0) {
        return Err(unsupported_dtype("QuantizeLinear", s));
    }
    let compute = q.precision.unwrap_or_else(|| promote(x, s));
    Ok(Box::new(QuantizeKernel { op: q, x, compute, out }))
}

struct DequantizeKernel {
    op: DequantizeLinear,
    x: DType,
    /// Zero points are subtracted (not for float8 and float4 inputs, as in the reference).
    use_zero: bool,
    /// An int32 zero point makes numpy compute in f64.
    wide: bool,
    out: DType,
}

impl CpuKernel for DequantizeKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let Params { index, scales, zeros } = Params::read(io, self.op.axis, self.op.block_size)?;
        let zeros = zeros.filter(|_| self.use_zero);
        let x = io.input_bytes(0)?;
        let narrow = |v: f64| if self.wide { v } else { v as f32 as f64 };
        write_all(io, self.out, Rounding::default(), |i| {
            let si = index.of(i);
            let xv = read(self.x, x, i).to_f64() as f32 as f64;
            let dx = zeros.as_ref().map_or(xv, |z| narrow(xv - z[si]));
            Num::Float(narrow(dx * scales[si]))
        })
    }
}

fn build_dequantize(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let d = spec.op_as::<DequantizeLinear>()?.clone();
    let x = spec.input_dtype(0)?;
    let s = spec.input_dtype(1)?;
    let out = spec.output_dtype(0)?;
    let zero = spec.input_dtypes.get(2).copied().flatten();
    if !(int_range(x).is_some() || x == DType::I32 || onyx_core::float8::is_small_float(x)) {
        return Err(unsupported_dtype("DequantizeLinear", x));
    }
    if !matches!(s, DType::F32 | DType::F16 | DType::BF16 | DType::F8E8M0) {
        return Err(unsupported_dtype("DequantizeLinear", s));
    }
    let use_zero = !is_float8(x) && x != DType::F4E2M1;
    if let Some(z) = zero.filter(|_| use_zero)
        && z != x
    {
        return Err(EpError::Kernel(format!("DequantizeLinear zero point is {z} but x is {x}")));
    }
    Ok(Box::new(DequantizeKernel { op: d, x, use_zero, wide: zero == Some(DType::I32), out }))
}

/// DynamicQuantizeLinear on float32, step for step as the reference computes it in f32.
struct DynamicQuantizeKernel;

impl CpuKernel for DynamicQuantizeKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let x = io.input::<f32>(0)?;
        if x.is_empty() {
            return Err(EpError::Kernel("DynamicQuantizeLinear of an empty tensor".into()));
        }
        // numpy's max/min propagate NaN.
        let nan = x.iter().any(|v| v.is_nan());
        let pick =
            |f: fn(f32, f32) -> f32| if nan { f32::NAN } else { x.iter().copied().fold(0.0, f) };
        let (hi, lo) = (pick(f32::max), pick(f32::min));
        let scale = if hi == lo { 1.0 } else { hi - lo } / 255.0f32;
        let initial = 0.0f32 - lo / scale;
        // Python's min/max builtins: NaN compares false, so the bound is kept.
        let clamped = if initial > 255.0 || initial.is_nan() {
            255.0
        } else if initial < 0.0 {
            0.0
        } else {
            initial
        };
        let zp = clamped.round_ties_even();
        for (o, &v) in io.output::<u8>(0)?.iter_mut().zip(x) {
            *o = ((v / scale).round_ties_even() + zp).clamp(0.0, 255.0) as u8;
        }
        if io.has_output(1) {
            io.output::<f32>(1)?[0] = scale;
        }
        if io.has_output(2) {
            io.output::<u8>(2)?[0] = zp as u8;
        }
        Ok(())
    }
}

fn build_dynamic(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    match spec.input_dtype(0)? {
        DType::F32 => Ok(Box::new(DynamicQuantizeKernel)),
        d => Err(unsupported_dtype("DynamicQuantizeLinear", d)),
    }
}

/// Registers the quantization kernels.
pub(crate) fn register_all(r: &mut KernelRegistry) {
    r.register("QuantizeLinear", build_quantize);
    r.register("DequantizeLinear", build_dequantize);
    r.register("DynamicQuantizeLinear", build_dynamic);
    qlinear::register_all(r);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_scales_repeat_along_their_axis() {
        // x [2, 5], blocks of 2 along axis 1: scale [2, 3].
        let ix = ScaleIndex::new(&[2, 5], &[2, 3], 1, 2).unwrap();
        let got: Vec<usize> = (0..10).map(|i| ix.of(i)).collect();
        assert_eq!(got, vec![0, 0, 1, 1, 2, 3, 3, 4, 4, 5]);
        let ix = ScaleIndex::new(&[3, 2], &[3], 0, 0).unwrap();
        assert_eq!((0..6).map(|i| ix.of(i)).collect::<Vec<_>>(), vec![0, 0, 1, 1, 2, 2]);
    }

    #[test]
    fn numpy_promotion_keeps_half_types_and_widens_int32() {
        assert_eq!(promote(DType::F16, DType::F16), DType::F16);
        assert_eq!(promote(DType::F16, DType::F32), DType::F32);
        assert_eq!(promote(DType::F16, DType::BF16), DType::F32);
        assert_eq!(promote(DType::I32, DType::F32), DType::F64);
        assert_eq!(promote(DType::BF16, DType::F8E8M0), DType::BF16);
    }
}
