//! Generated data through the fill shader: Shape, Size, ConstantOfShape, Range.

use onyx_core::dtype::DType;
use onyx_core::ep::EpError;
use onyx_core::ops::generate::ConstantOfShape;
use onyx_core::ops::shape::ShapeOf;
use onyx_shaders::Shader;

use super::{Bind, Dispatch, GpuKernel, Grid, Io, Registry, u32_of, unsupported, words};

/// Words of little-endian int64 values.
fn i64_words(v: &[i64]) -> Vec<u32> {
    v.iter().flat_map(|&x| [x as u32, (x >> 32) as u32]).collect()
}

/// Writes `pattern` (u32 words) repeatedly over `out_words` words of output 0.
fn fill(out_words: u64, pattern: &[u32]) -> Result<Dispatch, EpError> {
    let mut params = vec![u32_of(out_words as usize)?, u32_of(pattern.len().max(1))?];
    params.extend(pattern);
    if pattern.is_empty() {
        params.push(0);
    }
    Ok(Dispatch::new(Shader::Fill, params, &[Bind::Out(0)], Grid::Invocations(out_words)))
}

struct ShapeKernel {
    op: ShapeOf,
}

impl GpuKernel for ShapeKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let shape = &io.input(0)?.shape;
        let dims: Vec<i64> = shape[self.op.range(shape.len())].iter().map(|&d| d as i64).collect();
        if dims.is_empty() {
            return Ok(vec![]);
        }
        Ok(vec![fill(2 * dims.len() as u64, &i64_words(&dims))?])
    }
}

struct SizeKernel;

impl GpuKernel for SizeKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        Ok(vec![fill(2, &i64_words(&[io.input(0)?.numel() as i64]))?])
    }
}

/// ConstantOfShape: the value's bytes replicated into whole words.
struct ConstantKernel {
    pattern: Vec<u32>,
    dtype: DType,
}

impl GpuKernel for ConstantKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let n = words(self.dtype, io.output(0)?.numel());
        if n == 0 {
            return Ok(vec![]);
        }
        Ok(vec![fill(n, &self.pattern)?])
    }
}

struct RangeKernel {
    dtype: DType,
}

impl GpuKernel for RangeKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let y = io.output(0)?;
        let n = words(self.dtype, y.numel());
        if n == 0 {
            return Ok(vec![]);
        }
        let (mode, start_delta) = match self.dtype {
            DType::I64 => {
                let (s, d) = (io.ints(0)?[0], io.ints(2)?[0]);
                (2, i64_words(&[s, d]))
            }
            DType::I32 => (1, vec![io.ints(0)?[0] as i32 as u32, io.ints(2)?[0] as i32 as u32]),
            _ => {
                (1, vec![(io.floats(0)?[0] as f32).to_bits(), (io.floats(2)?[0] as f32).to_bits()])
            }
        };
        let mut params = vec![u32_of(n as usize)?, 0];
        params.extend(start_delta);
        Ok(vec![
            Dispatch::new(Shader::Fill, params, &[Bind::Out(0)], Grid::Invocations(n))
                .with("MODE", mode as f64)
                .with("DT", self.dtype.to_onnx() as f64),
        ])
    }
}

/// Registers the generators.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("Shape", |s| Ok(Box::new(ShapeKernel { op: s.op_as::<ShapeOf>()?.clone() })));
    r.register("Size", |_| Ok(Box::new(SizeKernel)));
    r.register("ConstantOfShape", |s| {
        let c = s.op_as::<ConstantOfShape>()?;
        let dtype = c.value.dtype();
        let bytes = c.value.bytes().map_err(|_| unsupported("ConstantOfShape", dtype))?;
        let pattern: Vec<u32> = match bytes.len() {
            1 => vec![u32::from_le_bytes([bytes[0]; 4])],
            2 => vec![u32::from_le_bytes([bytes[0], bytes[1], bytes[0], bytes[1]])],
            4 => vec![u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"))],
            8 => vec![
                u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")),
                u32::from_le_bytes(bytes[4..].try_into().expect("4 bytes")),
            ],
            _ => return Err(unsupported("ConstantOfShape", dtype)),
        };
        Ok(Box::new(ConstantKernel { pattern, dtype }))
    });
    r.register("Range", |s| {
        let dtype = s.output_dtype(0)?;
        if !matches!(dtype, DType::F32 | DType::I32 | DType::I64) {
            return Err(unsupported("Range", dtype));
        }
        Ok(Box::new(RangeKernel { dtype }))
    });
}
