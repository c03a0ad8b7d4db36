//! Data movement through the strided-copy and gather shaders: Transpose, Slice,
//! Expand, Tile, Concat, Split, Gather and Dropout (inference).

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::movement::{Concat, Gather, Slice, Split, Transpose};
use onyx_core::shape::normalize_axis;
use onyx_shaders::Shader;

use super::{
    Bind, Dispatch, GpuKernel, Grid, Io, Registry, broadcast_strides, pad8, pad8_signed, strides,
    u32_of, unsupported, width, words,
};

const NONE: u32 = u32::MAX;

/// A strided copy: output element at coordinate c reads source element
/// `offset + sum(c[d] * src_strides[d])`, optionally only inside a region of one axis.
struct Copy<'a> {
    out: &'a [usize],
    src_strides: &'a [i64],
    offset: i64,
    region: Option<(usize, usize, usize)>,
    tile_dims: Option<&'a [usize]>,
    width: u32,
    dtype: DType,
    src: Bind,
}

impl Copy<'_> {
    fn dispatch(&self) -> Result<Dispatch, EpError> {
        let n: usize = self.out.iter().product();
        let mut params = vec![u32_of(n)?, u32_of(self.out.len())?];
        params.extend(pad8(self.out)?);
        params.extend(pad8_signed(self.src_strides)?);
        params.push(
            i32::try_from(self.offset)
                .map_err(|_| EpError::Unsupported("offset beyond 32 bits".into()))?
                as u32,
        );
        match self.region {
            Some((axis, start, end)) => {
                params.extend([u32_of(axis)?, u32_of(start)?, u32_of(end)?])
            }
            None => params.extend([NONE, 0, 0]),
        }
        params.extend(pad8(self.tile_dims.unwrap_or(&[]))?);
        Ok(Dispatch::new(
            Shader::Copy,
            params,
            &[self.src, Bind::Out(0)],
            Grid::Invocations(words(self.dtype, n)),
        )
        .with("W", self.width)
        .with("TILE", self.tile_dims.is_some() as u8 as f64))
    }
}

fn signed(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

pub(crate) fn width_of(spec: &KernelSpec<'_>, op: &str) -> Result<(u32, DType), EpError> {
    let d = spec.input_dtype(0)?;
    Ok((width(d).ok_or_else(|| unsupported(op, d))?, d))
}

struct TransposeKernel {
    op: Transpose,
    width: u32,
    dtype: DType,
}

impl GpuKernel for TransposeKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let x = io.input(0)?;
        let perm = self.op.perm(x.shape.len()).map_err(|e| EpError::Kernel(e.to_string()))?;
        let s = strides(&x.shape);
        let src: Vec<i64> = perm.iter().map(|&p| s[p] as i64).collect();
        let out = &io.output(0)?.shape;
        Ok(vec![
            Copy {
                out,
                src_strides: &src,
                offset: 0,
                region: None,
                tile_dims: None,
                width: self.width,
                dtype: self.dtype,
                src: Bind::In(0),
            }
            .dispatch()?,
        ])
    }
}

struct SliceKernel {
    op: Slice,
    width: u32,
    dtype: DType,
}

impl GpuKernel for SliceKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let x = io.input(0)?;
        let resolved = match &self.op.attrs {
            Some(a) => Slice::resolve(&x.shape, &a.starts, &a.ends, a.axes.as_deref(), None),
            None => {
                let opt = |i: usize| io.has_value(i).then(|| io.ints(i)).transpose();
                let (axes, steps) = (opt(3)?, opt(4)?);
                Slice::resolve(
                    &x.shape,
                    &io.ints(1)?,
                    &io.ints(2)?,
                    axes.as_deref(),
                    steps.as_deref(),
                )
            }
        }
        .map_err(|e| EpError::Kernel(e.to_string()))?;
        let s = strides(&x.shape);
        let src: Vec<i64> = resolved.iter().zip(&s).map(|(r, &st)| r.step * st as i64).collect();
        let offset: i64 = resolved
            .iter()
            .zip(&s)
            .map(|(r, &st)| if r.len > 0 { r.start * st as i64 } else { 0 })
            .sum();
        let out = &io.output(0)?.shape;
        Ok(vec![
            Copy {
                out,
                src_strides: &src,
                offset,
                region: None,
                tile_dims: None,
                width: self.width,
                dtype: self.dtype,
                src: Bind::In(0),
            }
            .dispatch()?,
        ])
    }
}

struct ExpandKernel {
    width: u32,
    dtype: DType,
    tile: bool,
}

impl GpuKernel for ExpandKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let x = io.input(0)?;
        let out = &io.output(0)?.shape;
        if self.tile {
            let src = signed(&strides(&x.shape));
            return Ok(vec![
                Copy {
                    out,
                    src_strides: &src,
                    offset: 0,
                    region: None,
                    tile_dims: Some(&x.shape),
                    width: self.width,
                    dtype: self.dtype,
                    src: Bind::In(0),
                }
                .dispatch()?,
            ]);
        }
        let src = signed(&broadcast_strides(&x.shape, out));
        Ok(vec![
            Copy {
                out,
                src_strides: &src,
                offset: 0,
                region: None,
                tile_dims: None,
                width: self.width,
                dtype: self.dtype,
                src: Bind::In(0),
            }
            .dispatch()?,
        ])
    }
}

struct ConcatKernel {
    axis: i64,
    width: u32,
    dtype: DType,
}

impl GpuKernel for ConcatKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let out = &io.output(0)?.shape;
        let axis = normalize_axis(self.axis, out.len())
            .ok_or_else(|| EpError::Kernel(format!("bad axis {}", self.axis)))?;
        let mut start = 0;
        let mut ds = Vec::new();
        for i in 0..io.inputs.len() {
            if !io.has_input(i) {
                continue;
            }
            let x = io.input(i)?;
            let end = start + x.shape[axis];
            if end > start {
                let src = signed(&strides(&x.shape));
                ds.push(
                    Copy {
                        out,
                        src_strides: &src,
                        offset: 0,
                        region: Some((axis, start, end)),
                        tile_dims: None,
                        width: self.width,
                        dtype: self.dtype,
                        src: Bind::In(i),
                    }
                    .dispatch()?,
                );
            }
            start = end;
        }
        Ok(ds)
    }
}

struct SplitKernel {
    axis: i64,
    width: u32,
    dtype: DType,
}

impl GpuKernel for SplitKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let x = io.input(0)?;
        let axis = normalize_axis(self.axis, x.shape.len())
            .ok_or_else(|| EpError::Kernel(format!("bad axis {}", self.axis)))?;
        let s = signed(&strides(&x.shape));
        let mut start = 0;
        let mut ds = Vec::new();
        for o in 0..io.outputs.len() {
            let y = io.output(o)?;
            if y.numel() > 0 {
                let mut d = Copy {
                    out: &y.shape,
                    src_strides: &s,
                    offset: start as i64 * s[axis],
                    region: None,
                    tile_dims: None,
                    width: self.width,
                    dtype: self.dtype,
                    src: Bind::In(0),
                }
                .dispatch()?;
                d.binds = vec![(1, Bind::In(0)), (2, Bind::Out(o))];
                ds.push(d);
            }
            start += y.shape[axis];
        }
        Ok(ds)
    }
}

struct GatherKernel {
    axis: i64,
    width: u32,
    dtype: DType,
    idx64: bool,
}

impl GpuKernel for GatherKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let (x, idx, y) = (io.input(0)?, io.input(1)?, io.output(0)?);
        let axis = normalize_axis(self.axis, x.shape.len())
            .ok_or_else(|| EpError::Kernel(format!("bad axis {}", self.axis)))?;
        let inner: usize = x.shape[axis + 1..].iter().product();
        let params =
            vec![u32_of(y.numel())?, u32_of(x.shape[axis])?, u32_of(inner)?, u32_of(idx.numel())?];
        Ok(vec![
            Dispatch::new(
                Shader::Gather,
                params,
                &[Bind::In(0), Bind::In(1), Bind::Out(0)],
                Grid::Invocations(words(self.dtype, y.numel())),
            )
            .with("W", self.width)
            .with("IDX64", self.idx64 as u8 as f64),
        ])
    }
}

/// Dropout at inference: a copy, and an all-true mask when asked for.
struct DropoutKernel {
    width: u32,
    dtype: DType,
}

impl GpuKernel for DropoutKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        if io.has_input(2) {
            return Err(EpError::Unsupported("Dropout with a training_mode input on wgpu".into()));
        }
        let x = io.input(0)?;
        let src = signed(&strides(&x.shape));
        let mut ds = vec![
            Copy {
                out: &x.shape,
                src_strides: &src,
                offset: 0,
                region: None,
                tile_dims: None,
                width: self.width,
                dtype: self.dtype,
                src: Bind::In(0),
            }
            .dispatch()?,
        ];
        if io.has_output(1) {
            let n = words(DType::Bool, x.numel());
            let mut d = Dispatch::new(
                Shader::Fill,
                vec![u32_of(n as usize)?, 1, 0x0101_0101],
                &[Bind::Out(1)],
                Grid::Invocations(n),
            );
            d.binds = vec![(1, Bind::Out(1))];
            ds.push(d);
        }
        Ok(ds)
    }
}

/// Registers the data-movement kernels.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("Transpose", |s| {
        let (width, dtype) = width_of(s, "Transpose")?;
        Ok(Box::new(TransposeKernel { op: s.op_as::<Transpose>()?.clone(), width, dtype }))
    });
    r.register("Slice", |s| {
        let (width, dtype) = width_of(s, "Slice")?;
        Ok(Box::new(SliceKernel { op: s.op_as::<Slice>()?.clone(), width, dtype }))
    });
    r.register("Expand", |s| {
        let (width, dtype) = width_of(s, "Expand")?;
        Ok(Box::new(ExpandKernel { width, dtype, tile: false }))
    });
    r.register("Tile", |s| {
        let (width, dtype) = width_of(s, "Tile")?;
        Ok(Box::new(ExpandKernel { width, dtype, tile: true }))
    });
    r.register("Concat", |s| {
        let (width, dtype) = width_of(s, "Concat")?;
        Ok(Box::new(ConcatKernel { axis: s.op_as::<Concat>()?.axis, width, dtype }))
    });
    r.register("Split", |s| {
        let (width, dtype) = width_of(s, "Split")?;
        Ok(Box::new(SplitKernel { axis: s.op_as::<Split>()?.axis, width, dtype }))
    });
    r.register("Gather", |s| {
        let (width, dtype) = width_of(s, "Gather")?;
        let idx64 = match s.input_dtype(1)? {
            DType::I64 => true,
            DType::I32 => false,
            d => return Err(unsupported("Gather indices", d)),
        };
        Ok(Box::new(GatherKernel { axis: s.op_as::<Gather>()?.axis, width, dtype, idx64 }))
    });
    r.register("Dropout", |s| {
        let (width, dtype) = width_of(s, "Dropout")?;
        Ok(Box::new(DropoutKernel { width, dtype }))
    });
}
