//! Reductions through the reduce shader: Reduce*, ArgMax/ArgMin and the global pools.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::codes::ReduceCode;
use onyx_core::ops::conv::GlobalPool;
use onyx_core::ops::reduce::{ArgReduce, Reduce};
use onyx_core::shape::normalize_axis;
use onyx_shaders::Shader;

use super::{Bind, Dispatch, GpuKernel, Grid, Io, Registry, pad8, strides, u32_of, unsupported};

/// A reduction of `shape` over `axes` (sorted, unique) with shader op `code`.
fn reduce(
    shape: &[usize],
    axes: &[usize],
    code: u32,
    last_index: bool,
) -> Result<Dispatch, EpError> {
    let s = strides(shape);
    let (mut kept, mut kept_s, mut red, mut red_s) = (vec![], vec![], vec![], vec![]);
    for d in 0..shape.len() {
        if axes.contains(&d) {
            red.push(shape[d]);
            red_s.push(s[d]);
        } else {
            kept.push(shape[d]);
            kept_s.push(s[d]);
        }
    }
    let outputs: usize = kept.iter().product();
    let count: usize = red.iter().product();
    let mut params =
        vec![u32_of(outputs)?, u32_of(count)?, u32_of(kept.len())?, u32_of(red.len())?];
    params.extend(pad8(&kept)?);
    params.extend(pad8(&kept_s)?);
    params.extend(pad8(&red)?);
    params.extend(pad8(&red_s)?);
    params.push(last_index as u32);
    params.push(f32::INFINITY.to_bits());
    Ok(Dispatch::new(
        Shader::Reduce,
        params,
        &[Bind::In(0), Bind::Out(0)],
        Grid::Workgroups(outputs as u64),
    )
    .with("OP", code)
    .with("WG", super::row_workgroup(count) as f64))
}

struct ReduceKernel {
    op: Reduce,
}

impl GpuKernel for ReduceKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let x = io.input(0)?;
        let given = match (&self.op.axes_attr, self.op.axes_input && io.has_value(1)) {
            (Some(a), _) => Some(a.clone()),
            (None, true) => Some(io.ints(1)?),
            _ => None,
        };
        let axes = self
            .op
            .axes(x.shape.len(), given.as_deref())
            .map_err(|e| EpError::Kernel(e.to_string()))?;
        if axes.is_empty() && self.op.noop_with_empty_axes {
            // Reducing nothing: Sum over a size-1 axis that does not exist is a copy.
            return Ok(vec![reduce(&[x.numel(), 1], &[1], ReduceCode::Sum.code(), false)?]);
        }
        Ok(vec![reduce(&x.shape, &axes, self.op.kind.code().code(), false)?])
    }
}

struct ArgKernel {
    op: ArgReduce,
}

impl GpuKernel for ArgKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let x = io.input(0)?;
        let axis = normalize_axis(self.op.axis, x.shape.len())
            .ok_or_else(|| EpError::Kernel(format!("bad axis {}", self.op.axis)))?;
        Ok(vec![reduce(&x.shape, &[axis], self.op.code().code(), self.op.select_last_index)?])
    }
}

struct GlobalKernel {
    max: bool,
}

impl GpuKernel for GlobalKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let x = io.input(0)?;
        let axes: Vec<usize> = (2..x.shape.len()).collect();
        let code = if self.max { ReduceCode::Max } else { ReduceCode::Mean };
        Ok(vec![reduce(&x.shape, &axes, code.code(), false)?])
    }
}

fn f32_only(s: &KernelSpec<'_>) -> Result<(), EpError> {
    match s.input_dtype(0)? {
        DType::F32 => Ok(()),
        d => Err(unsupported(&s.node.op_type, d)),
    }
}

/// Registers the reductions.
pub(crate) fn register_all(r: &mut Registry) {
    for name in [
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    ] {
        r.register(name, |s| {
            f32_only(s)?;
            Ok(Box::new(ReduceKernel { op: s.op_as::<Reduce>()?.clone() }))
        });
    }
    for name in ["ArgMax", "ArgMin"] {
        r.register(name, |s| {
            f32_only(s)?;
            Ok(Box::new(ArgKernel { op: s.op_as::<ArgReduce>()?.clone() }))
        });
    }
    for name in ["GlobalAveragePool", "GlobalMaxPool"] {
        r.register(name, |s| {
            f32_only(s)?;
            Ok(Box::new(GlobalKernel { max: s.op_as::<GlobalPool>()?.max }))
        });
    }
}
