//! Gathers and Pad: Gather, GatherElements, GatherND (int32 or int64
//! indices) and Pad (constant, reflect, edge, wrap), by element width.
//!
//! Indices live on the device, so an out-of-range index cannot fail the
//! launch: the kernels write zeros for it and never read outside the data.
//! Shape mismatches the CPU backend rejects are rejected here too, host-side.

use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::indexing::{GatherElements, GatherNd};
use onyx_core::ops::movement::Gather;
use onyx_core::ops::pad::Pad;
use onyx_kernels::Kernel;

use super::movement::{MOVE_RANK, axis, fixed, index_suffix, name, signed, width_of};
use super::{CudaKernel, Io, Registry, strides};
use crate::gpu::{Args, Gpu};

/// `GatherArgs` in movement.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct GatherArgs {
    numel: i64,
    dim: i64,
    inner: i64,
    count: i64,
}

// SAFETY: plain `#[repr(C)]` data matching `struct GatherArgs` in movement.cu.
unsafe impl cudarc::driver::DeviceRepr for GatherArgs {}

/// `GatherElementsArgs` in movement.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
struct GatherElementsArgs {
    numel: i64,
    rank: i32,
    axis: i32,
    axis_dim: i64,
    dims: [i64; MOVE_RANK],
    strides: [i64; MOVE_RANK],
}

// SAFETY: plain `#[repr(C)]` data matching `struct GatherElementsArgs` in movement.cu.
unsafe impl cudarc::driver::DeviceRepr for GatherElementsArgs {}

/// `GatherNdArgs` in movement.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
struct GatherNdArgs {
    numel: i64,
    inner: i64,
    rk: i64,
    per_batch: i64,
    batch_stride: i64,
    dims: [i64; MOVE_RANK],
    strides: [i64; MOVE_RANK],
}

// SAFETY: plain `#[repr(C)]` data matching `struct GatherNdArgs` in movement.cu.
unsafe impl cudarc::driver::DeviceRepr for GatherNdArgs {}

/// `PadArgs` in movement.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
struct PadArgs {
    numel: i64,
    rank: i32,
    mode: i32,
    fill_lo: u64,
    fill_hi: u64,
    out_dims: [i64; MOVE_RANK],
    in_dims: [i64; MOVE_RANK],
    in_strides: [i64; MOVE_RANK],
    before: [i64; MOVE_RANK],
}

// SAFETY: plain `#[repr(C)]` data matching `struct PadArgs` in movement.cu.
unsafe impl cudarc::driver::DeviceRepr for PadArgs {}

/// The widest element (a power-of-two multiple of `width`, at most 16 bytes)
/// whose count divides `inner`, so runs of `inner` elements move whole.
fn widen_inner(inner: usize, width: usize) -> usize {
    let mut k = 16 / width;
    while k > 1 && inner % k != 0 {
        k /= 2;
    }
    k.max(1)
}

/// The arguments of a Gather of `data` by `count` indices along `axis`, and
/// the element width to launch with.
fn gather_args(data: &[usize], axis: usize, count: usize, width: usize) -> (GatherArgs, usize) {
    let inner: usize = data[axis + 1..].iter().product();
    let outer: usize = data[..axis].iter().product();
    let k = widen_inner(inner, width);
    let inner = inner / k;
    let args = GatherArgs {
        numel: (outer * count * inner) as i64,
        dim: data[axis] as i64,
        inner: inner as i64,
        count: count as i64,
    };
    (args, width * k)
}

/// Launches `prefix_wW_iNN(args, x, idx, y)` over `n` output elements.
fn launch_gather<A: cudarc::driver::DeviceRepr + 'static>(
    gpu: &Gpu,
    io: &Io<'_>,
    entry: String,
    args: A,
    n: i64,
) -> Result<(), EpError> {
    if n == 0 {
        return Ok(());
    }
    let f = gpu.function(Kernel::Movement, name(entry))?;
    let a = Args::new().push(args).push(io.in_ptr(0)?).push(io.in_ptr(1)?).push(io.out_ptr(0)?);
    // SAFETY: matches `(XArgs, const W*, const IDX*, W*)` for the entry chosen by
    // width and index dtype; the arguments describe the launch's own tensors,
    // checked against one another by the caller, and the kernels resolve every
    // index before reading the data.
    unsafe { a.launch(gpu, &f, gpu.grid(n as u64)) }
}

/// Gather along an axis.
struct GatherKernel {
    axis: i64,
    width: usize,
    idx: &'static str,
}

impl CudaKernel for GatherKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (x, idx, y) = (&io.input(0)?.shape, io.input(1)?, io.output(0)?);
        let axis = axis(self.axis, x.len())?;
        let (args, w) = gather_args(x, axis, idx.numel(), self.width);
        // Compared in bytes: the output holds outer × count × inner elements.
        if y.numel() * self.width != args.numel as usize * w {
            return Err(EpError::Kernel(format!("Gather output {:?} does not fit", y.shape)));
        }
        let entry = format!("gather_w{w}_{}", self.idx);
        launch_gather(gpu, io, entry, args, args.numel)
    }
}

/// GatherElements along an axis.
struct GatherElementsKernel {
    axis: i64,
    width: usize,
    idx: &'static str,
}

impl CudaKernel for GatherElementsKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (data, dims) = (&io.input(0)?.shape, &io.input(1)?.shape);
        let axis = axis(self.axis, data.len())?;
        let fits = dims.len() == data.len()
            && (0..dims.len()).all(|d| d == axis || dims[d] <= data[d])
            && io.output(0)?.shape == *dims;
        if !fits {
            return Err(EpError::Kernel(format!(
                "GatherElements indices {dims:?} do not fit data {data:?} on axis {axis}"
            )));
        }
        let n = dims.iter().product::<usize>() as i64;
        let args = GatherElementsArgs {
            numel: n,
            rank: dims.len() as i32,
            axis: axis as i32,
            axis_dim: data[axis] as i64,
            dims: fixed(&signed(dims))?,
            strides: fixed(&signed(&strides(data)))?,
        };
        launch_gather(gpu, io, format!("gather_elements_w{}_{}", self.width, self.idx), args, n)
    }
}

/// The arguments of a GatherND and the element width to launch with.
fn gather_nd_args(
    op: &GatherNd,
    data: &[usize],
    idims: &[usize],
    width: usize,
) -> Result<(GatherNdArgs, usize), EpError> {
    let out = op.output_dims(data, idims).map_err(|e| EpError::Kernel(e.to_string()))?;
    let (b, rk) = (op.batch_dims, idims[idims.len() - 1]);
    let inner: usize = data[b + rk..].iter().product();
    let k = widen_inner(inner, width);
    let ds = strides(data);
    let per_batch: usize = idims[b..idims.len() - 1].iter().product();
    let batch_stride: usize = data[b..].iter().product();
    let numel = out.iter().product::<usize>() / k;
    let scaled: Vec<i64> = ds[b..b + rk].iter().map(|&s| (s / k) as i64).collect();
    let args = GatherNdArgs {
        numel: numel as i64,
        inner: (inner / k) as i64,
        rk: rk as i64,
        per_batch: per_batch as i64,
        batch_stride: (batch_stride / k) as i64,
        dims: fixed(&signed(&data[b..b + rk]))?,
        strides: fixed(&scaled)?,
    };
    Ok((args, width * k))
}

/// GatherND with `batch_dims`.
struct GatherNdKernel {
    op: GatherNd,
    width: usize,
    idx: &'static str,
}

impl CudaKernel for GatherNdKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (data, idims) = (&io.input(0)?.shape, &io.input(1)?.shape);
        let (args, w) = gather_nd_args(&self.op, data, idims, self.width)?;
        if io.output(0)?.numel() as i64 * self.width as i64 != args.numel * w as i64 {
            return Err(EpError::Kernel("GatherND output does not fit its inputs".into()));
        }
        let n = args.numel;
        launch_gather(gpu, io, format!("gather_nd_w{w}_{}", self.idx), args, n)
    }
}

/// Pad's dims with runs of unpadded neighbours merged into one dim:
/// `(output dims, input dims, pads before)`.
fn pad_dims(dims: &[usize], pads: &[(i64, i64)]) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    let (mut out, mut inp, mut before) = (vec![], vec![], vec![]);
    let mut prev_unpadded = false;
    for (&n, &(b, e)) in dims.iter().zip(pads) {
        let unpadded = b == 0 && e == 0;
        if unpadded && prev_unpadded {
            let last = inp.len() - 1;
            inp[last] *= n as i64;
            out[last] *= n as i64;
        } else {
            inp.push(n as i64);
            out.push(n as i64 + b + e);
            before.push(b);
        }
        prev_unpadded = unpadded;
    }
    (out, inp, before)
}

/// Pad with pads from the attribute or value inputs 1 (pads), 2 (constant) and 3 (axes).
struct PadKernel {
    op: Pad,
    width: usize,
}

impl CudaKernel for PadKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (x, y) = (io.input(0)?, io.output(0)?);
        let opt = |i: usize| io.has_value(i).then(|| io.ints(i)).transpose();
        let (pads, axes) = if self.op.attrs.is_some() { (None, None) } else { (opt(1)?, opt(3)?) };
        let constant =
            if self.op.attrs.is_some() { None } else { io.values.get(2).and_then(Option::as_ref) };
        let launch = self
            .op
            .launch(x.shape.len(), x.dtype, pads.as_deref(), axes.as_deref(), constant)
            .map_err(|e| EpError::Kernel(e.to_string()))?;
        let want =
            Pad::output_dims(&x.shape, &launch.pads).map_err(|e| EpError::Kernel(e.to_string()))?;
        if want != y.shape {
            return Err(EpError::Kernel(format!("Pad output {:?} is not {want:?}", y.shape)));
        }
        let n = y.numel() as i64;
        if n == 0 {
            return Ok(());
        }
        let mut fill = launch.fill.clone();
        fill.resize(16, 0);
        let word = |k: usize| u64::from_le_bytes(fill[8 * k..8 * k + 8].try_into().expect("8"));
        let (out, inp, before) = pad_dims(&x.shape, &launch.pads);
        let in_strides: Vec<usize> = strides(&inp.iter().map(|&d| d as usize).collect::<Vec<_>>());
        let args = PadArgs {
            numel: n,
            rank: out.len() as i32,
            mode: self.op.mode.code() as i32,
            fill_lo: word(0),
            fill_hi: word(1),
            out_dims: fixed(&out)?,
            in_dims: fixed(&inp)?,
            in_strides: fixed(&signed(&in_strides))?,
            before: fixed(&before)?,
        };
        let f = gpu.function(Kernel::Movement, name(format!("pad_w{}", self.width)))?;
        let a = Args::new().push(args).push(io.in_ptr(0)?).push(io.out_ptr(0)?);
        // SAFETY: matches `pad_wW(PadArgs, const W*, W*)`; the output holds `n`
        // elements of the checked padded shape, and every read is of an input
        // coordinate inside its dim.
        unsafe { a.launch(gpu, &f, gpu.grid(n as u64)) }
    }
}

/// Index kernels need the index dtype's entry suffix.
fn idx_of(spec: &KernelSpec<'_>) -> Result<&'static str, EpError> {
    index_suffix(&spec.node.op_type, spec.input_dtype(1)?)
}

/// Registers Gather, GatherElements, GatherND and Pad.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("Gather", |s| {
        let (axis, width, idx) = (s.op_as::<Gather>()?.axis, width_of(s)?, idx_of(s)?);
        Ok(Box::new(GatherKernel { axis, width, idx }))
    });
    r.register("GatherElements", |s| {
        let (axis, width, idx) = (s.op_as::<GatherElements>()?.axis, width_of(s)?, idx_of(s)?);
        Ok(Box::new(GatherElementsKernel { axis, width, idx }))
    });
    r.register("GatherND", |s| {
        let (op, width, idx) = (s.op_as::<GatherNd>()?.clone(), width_of(s)?, idx_of(s)?);
        Ok(Box::new(GatherNdKernel { op, width, idx }))
    });
    r.register("Pad", |s| {
        Ok(Box::new(PadKernel { op: s.op_as::<Pad>()?.clone(), width: width_of(s)? }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_structs_have_the_sizes_of_their_cuda_structs() {
        // The `.param .align 8 .b8 …[N]` sizes of the entry points in the PTX.
        assert_eq!(std::mem::size_of::<GatherArgs>(), 32);
        assert_eq!(std::mem::size_of::<GatherElementsArgs>(), 280);
        assert_eq!(std::mem::size_of::<GatherNdArgs>(), 296);
        assert_eq!(std::mem::size_of::<PadArgs>(), 544);
    }

    #[test]
    fn gathers_widen_only_by_factors_of_the_inner_run() {
        assert_eq!(widen_inner(4096, 2), 8);
        assert_eq!(widen_inner(6, 4), 2);
        assert_eq!(widen_inner(3, 1), 1);
        assert_eq!(widen_inner(8, 16), 1);
        let (a, w) = gather_args(&[5, 4, 8], 1, 3, 4);
        assert_eq!((a, w), (GatherArgs { numel: 5 * 3 * 2, dim: 4, inner: 2, count: 3 }, 16));
        let (a, w) = gather_args(&[7, 3], 1, 2, 8);
        assert_eq!((a, w), (GatherArgs { numel: 14, dim: 3, inner: 1, count: 2 }, 8));
    }

    #[test]
    fn gather_nd_arguments_scale_strides_with_the_wider_element() {
        let op = GatherNd { batch_dims: 1 };
        // data [2, 3, 4, 4] f32, indices [2, 5, 1]: slices of 16 elements.
        let (a, w) = gather_nd_args(&op, &[2, 3, 4, 4], &[2, 5, 1], 4).unwrap();
        assert_eq!(w, 16);
        assert_eq!((a.numel, a.inner, a.rk, a.per_batch, a.batch_stride), (40, 4, 1, 5, 12));
        assert_eq!((a.dims[0], a.strides[0]), (3, 4));
        assert!(gather_nd_args(&op, &[2, 3], &[3, 1], 4).is_err());
    }

    #[test]
    fn pad_merges_only_runs_of_unpadded_dims() {
        let (out, inp, before) = pad_dims(&[2, 3, 4, 5], &[(0, 0), (0, 0), (1, -1), (0, 0)]);
        assert_eq!((out, inp, before), (vec![6, 4, 5], vec![6, 4, 5], vec![0, 1, 0]));
        let (out, inp, before) = pad_dims(&[2, 3, 4], &[(1, 0), (0, 0), (0, 0)]);
        assert_eq!((out, inp, before), (vec![3, 12], vec![2, 12], vec![1, 0]));
    }
}
