//! The Reduce* family (integers accumulate exactly in i128, floats in f64) and ArgMax/ArgMin.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::reduce::{ArgReduce, Reduce, ReduceKind};

use super::dispatch::{AsF64, floats, ints, numeric};
use super::fastmath::{self, vectorized};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// For each input element in order, the index of the output element it reduces into.
fn output_index(shape: &[usize], axes: &[usize]) -> (Vec<usize>, usize) {
    let rank = shape.len();
    let mut out_strides = vec![0usize; rank];
    let mut acc = 1;
    for d in (0..rank).rev() {
        if !axes.contains(&d) {
            out_strides[d] = acc;
            acc *= shape[d];
        }
    }
    let numel: usize = shape.iter().product();
    let mut map = Vec::with_capacity(numel);
    let mut pos = vec![0usize; rank];
    let mut off = 0usize;
    for _ in 0..numel {
        map.push(off);
        for d in (0..rank).rev() {
            pos[d] += 1;
            off += out_strides[d];
            if pos[d] < shape[d] {
                break;
            }
            off -= out_strides[d] * shape[d];
            pos[d] = 0;
        }
    }
    (map, acc)
}

fn reduce_float<T: AsF64 + bytemuck::Pod>(
    io: &KernelIo,
    kind: ReduceKind,
    axes: &[usize],
    shape: &[usize],
) -> Result<(), EpError> {
    use ReduceKind::*;
    let x = io.input::<T>(0)?;
    let (map, n_out) = output_index(shape, axes);
    let count = x.len().checked_div(n_out).unwrap_or(0);
    let init = match kind {
        Prod => 1.0,
        Max => f64::NEG_INFINITY,
        Min => f64::INFINITY,
        _ => 0.0,
    };
    let mut acc = vec![init; n_out];
    let mut peak = vec![f64::NEG_INFINITY; n_out];
    if kind == LogSumExp {
        for (v, &o) in x.iter().zip(&map) {
            peak[o] = peak[o].max(v.to_f64());
        }
    }
    for (v, &o) in x.iter().zip(&map) {
        let v = v.to_f64();
        let a = &mut acc[o];
        match kind {
            Sum | Mean | LogSum => *a += v,
            Prod => *a *= v,
            Max => *a = if v > *a || v.is_nan() { v } else { *a },
            Min => *a = if v < *a || v.is_nan() { v } else { *a },
            L1 => *a += v.abs(),
            L2 | SumSquare => *a += v * v,
            LogSumExp => *a += (v - peak[o]).exp(),
        }
    }
    let out = io.output::<T>(0)?;
    for (o, (a, p)) in out.iter_mut().zip(acc.into_iter().zip(peak)) {
        *o = T::from_f64(match kind {
            Mean => a / count as f64,
            L2 => a.sqrt(),
            LogSum => a.ln(),
            LogSumExp => {
                if p.is_finite() {
                    p + a.ln()
                } else {
                    p + a.ln().max(f64::NEG_INFINITY)
                }
            }
            _ => a,
        });
    }
    Ok(())
}

/// `(outer, reduced, inner)` when the reduced axes are one contiguous block of
/// dims (after dropping size-1 dims), else `None`.
fn contiguous_block(shape: &[usize], axes: &[usize]) -> Option<(usize, usize, usize)> {
    let reduced: Vec<usize> = axes.iter().copied().filter(|&d| shape[d] != 1).collect();
    let (first, last) = (*reduced.iter().min()?, *reduced.iter().max()?);
    let between = (first..=last).filter(|d| shape[*d] != 1).all(|d| reduced.contains(&d));
    between.then(|| {
        let p = |r: &[usize]| r.iter().product::<usize>();
        (p(&shape[..first]), p(&shape[first..=last]), p(&shape[last + 1..]))
    })
}

/// f32 sums (Sum, Mean, SumSquare, L1, L2) over one contiguous block of axes:
/// vectorized, f64 accumulators, no index map. Returns false (nothing done)
/// for other kinds and layouts.
fn reduce_f32_sums(
    io: &KernelIo,
    kind: ReduceKind,
    axes: &[usize],
    shape: &[usize],
) -> Result<bool, EpError> {
    use ReduceKind::*;
    let Some((_, len, inner)) = contiguous_block(shape, axes) else { return Ok(false) };
    if !matches!(kind, Sum | Mean | SumSquare | L1 | L2) || len == 0 || inner == 0 {
        return Ok(false);
    }
    let x = io.input::<f32>(0)?;
    let out = io.output::<f32>(0)?;
    let term = move |v: f32| -> f64 {
        let v = v as f64;
        match kind {
            SumSquare | L2 => v * v,
            L1 => v.abs(),
            _ => v,
        }
    };
    let finish = move |a: f64| -> f32 {
        (match kind {
            Mean => a / len as f64,
            L2 => a.sqrt(),
            _ => a,
        }) as f32
    };
    let mut acc = vec![0f64; inner];
    vectorized(|| {
        for (o, block) in out.chunks_mut(inner).zip(x.chunks(len * inner)) {
            if inner == 1 {
                o[0] = finish(fastmath::sum_f64(block, term));
                continue;
            }
            acc.fill(0.0);
            for row in block.chunks(inner) {
                acc.iter_mut().zip(row).for_each(|(a, &v)| *a += term(v));
            }
            o.iter_mut().zip(&acc).for_each(|(o, &a)| *o = finish(a));
        }
    });
    Ok(true)
}

trait IntElem: AsF64 + bytemuck::Pod {
    fn wide(self) -> i128;
    fn narrow(v: i128) -> Self;
    const MIN: i128;
    const MAX: i128;
}

macro_rules! int_elem {
    ($($t:ty),*) => { $(impl IntElem for $t {
        fn wide(self) -> i128 { self as i128 }
        fn narrow(v: i128) -> Self { v as $t }
        const MIN: i128 = <$t>::MIN as i128;
        const MAX: i128 = <$t>::MAX as i128;
    })* };
}
int_elem!(i8, i16, i32, i64, u8, u16, u32, u64);

fn reduce_int<T: IntElem>(
    io: &KernelIo,
    kind: ReduceKind,
    axes: &[usize],
    shape: &[usize],
) -> Result<(), EpError> {
    use ReduceKind::*;
    if matches!(kind, L2 | LogSum | LogSumExp) {
        // Irrational results: compute in f64, then truncate like a cast.
        return reduce_float::<T>(io, kind, axes, shape);
    }
    let x = io.input::<T>(0)?;
    let (map, n_out) = output_index(shape, axes);
    let count = x.len().checked_div(n_out).unwrap_or(0) as i128;
    let init = match kind {
        Prod => 1,
        Max => T::MIN,
        Min => T::MAX,
        _ => 0,
    };
    let mut acc = vec![init; n_out];
    for (v, &o) in x.iter().zip(&map) {
        let v = v.wide();
        let a = &mut acc[o];
        *a = match kind {
            Sum | Mean => a.wrapping_add(v),
            Prod => a.wrapping_mul(v),
            Max => (*a).max(v),
            Min => (*a).min(v),
            L1 => a.wrapping_add(v.abs()),
            SumSquare => a.wrapping_add(v.wrapping_mul(v)),
            L2 | LogSum | LogSumExp => unreachable!("handled above"),
        };
    }
    let out = io.output::<T>(0)?;
    for (o, a) in out.iter_mut().zip(acc) {
        *o = T::narrow(if kind == Mean && count > 0 { a / count } else { a });
    }
    Ok(())
}

struct ReduceKernel {
    op: Reduce,
    dtype: DType,
}

impl CpuKernel for ReduceKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let shape = io.in_view(0)?.shape.clone();
        let given = match (&self.op.axes_attr, self.op.axes_input && io.present(1)) {
            (Some(a), _) => Some(a.clone()),
            (None, true) => Some(io.ints(1)?),
            _ => None,
        };
        let axes = self
            .op
            .axes(shape.len(), given.as_deref())
            .map_err(|e| EpError::Kernel(e.to_string()))?;
        // With noop and no axes nothing is reduced, but the elementwise step of
        // L1, L2, SumSquare and LogSum still applies (each element reduces alone).
        let identity = !matches!(
            self.op.kind,
            ReduceKind::L1 | ReduceKind::L2 | ReduceKind::SumSquare | ReduceKind::LogSum
        );
        if axes.is_empty() && self.op.noop_with_empty_axes && identity {
            let x = io.input_bytes(0)?;
            io.output_bytes(0)?.copy_from_slice(x);
            return Ok(());
        }
        let kind = self.op.kind;
        if self.dtype == DType::F32 && reduce_f32_sums(io, kind, &axes, &shape)? {
            return Ok(());
        }
        floats!(self.dtype, T => reduce_float::<T>(io, kind, &axes, &shape),
            else ints!(self.dtype, T => reduce_int::<T>(io, kind, &axes, &shape),
            else Err(unsupported_dtype("reduction", self.dtype))))
    }
}

fn build_reduce(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let r = spec.op_as::<Reduce>()?.clone();
    let dtype = spec.input_dtype(0)?;
    let float = matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16);
    if !(float || dtype.is_int() && dtype.is_byte_aligned()) {
        return Err(unsupported_dtype(&spec.node.op_type, dtype));
    }
    Ok(Box::new(ReduceKernel { op: r, dtype }))
}

struct ArgKernel {
    op: ArgReduce,
    dtype: DType,
}

fn arg<T: AsF64 + bytemuck::Pod>(io: &KernelIo, a: &ArgReduce) -> Result<(), EpError> {
    let shape = io.in_view(0)?.shape.clone();
    let axis = onyx_core::shape::normalize_axis(a.axis, shape.len())
        .ok_or_else(|| EpError::Kernel(format!("axis {} out of range", a.axis)))?;
    let len = shape[axis];
    if len == 0 {
        return Err(EpError::Kernel("ArgMax/ArgMin over an empty axis".into()));
    }
    let inner: usize = shape[axis + 1..].iter().product();
    let x = io.input::<T>(0)?;
    let out = io.output::<i64>(0)?;
    for (o, slot) in out.iter_mut().enumerate() {
        let (outer, i) = (o / inner.max(1), o % inner.max(1));
        let base = outer * len * inner + i;
        let mut best = 0usize;
        let mut best_v = x[base].to_f64();
        for j in 1..len {
            let v = x[base + j * inner].to_f64();
            let better = if a.max { v > best_v } else { v < best_v };
            if better || a.select_last_index && v == best_v {
                best = j;
                best_v = v;
            }
        }
        *slot = best as i64;
    }
    Ok(())
}

impl CpuKernel for ArgKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        numeric!(self.dtype, T => arg::<T>(io, &self.op), else Err(unsupported_dtype("ArgMax/ArgMin", self.dtype)))
    }
}

fn build_arg(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let a = spec.op_as::<ArgReduce>()?.clone();
    let dtype = spec.input_dtype(0)?;
    if !dtype.is_byte_aligned()
        || !(dtype.is_int() || matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16))
    {
        return Err(unsupported_dtype(&spec.node.op_type, dtype));
    }
    Ok(Box::new(ArgKernel { op: a, dtype }))
}

/// Registers the reductions.
pub fn register_all(r: &mut KernelRegistry) {
    for op in [
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
        r.register(op, build_reduce);
    }
    r.register("ArgMax", build_arg);
    r.register("ArgMin", build_arg);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_blocks_ignore_unit_dims_and_reject_gaps() {
        assert_eq!(contiguous_block(&[1, 128, 384], &[1]), Some((1, 128, 384)));
        assert_eq!(contiguous_block(&[2, 3, 1, 4], &[1, 3]), Some((2, 12, 1)));
        assert_eq!(contiguous_block(&[2, 3, 4], &[0, 2]), None);
        assert_eq!(contiguous_block(&[2, 1, 4], &[1]), None);
    }

    #[test]
    fn output_index_drops_reduced_axes() {
        let (map, n) = output_index(&[2, 3], &[1]);
        assert_eq!((map, n), (vec![0, 0, 0, 1, 1, 1], 2));
        let (map, n) = output_index(&[2, 3], &[0]);
        assert_eq!((map, n), (vec![0, 1, 2, 0, 1, 2], 3));
    }
}
