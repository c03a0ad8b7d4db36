//! ScatterElements (and opset 9–10's Scatter) and ScatterND, with every
//! reduction: the data is copied to the output (skipped when the output took
//! the data's buffer in place), then `scatter_elements_T_IDX` or
//! `scatter_nd_T_IDX` in movement.cu apply the updates. Indices live on the
//! device: one out of range raises the module's fault word (the run fails
//! when it synchronizes) and writes nothing. ReverseSequence lives here too
//! (its op is in core's `scatter`).

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::scatter::{Reduction, ReverseSequence, ScatterElements, ScatterNd};
use onyx_kernels::Kernel;

use super::movement::{MOVE_RANK, axis, fixed, index_suffix, name, signed};
use super::{CudaKernel, Io, Registry, strides, suffix, unsupported};
use crate::gpu::{Args, Gpu, device_err};

/// `ScatterElementsArgs` in movement.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
struct ScatterElementsArgs {
    lines: i64,
    count: i64,
    axis_dim: i64,
    inner: i64,
    rank: i32,
    axis: i32,
    op: i32,
    pad: i32,
    dims: [i64; MOVE_RANK],
    strides: [i64; MOVE_RANK],
}

// SAFETY: plain `#[repr(C)]` data matching `struct ScatterElementsArgs` in movement.cu.
unsafe impl cudarc::driver::DeviceRepr for ScatterElementsArgs {}

/// `ScatterNdArgs` in movement.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
struct ScatterNdArgs {
    updates: i64,
    inner: i64,
    k: i32,
    op: i32,
    dims: [i64; MOVE_RANK],
    strides: [i64; MOVE_RANK],
}

// SAFETY: plain `#[repr(C)]` data matching `struct ScatterNdArgs` in movement.cu.
unsafe impl cudarc::driver::DeviceRepr for ScatterNdArgs {}

/// The reduction's number in `scatter_combine`.
fn code(r: Reduction) -> i32 {
    match r {
        Reduction::None => 0,
        Reduction::Add => 1,
        Reduction::Mul => 2,
        Reduction::Min => 3,
        Reduction::Max => 4,
    }
}

/// Queues copying the data (input 0) to the output, unless they share a buffer.
fn copy_data(gpu: &Gpu, io: &Io<'_>, bytes: usize) -> Result<(), EpError> {
    let (x, y) = (io.in_ptr(0)?, io.out_ptr(0)?);
    if x == y || bytes == 0 {
        return Ok(());
    }
    // SAFETY: the data and the output both hold `bytes` bytes (the output has
    // the data's shape and dtype, checked by the caller); the copy is queued
    // on the provider's stream, before the scatter launch.
    unsafe { cudarc::driver::result::memcpy_dtod_async(y, x, bytes, gpu.stream.cu_stream()) }
        .map_err(device_err("copying a scatter's data"))
}

/// Queues one scatter entry point over `n` threads after the data copy.
fn launch<A: cudarc::driver::DeviceRepr + 'static>(
    gpu: &Gpu,
    io: &Io<'_>,
    entry: &'static str,
    args: A,
    n: usize,
) -> Result<(), EpError> {
    let x = io.input(0)?;
    if io.output(0)?.shape != x.shape {
        return Err(EpError::Kernel("a scatter's output must have the data's shape".into()));
    }
    let bytes = x.numel() * x.dtype.bits() / 8;
    copy_data(gpu, io, bytes)?;
    if n == 0 {
        return Ok(());
    }
    let f = gpu.function(Kernel::Movement, entry)?;
    let a = Args::new().push(args).push(io.in_ptr(1)?).push(io.in_ptr(2)?).push(io.out_ptr(0)?);
    // SAFETY: matches `scatter_*_T_IDX(Args, const IDX*, const T*, T*)` for
    // the entry chosen by the dtypes; the caller checked that the indices and
    // updates have the shapes the arguments describe, and the kernel skips
    // any index outside the data.
    unsafe { a.launch(gpu, &f, gpu.grid(n as u64)) }
}

/// ScatterElements along an axis.
struct ScatterElementsKernel {
    op: ScatterElements,
    entry: &'static str,
}

impl CudaKernel for ScatterElementsKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (data, dims) = (&io.input(0)?.shape, &io.input(1)?.shape);
        let axis = axis(self.op.axis, data.len())?;
        let fits = dims.len() == data.len()
            && io.input(2)?.shape == *dims
            && (0..dims.len()).all(|d| d == axis || dims[d] <= data[d]);
        if !fits {
            return Err(EpError::Kernel(format!(
                "ScatterElements indices {dims:?} do not fit data {data:?} on axis {axis}"
            )));
        }
        let count = dims[axis];
        let lines = dims.iter().product::<usize>().checked_div(count).unwrap_or(0);
        let args = ScatterElementsArgs {
            lines: lines as i64,
            count: count as i64,
            axis_dim: data[axis] as i64,
            inner: dims[axis + 1..].iter().product::<usize>() as i64,
            rank: dims.len() as i32,
            axis: axis as i32,
            op: code(self.op.reduction),
            pad: 0,
            dims: fixed(&signed(dims))?,
            strides: fixed(&signed(&strides(data)))?,
        };
        launch(gpu, io, self.entry, args, lines)
    }

    fn in_place(&self) -> bool {
        true
    }
}

/// ScatterND.
struct ScatterNdKernel {
    reduction: Reduction,
    entry: &'static str,
}

impl CudaKernel for ScatterNdKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (data, idims) = (&io.input(0)?.shape, &io.input(1)?.shape);
        let k = ScatterNd::check(data, idims, &io.input(2)?.shape)
            .map_err(|e| EpError::Kernel(e.to_string()))?;
        let updates: usize = idims[..idims.len() - 1].iter().product();
        let inner: usize = data[k..].iter().product();
        let args = ScatterNdArgs {
            updates: updates as i64,
            inner: inner as i64,
            k: k as i32,
            op: code(self.reduction),
            dims: fixed(&signed(&data[..k]))?,
            strides: fixed(&signed(&strides(data)[..k]))?,
        };
        let n = if self.reduction == Reduction::None { updates * inner } else { inner };
        launch(gpu, io, self.entry, args, if updates == 0 { 0 } else { n })
    }

    fn in_place(&self) -> bool {
        true
    }
}

/// The entry point `scatter_{kind}_{T}_{IDX}` for the data and index dtypes;
/// bool data scatters as bytes without a reduction.
fn entry(spec: &KernelSpec<'_>, kind: &str, reduction: Reduction) -> Result<&'static str, EpError> {
    let dtype = spec.input_dtype(0)?;
    let sfx = match dtype {
        DType::Bool if reduction == Reduction::None => "u8",
        DType::Bool => {
            return Err(unsupported(&format!("{} with a reduction", spec.node.op_type), dtype));
        }
        d => suffix(d).ok_or_else(|| unsupported(&spec.node.op_type, d))?,
    };
    let idx = index_suffix(&spec.node.op_type, spec.input_dtype(1)?)?;
    Ok(name(format!("scatter_{kind}_{sfx}_{idx}")))
}

fn build_elements(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let op = spec.op_as::<ScatterElements>()?.clone();
    let entry = entry(spec, "elements", op.reduction)?;
    Ok(Box::new(ScatterElementsKernel { op, entry }))
}

/// ReverseSequence: `reverse_sequence_wN_IDX` in movement.cu, one thread per
/// output element; a length outside the time axis raises the fault word.
struct ReverseSequenceKernel {
    op: ReverseSequence,
    entry: &'static str,
}

impl CudaKernel for ReverseSequenceKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let x = &io.input(0)?.shape;
        let (t, b) = (self.op.time_axis, self.op.batch_axis);
        if x.len() < 2 || t + b != 1 || io.output(0)?.shape != *x {
            return Err(EpError::Kernel(format!("ReverseSequence of {x:?} (time {t}, batch {b})")));
        }
        if io.input(1)?.numel() != x[b] {
            return Err(EpError::Kernel(format!(
                "ReverseSequence has {} lengths for a batch of {}",
                io.input(1)?.numel(),
                x[b]
            )));
        }
        let n: usize = x.iter().product();
        if n == 0 {
            return Ok(());
        }
        let rest: usize = x[2..].iter().product();
        let f = gpu.function(Kernel::Movement, self.entry)?;
        let a = Args::new()
            .push(n as i64)
            .push(x[t] as i64)
            .push(x[b] as i64)
            .push(rest as i64)
            .push((t == 0) as i32)
            .push(io.in_ptr(1)?)
            .push(io.in_ptr(0)?)
            .push(io.out_ptr(0)?);
        // SAFETY: matches `reverse_sequence_wN_IDX(i64, i64, i64, i64, int, const IDX*,
        // const W*, W*)`; X and Y hold `n` elements, the lengths one per batch
        // entry (checked above), and every source index stays inside X.
        unsafe { a.launch(gpu, &f, gpu.grid(n as u64)) }
    }
}

fn build_reverse_sequence(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let dtype = spec.input_dtype(0)?;
    let width = super::movement::elem_width("ReverseSequence", dtype)?;
    if width > 8 {
        return Err(unsupported("ReverseSequence", dtype));
    }
    let idx = index_suffix("ReverseSequence", spec.input_dtype(1)?)?;
    let entry = name(format!("reverse_sequence_w{width}_{idx}"));
    Ok(Box::new(ReverseSequenceKernel { op: spec.op_as::<ReverseSequence>()?.clone(), entry }))
}

/// Registers ScatterElements, Scatter, ScatterND and ReverseSequence.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("ReverseSequence", build_reverse_sequence);
    r.register("ScatterElements", build_elements);
    r.register("Scatter", build_elements);
    r.register("ScatterND", |s| {
        let reduction = s.op_as::<ScatterNd>()?.reduction;
        Ok(Box::new(ScatterNdKernel { reduction, entry: entry(s, "nd", reduction)? }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_arguments_have_the_sizes_of_their_cuda_structs() {
        assert_eq!(std::mem::size_of::<ScatterElementsArgs>(), 48 + 2 * 8 * MOVE_RANK);
        assert_eq!(std::mem::size_of::<ScatterNdArgs>(), 24 + 2 * 8 * MOVE_RANK);
    }
}
