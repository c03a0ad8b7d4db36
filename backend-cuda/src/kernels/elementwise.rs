//! Elementwise kernels: unary, binary with broadcasting, variadic, Clip, Where, Cast.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::float8::RoundMode;
use onyx_core::ops::codes::{BinaryCode, UnaryCode};
use onyx_core::ops::elementwise::{
    BINARY_OPS, Binary, BinaryKind, Clip, UNARY_OPS, Unary, Variadic, VariadicKind,
};
use onyx_core::ops::generate::{Cast, CastLike};
use onyx_kernels::Kernel;

use super::{CudaKernel, Io, Registry, Strided, is_float, is_int, suffix, unsupported, width};
use crate::gpu::{Args, Gpu};

/// `UnaryArgs` in elementwise.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
struct UnaryArgs {
    n: i64,
    op: i32,
    alpha: f32,
    beta: f32,
    gamma: f32,
}

// SAFETY: plain `#[repr(C)]` data matching `struct UnaryArgs` in elementwise.cu.
unsafe impl cudarc::driver::DeviceRepr for UnaryArgs {}

/// A per-dtype entry point name, leaked once per (prefix, dtype) so kernels
/// can hold `&'static str` names.
pub(crate) fn entry(prefix: &str, dtype: DType) -> Result<&'static str, EpError> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static NAMES: Mutex<Option<HashMap<String, &'static str>>> = Mutex::new(None);
    let sfx = suffix(dtype).ok_or_else(|| unsupported(prefix, dtype))?;
    let name = format!("{prefix}_{sfx}");
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    let map = names.get_or_insert_with(HashMap::new);
    Ok(*map.entry(name.clone()).or_insert_with(|| Box::leak(name.into_boxed_str())))
}

/// One launch of a `(UnaryArgs, x, y)` entry point over the output.
struct UnaryKernel {
    name: &'static str,
    args: UnaryArgs,
}

impl UnaryKernel {
    fn run(&self, gpu: &Gpu, io: &Io<'_>, x: u64) -> Result<(), EpError> {
        let n = io.output(0)?.numel() as i64;
        let f = gpu.function(Kernel::Elementwise, self.name)?;
        let args = Args::new().push(UnaryArgs { n, ..self.args }).push(x).push(io.out_ptr(0)?);
        // SAFETY: matches `(UnaryArgs, const T*, T*)`; x and y hold n elements.
        unsafe { args.launch(gpu, &f, gpu.grid(n as u64)) }
    }
}

impl CudaKernel for UnaryKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        self.run(gpu, io, io.in_ptr(0)?)
    }

    fn in_place(&self) -> bool {
        !self.name.starts_with("float_test")
    }
}

fn build_unary(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let kind = spec.op_as::<Unary>()?.kind;
    let dtype = spec.input_dtype(0)?;
    let args = |op: u32, p: [f32; 3]| UnaryArgs {
        n: 0,
        op: op as i32,
        alpha: p[0],
        beta: p[1],
        gamma: p[2],
    };
    if is_float(dtype) {
        if let Some((code, p)) = kind.float_code() {
            let test = matches!(code, UnaryCode::IsNan | UnaryCode::IsInf);
            let prefix = if test { "float_test" } else { "unary_float" };
            let args = args(code.code(), p);
            return Ok(Box::new(UnaryKernel { name: entry(prefix, dtype)?, args }));
        }
    } else if let Some(code) = kind.int_code(dtype) {
        return Ok(Box::new(UnaryKernel {
            name: entry("unary_int", dtype)?,
            args: args(code.code(), [0.0; 3]),
        }));
    }
    Err(unsupported(&spec.node.op_type, dtype))
}

/// The binary code in elementwise.cu, as the kernels' `int` argument.
fn cuda_code(code: BinaryCode) -> i32 {
    code.code() as i32
}

/// Broadcasting binary op: `binary_T`, `compare_T`, the vectorized same-shape
/// paths, or `pow_mixed` for an exponent of another dtype.
#[derive(Clone)]
struct BinaryKernel {
    code: i32,
    dtype: DType,
    /// `binary_T` or `compare_T`.
    name: &'static str,
    /// Pow's exponent dtype when it differs from the base's.
    mixed: Option<DType>,
}

impl BinaryKernel {
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        gpu: &Gpu,
        out: &[usize],
        sa: &[usize],
        sb: &[usize],
        a: u64,
        b: u64,
        y: u64,
    ) -> Result<(), EpError> {
        let n = out.iter().product::<usize>() as i64;
        let same = sa == out && sb == out;
        if let Some(bt) = self.mixed {
            let s = Strided::broadcast(out, &[sa, sb])?;
            let f = gpu.function(Kernel::Elementwise, "pow_mixed")?;
            let args = Args::new()
                .push(s)
                .push(self.dtype.to_onnx())
                .push(bt.to_onnx())
                .push(a)
                .push(b)
                .push(y);
            // SAFETY: matches `pow_mixed(Strided, int, int, const void*, const void*, void*)`.
            return unsafe { args.launch(gpu, &f, gpu.grid(n as u64)) };
        }
        let vec = match self.dtype {
            DType::F32 if same && self.name.starts_with("binary") => Some("binary_vec4_f32"),
            DType::F16 if same && self.name.starts_with("binary") => Some("binary_vec8_f16"),
            DType::BF16 if same && self.name.starts_with("binary") => Some("binary_vec8_bf16"),
            _ => None,
        };
        if let Some(name) = vec {
            let f = gpu.function(Kernel::Elementwise, name)?;
            let lanes = if self.dtype == DType::F32 { 4 } else { 8 };
            let args = Args::new().push(n).push(self.code).push(a).push(b).push(y);
            // SAFETY: matches `(i64 n, int op, const T*, const T*, T*)`; all hold n elements.
            return unsafe { args.launch(gpu, &f, gpu.grid((n as u64).div_ceil(lanes))) };
        }
        if self.name.starts_with("binary") && is_float(self.dtype) {
            let lanes = 16 / self.dtype.byte_size(1).unwrap_or(4);
            if let Some((mode, len)) = repeat_pattern(out, sa, sb, lanes) {
                let f = gpu.function(Kernel::Elementwise, entry("binary_rep", self.dtype)?)?;
                let args = Args::new()
                    .push(n)
                    .push(self.code)
                    .push(len as i64)
                    .push(mode)
                    .push(a)
                    .push(b)
                    .push(y);
                // SAFETY: matches `binary_rep_T(i64, int, i64, int, const T*, const T*, T*)`;
                // the full operand and y hold n elements, the other `n / len` or `len`.
                return unsafe {
                    args.launch(gpu, &f, gpu.grid((n as u64).div_ceil(lanes as u64)))
                };
            }
        }
        let s = Strided::broadcast(out, &[sa, sb])?;
        let f = gpu.function(Kernel::Elementwise, self.name)?;
        let args = Args::new().push(s).push(self.code).push(a).push(b).push(y);
        // SAFETY: matches `(Strided, int, const T*, const T*, T* or u8*)`; the strides
        // stay inside each input by construction.
        unsafe { args.launch(gpu, &f, gpu.grid(n as u64)) }
    }
}

impl CudaKernel for BinaryKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (sa, sb) = (&io.input(0)?.shape, &io.input(1)?.shape);
        self.run(gpu, &io.output(0)?.shape, sa, sb, io.in_ptr(0)?, io.in_ptr(1)?, io.out_ptr(0)?)
    }

    fn in_place(&self) -> bool {
        self.mixed.is_none() && self.name.starts_with("binary")
    }
}

/// How an operand repeats along an output of shape `out`: `Some((0, len))`
/// when it is the output's trailing part of `len` elements (`len` 1 for a
/// scalar), `Some((1, len))` when it holds one value per row of `len`.
fn repetition(out: &[usize], part: &[usize]) -> Option<(i32, usize)> {
    if part.len() > out.len() {
        return None;
    }
    let pad = out.len() - part.len();
    let p: Vec<usize> = std::iter::repeat_n(1, pad).chain(part.iter().copied()).collect();
    let first = p.iter().position(|&d| d != 1).unwrap_or(p.len());
    if p[first..] == out[first..] {
        return Some((0, out[first..].iter().product()));
    }
    let last = p.iter().rposition(|&d| d != 1)?;
    if p[..=last] == out[..=last] && p[last + 1..].iter().all(|&d| d == 1) {
        return Some((1, out[last + 1..].iter().product()));
    }
    None
}

/// The `binary_rep` launch for `a op b` into `out`, when one operand has the
/// output's shape and the other repeats along it in a way the kernel's
/// `lanes`-wide loads can follow: `(mode, len)` as in elementwise.cu.
fn repeat_pattern(out: &[usize], sa: &[usize], sb: &[usize], lanes: usize) -> Option<(i32, usize)> {
    let (base, part) = if sa == out {
        (0, sb)
    } else if sb == out {
        (2, sa)
    } else {
        return None;
    };
    let (kind, len) = repetition(out, part)?;
    let fits = match kind {
        0 => len == 1 || len % lanes == 0,
        _ => len % lanes == 0,
    };
    (fits && len > 0).then_some((base + kind, len))
}

fn binary_kernel(kind: BinaryKind, dtype: DType, other: DType) -> Result<BinaryKernel, EpError> {
    let code = cuda_code(kind.code());
    let bad = || unsupported(&format!("{kind:?}"), dtype);
    if kind == BinaryKind::Pow && other != dtype {
        let base_ok = is_float(dtype) || matches!(dtype, DType::I32 | DType::I64);
        if !(base_ok && (is_float(other) || is_int(other))) {
            return Err(bad());
        }
        return Ok(BinaryKernel { code, dtype, name: "pow_mixed", mixed: Some(other) });
    }
    let name = if kind.is_predicate() {
        let logical = matches!(kind, BinaryKind::And | BinaryKind::Or | BinaryKind::Xor);
        if logical != (dtype == DType::Bool) && logical {
            return Err(bad());
        }
        entry("compare", dtype)?
    } else {
        let float_ok = !matches!(
            kind,
            BinaryKind::BitShiftLeft
                | BinaryKind::BitShiftRight
                | BinaryKind::BitwiseAnd
                | BinaryKind::BitwiseOr
                | BinaryKind::BitwiseXor
        );
        let ok = (is_float(dtype) && float_ok)
            || is_int(dtype)
            || (dtype == DType::Bool
                && matches!(
                    kind,
                    BinaryKind::BitwiseAnd | BinaryKind::BitwiseOr | BinaryKind::BitwiseXor
                ));
        if !ok {
            return Err(bad());
        }
        entry("binary", dtype)?
    };
    Ok(BinaryKernel { code, dtype, name, mixed: None })
}

/// com.microsoft `BiasGelu`: `Gelu(A + B)` with the bias along A's last axis,
/// one pass of the binary kernels (`BINARY_BIAS_GELU`) in place of an Add and a Gelu.
fn build_bias_gelu(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let dtype = spec.input_dtype(0)?;
    if !is_float(dtype) || spec.input_dtype(1)? != dtype {
        return Err(unsupported("BiasGelu", dtype));
    }
    let code = cuda_code(BinaryCode::BiasGelu);
    Ok(Box::new(BinaryKernel { code, dtype, name: entry("binary", dtype)?, mixed: None }))
}

fn build_binary(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let kind = spec.op_as::<Binary>()?.kind;
    Ok(Box::new(binary_kernel(kind, spec.input_dtype(0)?, spec.input_dtype(1)?)?))
}

/// Max/Min/Sum/Mean over any number of inputs: a chain of binary launches into
/// the output, then a scale for Mean.
struct VariadicKernel {
    step: BinaryKernel,
    mean: Option<&'static str>,
}

impl CudaKernel for VariadicKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let present: Vec<usize> = (0..io.inputs.len()).filter(|&i| io.has_input(i)).collect();
        let y = io.out_ptr(0)?;
        let out = &io.output(0)?.shape;
        let Some((&first, rest)) = present.split_first() else {
            return Err(EpError::Kernel("no inputs".into()));
        };
        let (a, sa) = (io.in_ptr(first)?, &io.input(first)?.shape);
        match rest.split_first() {
            // One input: broadcast it into the output as max(x, x) = x.
            None => {
                let copy = BinaryKernel { code: cuda_code(BinaryCode::Max), ..self.step.clone() };
                copy.run(gpu, out, sa, sa, a, a, y)?
            }
            Some((&second, others)) => {
                let (b, sb) = (io.in_ptr(second)?, &io.input(second)?.shape);
                self.step.run(gpu, out, sa, sb, a, b, y)?;
                for &i in others {
                    let (b, sb) = (io.in_ptr(i)?, &io.input(i)?.shape);
                    self.step.run(gpu, out, out, sb, y, b, y)?;
                }
            }
        }
        if let Some(name) = self.mean {
            let k = UnaryKernel {
                name,
                args: UnaryArgs {
                    op: UnaryCode::Scale.code() as i32,
                    alpha: 1.0 / present.len() as f32,
                    ..Default::default()
                },
            };
            k.run(gpu, io, y)?;
        }
        Ok(())
    }
}

fn build_variadic(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let v = spec.op_as::<Variadic>()?;
    let dtype = spec.input_dtype(0)?;
    let kind = cuda_code(v.kind.step_code());
    if !(is_float(dtype) || is_int(dtype)) || (v.kind == VariadicKind::Mean && !is_float(dtype)) {
        return Err(unsupported(&spec.node.op_type, dtype));
    }
    let step = BinaryKernel { code: kind, dtype, name: entry("binary", dtype)?, mixed: None };
    let mean = (v.kind == VariadicKind::Mean).then(|| entry("unary_float", dtype)).transpose()?;
    Ok(Box::new(VariadicKernel { step, mean }))
}

/// Clip with bounds from attributes or from value inputs 1 and 2.
struct ClipKernel {
    attr: (Option<f32>, Option<f32>),
    name: &'static str,
}

impl CudaKernel for ClipKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let bound = |i: usize, attr: Option<f32>| -> Result<Option<f64>, EpError> {
            if let Some(a) = attr {
                return Ok(Some(a as f64));
            }
            if io.has_value(i) {
                return io
                    .floats(i)?
                    .first()
                    .map(|v| Some(*v))
                    .ok_or_else(|| EpError::Kernel("empty Clip bound".into()));
            }
            Ok(None)
        };
        let lo = bound(1, self.attr.0)?;
        let hi = bound(2, self.attr.1)?;
        let n = io.output(0)?.numel() as i64;
        let f = gpu.function(Kernel::Elementwise, self.name)?;
        let args = Args::new()
            .push(n)
            .push(lo.is_some() as i32)
            .push(hi.is_some() as i32)
            .push(lo.unwrap_or(0.0))
            .push(hi.unwrap_or(0.0))
            .push(io.in_ptr(0)?)
            .push(io.out_ptr(0)?);
        // SAFETY: matches `clip_T(i64, int, int, double, double, const T*, T*)`.
        unsafe { args.launch(gpu, &f, gpu.grid(n as u64)) }
    }

    fn in_place(&self) -> bool {
        true
    }
}

fn build_clip(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let c = spec.op_as::<Clip>()?;
    let dtype = spec.input_dtype(0)?;
    if !(is_float(dtype) || is_int(dtype)) {
        return Err(unsupported("Clip", dtype));
    }
    Ok(Box::new(ClipKernel { attr: (c.min, c.max), name: entry("clip", dtype)? }))
}

/// Where by element width.
struct WhereKernel {
    name: &'static str,
}

impl CudaKernel for WhereKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let out = &io.output(0)?.shape;
        let s = Strided::broadcast(
            out,
            &[&io.input(0)?.shape, &io.input(1)?.shape, &io.input(2)?.shape],
        )?;
        let f = gpu.function(Kernel::Elementwise, self.name)?;
        let args = Args::new()
            .push(s)
            .push(io.in_ptr(0)?)
            .push(io.in_ptr(1)?)
            .push(io.in_ptr(2)?)
            .push(io.out_ptr(0)?);
        // SAFETY: matches `where_wN(Strided, const u8*, const W*, const W*, W*)`.
        unsafe { args.launch(gpu, &f, gpu.grid(s.numel as u64)) }
    }

    fn in_place(&self) -> bool {
        true
    }
}

fn build_where(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let dtype = spec.input_dtype(1)?;
    let name = match width(dtype) {
        Some(1) => "where_w1",
        Some(2) => "where_w2",
        Some(4) => "where_w4",
        Some(8) => "where_w8",
        _ => return Err(unsupported("Where", dtype)),
    };
    Ok(Box::new(WhereKernel { name }))
}

/// Cast between any two of the supported dtypes.
struct CastKernel {
    from: DType,
    to: DType,
}

impl CudaKernel for CastKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let n = io.output(0)?.numel() as i64;
        let f = gpu.function(Kernel::Elementwise, "cast")?;
        let args = Args::new()
            .push(n)
            .push(self.from.to_onnx())
            .push(self.to.to_onnx())
            .push(io.in_ptr(0)?)
            .push(io.out_ptr(0)?);
        // SAFETY: matches `cast(i64, int, int, const void*, void*)`; both hold n elements.
        unsafe { args.launch(gpu, &f, gpu.grid(n as u64)) }
    }
}

/// Whether `cast.cu` handles a dtype: float8, float8e8m0, float4 and packed 2- and 4-bit integers.
fn is_small(d: DType) -> bool {
    use DType::*;
    matches!(d, F8E4M3FN | F8E4M3FNUZ | F8E5M2 | F8E5M2FNUZ | F8E8M0 | F4E2M1 | U4 | I4 | U2 | I2)
}

/// Cast where one side is a small type (`cast.cu`), with Cast's saturation and e8m0 rounding.
struct SmallCastKernel {
    from: DType,
    to: DType,
    saturate: bool,
    round_mode: i32,
}

impl CudaKernel for SmallCastKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let n = io.output(0)?.numel() as i64;
        let f = gpu.function(Kernel::Cast, "cast_small")?;
        let args = Args::new()
            .push(n)
            .push(self.from.to_onnx())
            .push(self.to.to_onnx())
            .push(i32::from(self.saturate))
            .push(self.round_mode)
            .push(io.in_ptr(0)?)
            .push(io.out_ptr(0)?);
        // SAFETY: matches `cast_small(i64, int, int, int, int, const void*, void*)`;
        // x and y hold n elements of their dtypes (packed types n·bits/8 bytes, rounded up).
        unsafe { args.launch(gpu, &f, gpu.grid(n as u64)) }
    }
}

fn build_cast(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let from = spec.input_dtype(0)?;
    let to = spec.output_dtype(0)?;
    let fits = |d: DType| suffix(d).is_some() || is_small(d);
    if (is_small(from) || is_small(to)) && fits(from) && fits(to) {
        let (saturate, mode) = if let Ok(c) = spec.op_as::<Cast>() {
            (c.saturate, c.round_mode)
        } else if let Ok(c) = spec.op_as::<CastLike>() {
            (c.saturate, c.round_mode)
        } else {
            (true, RoundMode::Up)
        };
        let round_mode = match mode {
            RoundMode::Up => 0,
            RoundMode::Down => 1,
            RoundMode::Nearest => 2,
        };
        return Ok(Box::new(SmallCastKernel { from, to, saturate, round_mode }));
    }
    for d in [from, to] {
        if suffix(d).is_none() {
            return Err(EpError::Unsupported(format!(
                "Cast from {from} to {to} is not implemented on CUDA"
            )));
        }
    }
    Ok(Box::new(CastKernel { from, to }))
}

/// Registers the elementwise kernels.
pub(crate) fn register_all(r: &mut Registry) {
    for op in UNARY_OPS {
        r.register(op, build_unary);
    }
    for op in BINARY_OPS {
        r.register(op, build_binary);
    }
    for op in ["Max", "Min", "Sum", "Mean"] {
        r.register(op, build_variadic);
    }
    r.register("Clip", build_clip);
    r.register("Where", build_where);
    r.register("Cast", build_cast);
    r.register("CastLike", build_cast);
    r.register_in(onyx_core::graph::MICROSOFT_DOMAIN, "BiasGelu", build_bias_gelu);
}

#[cfg(test)]
mod tests {
    use super::{repeat_pattern, repetition};

    #[test]
    fn bias_scalar_and_per_row_operands_are_recognized_as_repetitions() {
        assert_eq!(repetition(&[8, 128, 768], &[768]), Some((0, 768)));
        assert_eq!(repetition(&[8, 128, 768], &[1, 1, 768]), Some((0, 768)));
        assert_eq!(repetition(&[8, 128, 768], &[128, 768]), Some((0, 128 * 768)));
        assert_eq!(repetition(&[8, 128, 768], &[]), Some((0, 1)));
        assert_eq!(repetition(&[8, 128, 768], &[8, 128, 1]), Some((1, 768)));
        assert_eq!(repetition(&[8, 12, 64, 64], &[8, 1, 1, 64]), None);
        assert_eq!(repetition(&[4, 6], &[4, 1]), Some((1, 6)));
    }

    #[test]
    fn repeated_operands_take_the_vector_path_only_when_lanes_stay_in_step() {
        assert_eq!(repeat_pattern(&[2, 8], &[2, 8], &[8], 8), Some((0, 8)));
        assert_eq!(repeat_pattern(&[2, 8], &[8], &[2, 8], 8), Some((2, 8)));
        assert_eq!(repeat_pattern(&[2, 6], &[2, 6], &[6], 8), None);
        assert_eq!(repeat_pattern(&[2, 6], &[2, 6], &[], 8), Some((0, 1)));
        assert_eq!(repeat_pattern(&[4, 16], &[4, 16], &[4, 1], 4), Some((1, 16)));
        assert_eq!(repeat_pattern(&[4, 6], &[4, 6], &[4, 1], 4), None);
    }
}
