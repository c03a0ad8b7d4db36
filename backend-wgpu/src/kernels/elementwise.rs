//! Elementwise kernels: unary, binary with broadcasting, variadic, Clip, Where, Cast.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::codes::{BinaryCode, UnaryCode};
use onyx_core::ops::elementwise::{
    BINARY_OPS, Binary, BinaryKind, Clip, UNARY_OPS, Unary, Variadic, VariadicKind,
};
use onyx_shaders::Shader;

use super::{
    Bind, Dispatch, GpuKernel, Grid, Io, Registry, broadcast_strides, is_float, is_int, pad8,
    unsupported, width, words,
};

fn onnx(d: DType) -> f64 {
    d.to_onnx() as f64
}

struct UnaryKernel {
    shader: Shader,
    op: u32,
    params: [f32; 3],
    dt_in: DType,
    dt_out: DType,
}

impl GpuKernel for UnaryKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let n = io.output(0)?.numel();
        let mut params = vec![super::u32_of(n)?];
        params.extend(self.params.iter().map(|f| f.to_bits()));
        if self.shader == Shader::UnaryFloat && io.aliased(0) {
            let mut d = Dispatch::new(self.shader, params, &[], Grid::Invocations(n as u64))
                .with("OP", self.op);
            d.entry = "main_inplace";
            d.binds = vec![(2, Bind::Out(0))];
            return Ok(vec![d.with("DT_IN", onnx(self.dt_in)).with("DT_OUT", onnx(self.dt_out))]);
        }
        let d = Dispatch::new(
            self.shader,
            params,
            &[Bind::In(0), Bind::Out(0)],
            Grid::Invocations(words(self.dt_out, n)),
        )
        .with("OP", self.op);
        Ok(vec![if self.shader == Shader::UnaryFloat {
            d.with("DT_IN", onnx(self.dt_in)).with("DT_OUT", onnx(self.dt_out))
        } else {
            d.with("DT", onnx(self.dt_in))
        }])
    }

    fn in_place(&self) -> bool {
        self.shader == Shader::UnaryFloat && self.dt_in == DType::F32 && self.dt_out == DType::F32
    }
}

fn build_unary(spec: &KernelSpec<'_>) -> Result<Box<dyn GpuKernel>, EpError> {
    let kind = spec.op_as::<Unary>()?.kind;
    let dt_in = spec.input_dtype(0)?;
    let dt_out = spec.output_dtype(0)?;
    if is_float(dt_in) {
        let (code, params) =
            kind.float_code().ok_or_else(|| unsupported(&spec.node.op_type, dt_in))?;
        let op = code.code();
        return Ok(Box::new(UnaryKernel { shader: Shader::UnaryFloat, op, params, dt_in, dt_out }));
    }
    if is_int(dt_in) {
        let op = kind.int_code(dt_in).ok_or_else(|| unsupported(&spec.node.op_type, dt_in))?.code();
        return Ok(Box::new(UnaryKernel {
            shader: Shader::UnaryInt,
            op,
            params: [0.0; 3],
            dt_in,
            dt_out,
        }));
    }
    Err(unsupported(&spec.node.op_type, dt_in))
}

/// Clip with bounds from attributes or from value inputs 1 and 2.
struct ClipKernel {
    attr: (Option<f32>, Option<f32>),
    dtype: DType,
}

impl GpuKernel for ClipKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let bound = |i: usize, attr: Option<f32>, default: f32| -> Result<f32, EpError> {
            if let Some(a) = attr {
                return Ok(a);
            }
            if io.has_value(i) {
                return io
                    .floats(i)?
                    .first()
                    .map(|v| *v as f32)
                    .ok_or_else(|| EpError::Kernel("empty Clip bound".into()));
            }
            Ok(default)
        };
        let lo = bound(1, self.attr.0, f32::MIN)?;
        let hi = bound(2, self.attr.1, f32::MAX)?;
        UnaryKernel {
            shader: Shader::UnaryFloat,
            op: UnaryCode::Clip.code(),
            params: [lo, hi, 0.0],
            dt_in: self.dtype,
            dt_out: self.dtype,
        }
        .dispatches(io)
    }

    fn in_place(&self) -> bool {
        self.dtype == DType::F32
    }
}

fn build_clip(spec: &KernelSpec<'_>) -> Result<Box<dyn GpuKernel>, EpError> {
    let c = spec.op_as::<Clip>()?;
    let dtype = spec.input_dtype(0)?;
    if !is_float(dtype) {
        return Err(unsupported("Clip", dtype));
    }
    Ok(Box::new(ClipKernel { attr: (c.min, c.max), dtype }))
}

/// The binary_float code, for the kinds defined on floats.
fn float_binary(kind: BinaryKind) -> Option<u32> {
    use BinaryKind::*;
    let bits = matches!(
        kind,
        BitShiftLeft | BitShiftRight | BitwiseAnd | BitwiseOr | BitwiseXor | And | Or | Xor
    );
    (!bits).then(|| kind.code().code())
}

/// The binary_int code, for the kinds defined on `dtype` (bool: logic and Equal).
fn int_binary(kind: BinaryKind, dtype: DType) -> Option<u32> {
    use BinaryKind::*;
    let int = dtype != DType::Bool;
    let defined = match kind {
        And | Or | Xor => !int,
        Equal => true,
        Pow => false,
        _ => int,
    };
    defined.then(|| kind.code().code())
}

/// A broadcasting binary op (also each step of a variadic one).
struct BinaryKernel {
    shader: Shader,
    op: u32,
    dt_in: DType,
    dt_out: DType,
}

impl BinaryKernel {
    /// The dispatch for one output shape; `native_f16`: the adapter computes in f16.
    fn dispatch(
        &self,
        out: &[usize],
        a: (&[usize], Bind),
        b: (&[usize], Bind),
        native_f16: bool,
    ) -> Result<Dispatch, EpError> {
        if let Some(d) = self.vec4_dispatch(out, a, b, native_f16)? {
            return Ok(d);
        }
        let n: usize = out.iter().product();
        let mut params = vec![super::u32_of(n)?, super::u32_of(out.len())?];
        params.extend(pad8(out)?);
        params.extend(pad8(&broadcast_strides(a.0, out))?);
        params.extend(pad8(&broadcast_strides(b.0, out))?);
        params.push(super::u32_of(a.0.iter().product())?);
        let same = a.0 == out && b.0 == out;
        let mut d = Dispatch::new(
            self.shader,
            params,
            &[a.1, b.1, Bind::Out(0)],
            Grid::Invocations(words(self.dt_out, n)),
        )
        .with("OP", self.op)
        .with("DT_IN", onnx(self.dt_in))
        .with("DT_OUT", onnx(self.dt_out));
        if self.shader == Shader::BinaryFloat {
            d = d.with("SAME_SHAPE", same as u8 as f64);
            // In place over a or b: the output buffer stands for that operand.
            if a.1 == Bind::Out(0) {
                d.entry = "main_a";
                d.binds = vec![(2, b.1), (3, Bind::Out(0))];
                d.grid = Grid::Invocations(n as u64);
            } else if b.1 == Bind::Out(0) {
                d.entry = "main_b";
                d.binds = vec![(1, a.1), (3, Bind::Out(0))];
                d.grid = Grid::Invocations(n as u64);
            }
        }
        Ok(d)
    }

    /// The four-at-a-time path (f32, or f16 on adapters with native f16),
    /// when both inputs are the output or a trailing part of it with a
    /// multiple of 4 elements.
    fn vec4_dispatch(
        &self,
        out: &[usize],
        a: (&[usize], Bind),
        b: (&[usize], Bind),
        native_f16: bool,
    ) -> Result<Option<Dispatch>, EpError> {
        let shader = match self.dt_in {
            DType::F32 => Shader::BinaryVec4,
            DType::F16 if native_f16 => Shader::BinaryF16,
            _ => return Ok(None),
        };
        let vec4_op = self.shader == Shader::BinaryFloat
            && self.dt_out == self.dt_in
            && matches!(self.op, 0..=3 | 7 | 8);
        let (Some(la), Some(lb)) = (suffix_len(a.0, out), suffix_len(b.0, out)) else {
            return Ok(None);
        };
        let n: usize = out.iter().product();
        if !vec4_op || n == 0 || la % 4 != 0 || lb % 4 != 0 {
            return Ok(None);
        }
        let params = vec![super::u32_of(n / 4)?, super::u32_of(la / 4)?, super::u32_of(lb / 4)?];
        let mut d = Dispatch::new(
            shader,
            params,
            &[a.1, b.1, Bind::Out(0)],
            Grid::Invocations(n as u64 / 4),
        )
        .with("OP", self.op);
        if a.1 == Bind::Out(0) {
            d.entry = "main_a";
            d.binds = vec![(2, b.1), (3, Bind::Out(0))];
        } else if b.1 == Bind::Out(0) {
            d.entry = "main_b";
            d.binds = vec![(1, a.1), (3, Bind::Out(0))];
        }
        Ok(Some(d))
    }

    fn f32_in_place(&self) -> bool {
        self.shader == Shader::BinaryFloat && self.dt_in == DType::F32 && self.dt_out == DType::F32
    }
}

impl GpuKernel for BinaryKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let (a, b, y) = (io.input(0)?, io.input(1)?, io.output(0)?);
        let bind = |i| if io.aliased(i) { Bind::Out(0) } else { Bind::In(i) };
        Ok(vec![self.dispatch(
            &y.shape,
            (&a.shape, bind(0)),
            (&b.shape, bind(1)),
            io.shader_f16,
        )?])
    }

    fn in_place(&self) -> bool {
        self.f32_in_place()
    }
}

/// An f32 Add of two broadcasting operands written to `out`; an operand bound
/// to `out` itself is updated in place.
pub(crate) fn add_f32(
    out_shape: &[usize],
    a: (&[usize], Bind),
    b: (&[usize], Bind),
    out: Bind,
) -> Result<Dispatch, EpError> {
    let add = BinaryKernel {
        shader: Shader::BinaryFloat,
        op: BinaryCode::Add.code(),
        dt_in: DType::F32,
        dt_out: DType::F32,
    };
    // The binary dispatch writes Out(0): build it so, then retarget to `out`.
    let as_out = |x: Bind| if x == out { Bind::Out(0) } else { x };
    let mut d = add.dispatch(out_shape, (a.0, as_out(a.1)), (b.0, as_out(b.1)), false)?;
    for (_, bind) in d.binds.iter_mut() {
        if *bind == Bind::Out(0) {
            *bind = out;
        }
    }
    Ok(d)
}

/// The element count of `input` when it broadcasts to `out` as a trailing
/// part of it (leading dims 1 or absent, the rest equal), so output element
/// `i` reads input element `i % len`.
fn suffix_len(input: &[usize], out: &[usize]) -> Option<usize> {
    let pad = out.len().checked_sub(input.len())?;
    let first = input.iter().position(|&d| d != 1).unwrap_or(input.len());
    input[first..]
        .iter()
        .zip(&out[pad + first..])
        .all(|(x, y)| x == y)
        .then(|| input[first..].iter().product())
}

fn build_binary(spec: &KernelSpec<'_>) -> Result<Box<dyn GpuKernel>, EpError> {
    let kind = spec.op_as::<Binary>()?.kind;
    let dt_in = spec.input_dtype(0)?;
    let dt_out = spec.output_dtype(0)?;
    if spec.input_dtype(1)? != dt_in {
        return Err(EpError::Unsupported(format!(
            "{} with mixed dtypes on wgpu",
            spec.node.op_type
        )));
    }
    if is_float(dt_in) {
        let op = float_binary(kind).ok_or_else(|| unsupported(&spec.node.op_type, dt_in))?;
        return Ok(Box::new(BinaryKernel { shader: Shader::BinaryFloat, op, dt_in, dt_out }));
    }
    if is_int(dt_in) {
        let op = int_binary(kind, dt_in).ok_or_else(|| unsupported(&spec.node.op_type, dt_in))?;
        return Ok(Box::new(BinaryKernel { shader: Shader::BinaryInt, op, dt_in, dt_out }));
    }
    Err(unsupported(&spec.node.op_type, dt_in))
}

/// Max / Min / Sum over several inputs: out = in0 op in1, then out = out op in_k (in place).
/// Mean is Sum then a scale by 1/n.
struct VariadicKernel {
    step: BinaryKernel,
    mean: bool,
}

impl GpuKernel for VariadicKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let y = io.output(0)?;
        let present: Vec<usize> = (0..io.inputs.len()).filter(|&i| io.has_input(i)).collect();
        let mut out = Vec::new();
        match present.as_slice() {
            [] => return Err(EpError::Kernel("no inputs".into())),
            [only] => {
                // One input: Max(x, x) is a broadcast copy that keeps -0.0 and NaN.
                let a = io.input(*only)?;
                let copy = BinaryKernel {
                    shader: Shader::BinaryFloat,
                    op: BinaryCode::Max.code(),
                    dt_in: DType::F32,
                    dt_out: DType::F32,
                };
                out.push(copy.dispatch(
                    &y.shape,
                    (&a.shape, Bind::In(*only)),
                    (&a.shape, Bind::In(*only)),
                    false,
                )?);
            }
            [first, rest @ ..] => {
                let a = io.input(*first)?;
                let b = io.input(rest[0])?;
                out.push(self.step.dispatch(
                    &y.shape,
                    (&a.shape, Bind::In(*first)),
                    (&b.shape, Bind::In(rest[0])),
                    io.shader_f16,
                )?);
                for &i in &rest[1..] {
                    let c = io.input(i)?;
                    out.push(self.step.dispatch(
                        &y.shape,
                        (&y.shape, Bind::Out(0)),
                        (&c.shape, Bind::In(i)),
                        io.shader_f16,
                    )?);
                }
            }
        }
        if self.mean {
            let n = y.numel();
            let scale = 1.0 / present.len() as f32;
            let mut d = Dispatch::new(
                Shader::UnaryFloat,
                vec![super::u32_of(n)?, scale.to_bits(), 0, 0],
                &[],
                Grid::Invocations(n as u64),
            )
            .with("OP", f64::from(UnaryCode::Scale.code()))
            .with("DT_IN", 1.0)
            .with("DT_OUT", 1.0);
            d.entry = "main_inplace";
            d.binds = vec![(2, Bind::Out(0))];
            out.push(d);
        }
        Ok(out)
    }
}

fn build_variadic(spec: &KernelSpec<'_>) -> Result<Box<dyn GpuKernel>, EpError> {
    let kind = spec.op_as::<Variadic>()?.kind;
    let dtype = spec.output_dtype(0)?;
    let arity = spec.node.inputs.iter().flatten().count();
    if spec.input_dtypes.iter().flatten().any(|d| *d != dtype) {
        return Err(unsupported(&spec.node.op_type, dtype));
    }
    // Steps after the first run in place over the output, which only f32 has;
    // two inputs are a single dispatch of any dtype.
    let float = dtype == DType::F32 || (arity <= 2 && is_float(dtype));
    let int2 = arity == 2 && is_int(dtype) && dtype != DType::Bool;
    let shader = match kind {
        VariadicKind::Max | VariadicKind::Min if float => Shader::BinaryFloat,
        VariadicKind::Sum | VariadicKind::Mean if dtype == DType::F32 => Shader::BinaryFloat,
        VariadicKind::Sum if arity == 2 && is_float(dtype) => Shader::BinaryFloat,
        VariadicKind::Max | VariadicKind::Min | VariadicKind::Sum if int2 => Shader::BinaryInt,
        _ => return Err(unsupported(&spec.node.op_type, dtype)),
    };
    let op = kind.step_code().code();
    if arity < 2 && dtype != DType::F32 {
        return Err(unsupported(&spec.node.op_type, dtype));
    }
    Ok(Box::new(VariadicKernel {
        step: BinaryKernel { shader, op, dt_in: dtype, dt_out: dtype },
        mean: kind == VariadicKind::Mean,
    }))
}

struct WhereKernel {
    width: u32,
}

impl GpuKernel for WhereKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let (c, x, z, y) = (io.input(0)?, io.input(1)?, io.input(2)?, io.output(0)?);
        let n = y.numel();
        let mut params = vec![super::u32_of(n)?, super::u32_of(y.shape.len())?];
        params.extend(pad8(&y.shape)?);
        for t in [c, x, z] {
            params.extend(pad8(&broadcast_strides(&t.shape, &y.shape))?);
        }
        Ok(vec![
            Dispatch::new(
                Shader::Where,
                params,
                &[Bind::In(0), Bind::In(1), Bind::In(2), Bind::Out(0)],
                Grid::Invocations(words(y.dtype, n)),
            )
            .with("W", self.width),
        ])
    }
}

fn build_where(spec: &KernelSpec<'_>) -> Result<Box<dyn GpuKernel>, EpError> {
    let dtype = spec.input_dtype(1)?;
    let width = width(dtype).ok_or_else(|| unsupported("Where", dtype))?;
    Ok(Box::new(WhereKernel { width }))
}

struct CastKernel {
    from: DType,
    to: DType,
}

impl GpuKernel for CastKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let n = io.output(0)?.numel();
        Ok(vec![
            Dispatch::new(
                Shader::Cast,
                vec![super::u32_of(n)?],
                &[Bind::In(0), Bind::Out(0)],
                Grid::Invocations(words(self.to, n)),
            )
            .with("DT_IN", onnx(self.from))
            .with("DT_OUT", onnx(self.to)),
        ])
    }
}

fn build_cast(spec: &KernelSpec<'_>) -> Result<Box<dyn GpuKernel>, EpError> {
    let from = spec.input_dtype(0)?;
    let to = spec.output_dtype(0)?;
    for d in [from, to] {
        if !(is_float(d) || is_int(d)) {
            return Err(EpError::Unsupported(format!(
                "Cast from {from} to {to} is not implemented on wgpu"
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
}

#[cfg(test)]
mod tests {
    use super::suffix_len;

    #[test]
    fn trailing_broadcasts_read_the_input_modulo_its_length() {
        assert_eq!(suffix_len(&[2, 3, 8], &[2, 3, 8]), Some(48));
        assert_eq!(suffix_len(&[8], &[2, 3, 8]), Some(8));
        assert_eq!(suffix_len(&[1, 3, 8], &[2, 3, 8]), Some(24));
        assert_eq!(suffix_len(&[1, 1], &[2, 3]), Some(1));
        assert_eq!(suffix_len(&[3, 1], &[2, 3, 8]), None);
        assert_eq!(suffix_len(&[2, 1, 8], &[2, 3, 8]), None);
        assert_eq!(suffix_len(&[2, 3, 8, 1], &[2, 3, 8]), None);
    }
}
