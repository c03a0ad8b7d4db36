//! Reductions: the Reduce* family over any axes, and ArgMax/ArgMin.
//! (GlobalAveragePool / GlobalMaxPool live with the pools in `pool.rs`.)
//!
//! The input is split into kept and reduced dims ([`split`]); each output
//! element gets a group of lanes of a 256-thread block (`reduce_T` /
//! `arg_reduce_T` in reduce.cu), along the reduced elements when the innermost
//! dim is reduced, else across neighbouring outputs.

use cudarc::driver::LaunchConfig;
use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::reduce::{ArgReduce, Reduce, ReduceKind};
use onyx_core::shape::normalize_axis;
use onyx_kernels::Kernel;

use super::elementwise::entry;
use super::{CudaKernel, Io, MAX_RANK, Registry, is_float, is_int, strides};
use super::{unsupported, width};
use crate::gpu::{Args, Gpu, device_err};

/// Threads per reduction block (`REDUCE_BLOCK` in reduce.cu).
const BLOCK: usize = 256;

/// `ReduceShape` in reduce.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
struct ReduceShape {
    outputs: i64,
    count: i64,
    kept_rank: i32,
    red_rank: i32,
    row: i32,
    lanes: i32,
    op: i32,
    last: i32,
    kept_dims: [i64; MAX_RANK],
    kept_strides: [i64; MAX_RANK],
    red_dims: [i64; MAX_RANK],
    red_strides: [i64; MAX_RANK],
}

// SAFETY: plain `#[repr(C)]` data matching `struct ReduceShape` in reduce.cu.
unsafe impl cudarc::driver::DeviceRepr for ReduceShape {}

/// A contiguous tensor seen as kept × reduced dims: `(size, stride)` pairs in
/// row-major order, unit dims dropped and neighbours of one kind merged.
#[derive(Debug, PartialEq, Eq)]
struct Split {
    kept: Vec<(usize, usize)>,
    red: Vec<(usize, usize)>,
    /// The innermost (stride-1) dim is reduced.
    row: bool,
}

/// Splits `shape` into kept and reduced (`axes`) dims.
fn split(shape: &[usize], axes: &[usize]) -> Split {
    let st = strides(shape);
    let (mut kept, mut red) = (Vec::<(usize, usize)>::new(), Vec::<(usize, usize)>::new());
    let mut prev: Option<bool> = None;
    for (d, &n) in shape.iter().enumerate() {
        if n == 1 {
            continue;
        }
        let reduced = axes.contains(&d);
        let list = if reduced { &mut red } else { &mut kept };
        match list.last_mut() {
            // The previous non-unit dim was of the same kind: one dim spans both.
            Some(last) if prev == Some(reduced) => *last = (last.0 * n, st[d]),
            _ => list.push((n, st[d])),
        }
        prev = Some(reduced);
    }
    Split { kept, red, row: prev == Some(true) }
}

/// Lanes per output: along a reduced row, a warp slice or (few long rows) a
/// whole block; across outputs, what the block has left after 32 neighbouring
/// outputs, or after as few as 8 (one 32-byte sector of f32) when that is
/// what it takes to give every multiprocessor blocks.
fn lanes(row: bool, outputs: usize, count: usize, sms: usize) -> usize {
    let p2 = |n: usize| n.max(1).next_power_of_two();
    if row {
        return if count >= 4096 && outputs < sms * 64 { BLOCK } else { p2(count).min(32) };
    }
    let mut groups = p2(outputs).min(32);
    while groups > 8 && outputs.div_ceil(groups) < sms * 4 {
        groups /= 2;
    }
    p2(count).min(BLOCK / groups)
}

/// Queues `name` (`reduce_T` or `arg_reduce_T`) reducing `shape` over `axes`.
#[allow(clippy::too_many_arguments)]
fn launch_reduce(
    gpu: &Gpu,
    name: &'static str,
    shape: &[usize],
    axes: &[usize],
    op: i32,
    last: bool,
    x: u64,
    (y, y_numel): (u64, usize),
) -> Result<(), EpError> {
    let s = split(shape, axes);
    if s.kept.len() > MAX_RANK || s.red.len() > MAX_RANK {
        return Err(EpError::Unsupported(format!(
            "a reduction of {shape:?} over {axes:?} exceeds the CUDA kernels' rank {MAX_RANK}"
        )));
    }
    let outputs: usize = s.kept.iter().map(|d| d.0).product();
    let count: usize = s.red.iter().map(|d| d.0).product();
    if outputs != y_numel {
        return Err(EpError::Kernel(format!(
            "a reduction of {shape:?} over {axes:?} has {outputs} outputs, not {y_numel}"
        )));
    }
    if outputs == 0 {
        return Ok(());
    }
    let lanes = lanes(s.row, outputs, count, gpu.sms as usize);
    let mut shape = ReduceShape {
        outputs: outputs as i64,
        count: count as i64,
        kept_rank: s.kept.len() as i32,
        red_rank: s.red.len() as i32,
        row: s.row as i32,
        lanes: lanes as i32,
        op,
        last: last as i32,
        ..Default::default()
    };
    for (d, &(n, st)) in s.kept.iter().enumerate() {
        shape.kept_dims[d] = n as i64;
        shape.kept_strides[d] = st as i64;
    }
    for (d, &(n, st)) in s.red.iter().enumerate() {
        shape.red_dims[d] = n as i64;
        shape.red_strides[d] = st as i64;
    }
    let blocks = outputs.div_ceil(BLOCK / lanes).clamp(1, gpu.sms as usize * 32) as u32;
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let f = gpu.function(Kernel::Reduce, name)?;
    let args = Args::new().push(shape).push(x).push(y);
    // SAFETY: matches `reduce_T(ReduceShape, const T*, T*)` and
    // `arg_reduce_T(ReduceShape, const T*, i64*)`; every offset the shape
    // yields lies inside x (contiguous `shape`), and y holds `outputs` elements.
    unsafe { args.launch(gpu, &f, cfg) }
}

/// The dtypes the reductions take: the four floats and the byte-aligned
/// integers (and bool for ReduceMax / ReduceMin).
fn reducible(d: DType) -> bool {
    is_float(d) || is_int(d)
}

struct ReduceKernel {
    op: Reduce,
    name: &'static str,
    width: usize,
}

impl CudaKernel for ReduceKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
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
        let y = (io.out_ptr(0)?, io.output(0)?.numel());
        if axes.is_empty() && self.op.noop_with_empty_axes {
            // Reducing nothing: the output is the input, byte for byte.
            if y.1 != x.numel() {
                return Err(EpError::Kernel("a no-op reduction changes the size".into()));
            }
            let bytes = x.numel() * self.width;
            if bytes == 0 {
                return Ok(());
            }
            // SAFETY: both buffers hold `bytes` bytes (x's numel, checked equal
            // to y's); the copy is queued on the provider's stream.
            return unsafe {
                cudarc::driver::result::memcpy_dtod_async(
                    y.0,
                    io.in_ptr(0)?,
                    bytes,
                    gpu.stream.cu_stream(),
                )
            }
            .map_err(device_err("copying a no-op reduction"));
        }
        launch_reduce(
            gpu,
            self.name,
            &x.shape,
            &axes,
            self.op.kind.code().code() as i32,
            false,
            io.in_ptr(0)?,
            y,
        )
    }
}

fn build_reduce(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let op = spec.op_as::<Reduce>()?.clone();
    let dtype = spec.input_dtype(0)?;
    let boolean = dtype == DType::Bool && matches!(op.kind, ReduceKind::Max | ReduceKind::Min);
    let w = width(dtype).filter(|_| reducible(dtype) || boolean);
    let width = w.ok_or_else(|| unsupported(&spec.node.op_type, dtype))?;
    Ok(Box::new(ReduceKernel { op, name: entry("reduce", dtype)?, width }))
}

struct ArgKernel {
    op: ArgReduce,
    name: &'static str,
}

impl CudaKernel for ArgKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let x = io.input(0)?;
        let axis = normalize_axis(self.op.axis, x.shape.len())
            .ok_or_else(|| EpError::Kernel(format!("axis {} out of range", self.op.axis)))?;
        if x.shape[axis] == 0 {
            return Err(EpError::Kernel("ArgMax/ArgMin over an empty axis".into()));
        }
        let code = self.op.code().code() as i32;
        let y = (io.out_ptr(0)?, io.output(0)?.numel());
        let last = self.op.select_last_index;
        launch_reduce(gpu, self.name, &x.shape, &[axis], code, last, io.in_ptr(0)?, y)
    }
}

fn build_arg(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let op = spec.op_as::<ArgReduce>()?.clone();
    let dtype = spec.input_dtype(0)?;
    if !reducible(dtype) {
        return Err(unsupported(&spec.node.op_type, dtype));
    }
    Ok(Box::new(ArgKernel { op, name: entry("arg_reduce", dtype)? }))
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
        r.register(name, build_reduce);
    }
    r.register("ArgMax", build_arg);
    r.register("ArgMin", build_arg);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_drops_unit_dims_and_merges_neighbours_of_one_kind() {
        // NCHW over H and W: one reduced dim of H×W, kept N and C merged.
        let s = split(&[2, 3, 4, 5], &[2, 3]);
        assert_eq!(s, Split { kept: vec![(6, 20)], red: vec![(20, 1)], row: true });
        // Over the first axis: kept innermost, so lanes run across outputs.
        let s = split(&[7, 3, 4], &[0]);
        assert_eq!(s, Split { kept: vec![(12, 1)], red: vec![(7, 12)], row: false });
        // Alternating axes stay apart; a unit dim between two reduced dims merges them.
        let s = split(&[2, 3, 4, 5], &[0, 2]);
        assert_eq!(s.kept, vec![(3, 20), (5, 1)]);
        assert_eq!(s.red, vec![(2, 60), (4, 5)]);
        let s = split(&[2, 1, 4, 5], &[0, 2]);
        assert_eq!(s, Split { kept: vec![(5, 1)], red: vec![(8, 5)], row: false });
        // Reducing only unit dims reduces nothing: one element per output.
        let s = split(&[3, 1], &[1]);
        assert_eq!(s, Split { kept: vec![(3, 1)], red: vec![], row: false });
    }

    #[test]
    fn lanes_follow_the_rows_or_spread_over_outputs() {
        assert_eq!(lanes(true, 1000, 768, 132), 32);
        assert_eq!(lanes(true, 1000, 5, 132), 8);
        assert_eq!(lanes(true, 4, 1 << 20, 132), 256);
        assert_eq!(lanes(false, 1 << 20, 100, 132), 8);
        // Few outputs: fewer of them per block, more lanes each.
        assert_eq!(lanes(false, 768, 4096, 132), 32);
        assert_eq!(lanes(false, 2, 100, 132), 128);
        assert_eq!(lanes(false, 100, 1, 132), 1);
    }
}
