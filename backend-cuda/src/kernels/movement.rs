//! Data movement through one strided-copy kernel (`copy32_wN`/`copy64_wN` in
//! movement.cu): Transpose, Slice, Expand, Tile, Concat, Split and Dropout
//! (inference). Each op becomes one or more [`Plan`]s, which are simplified
//! (unit dims dropped, contiguous dims merged) and widened to 16-byte elements
//! where the layout allows before launching.

use std::collections::HashMap;
use std::sync::Mutex;

use cudarc::driver::LaunchConfig;
use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::movement::{Concat, Slice, Split, Transpose};
use onyx_core::shape::normalize_axis;
use onyx_kernels::Kernel;

use super::{CudaKernel, Io, Registry, broadcast_strides, strides, unsupported};
use crate::gpu::{Args, Gpu};

/// The most dims the movement kernels take (`MOVE_RANK` in movement.cu).
pub(crate) const MOVE_RANK: usize = 16;

/// The tile edge of the shared-memory transpose (`TILE` in movement.cu).
const TILE: i64 = 32;

/// An entry-point name, leaked once so kernels can hold `&'static str`.
pub(crate) fn name(s: String) -> &'static str {
    static NAMES: Mutex<Option<HashMap<String, &'static str>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    let map = names.get_or_insert_with(HashMap::new);
    map.entry(s.clone()).or_insert_with(|| Box::leak(s.into_boxed_str()))
}

/// Bytes per element of a dtype the movement kernels can move (every
/// byte-aligned dtype of 1, 2, 4, 8 or 16 bytes), or `Unsupported`.
pub(crate) fn elem_width(op: &str, d: DType) -> Result<usize, EpError> {
    match d.bits() {
        8 | 16 | 32 | 64 | 128 if d.is_byte_aligned() => Ok(d.bits() / 8),
        _ => Err(unsupported(op, d)),
    }
}

/// The width of input 0's elements.
pub(crate) fn width_of(spec: &KernelSpec<'_>) -> Result<usize, EpError> {
    elem_width(&spec.node.op_type, spec.input_dtype(0)?)
}

/// The suffix of an index dtype (`i32` or `i64`), or `Unsupported`.
pub(crate) fn index_suffix(op: &str, d: DType) -> Result<&'static str, EpError> {
    match d {
        DType::I32 => Ok("i32"),
        DType::I64 => Ok("i64"),
        _ => Err(unsupported(&format!("{op} indices"), d)),
    }
}

/// A dim list or stride list copied into a fixed kernel array.
pub(crate) fn fixed<T: Copy + Into<i64>>(v: &[T]) -> Result<[i64; MOVE_RANK], EpError> {
    if v.len() > MOVE_RANK {
        return Err(EpError::Unsupported(format!(
            "{} dims exceed the CUDA movement kernels' {MOVE_RANK}",
            v.len()
        )));
    }
    let mut a = [0i64; MOVE_RANK];
    for (slot, &x) in a.iter_mut().zip(v) {
        *slot = x.into();
    }
    Ok(a)
}

/// Dims or strides as i64.
pub(crate) fn signed(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

/// A resolved axis, or a kernel error.
pub(crate) fn axis(axis: i64, rank: usize) -> Result<usize, EpError> {
    normalize_axis(axis, rank)
        .ok_or_else(|| EpError::Kernel(format!("axis {axis} is out of range for rank {rank}")))
}

/// `CopyArgs` in movement.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
struct CopyArgs {
    numel: i64,
    rank: i32,
    _pad: i32,
    src_off: i64,
    dst_off: i64,
    dims: [i64; MOVE_RANK],
    src: [i64; MOVE_RANK],
    dst: [i64; MOVE_RANK],
}

// SAFETY: plain `#[repr(C)]` data matching `struct CopyArgs` in movement.cu
// (every field 8-byte aligned after the two i32s, so no hidden padding differs).
unsafe impl cudarc::driver::DeviceRepr for CopyArgs {}

/// A strided copy: the element at coordinate `c` over `dims` moves from source
/// element `src_off + Σ c[d]·src[d]` to destination element `dst_off + Σ c[d]·dst[d]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The dims iterated over.
    pub dims: Vec<i64>,
    /// Source strides per dim, in elements (negative for reversed slices, 0 to broadcast).
    pub src: Vec<i64>,
    /// Destination strides per dim, in elements.
    pub dst: Vec<i64>,
    /// The source element of coordinate 0.
    pub src_off: i64,
    /// The destination element of coordinate 0.
    pub dst_off: i64,
}

impl Plan {
    /// A copy over `dims` reading with `src` strides into a packed (row-major) destination.
    pub fn packed(dims: &[usize], src: Vec<i64>, src_off: i64) -> Self {
        Plan { dims: signed(dims), src, dst: signed(&strides(dims)), src_off, dst_off: 0 }
    }

    /// Elements moved.
    pub fn numel(&self) -> i64 {
        self.dims.iter().product()
    }

    /// The same copy with unit dims dropped and neighbours merged where the
    /// outer one steps exactly over the inner one in both source and destination.
    pub fn simplified(&self) -> Self {
        let mut out = Plan { dims: vec![], src: vec![], dst: vec![], ..*self };
        for d in 0..self.dims.len() {
            let (n, s, t) = (self.dims[d], self.src[d], self.dst[d]);
            if n == 1 {
                continue;
            }
            out.dims.push(n);
            out.src.push(s);
            out.dst.push(t);
        }
        // Merge from the innermost dim outwards.
        let mut k = out.dims.len();
        while k >= 2 {
            let (o, i) = (k - 2, k - 1);
            if out.src[o] == out.src[i] * out.dims[i] && out.dst[o] == out.dst[i] * out.dims[i] {
                out.dims[i] *= out.dims[o];
                out.dims.remove(o);
                out.src.remove(o);
                out.dst.remove(o);
            }
            k -= 1;
        }
        out
    }

    /// The copy in elements `k` times wider (`k` a power of two with
    /// `width · k ≤ 16`), when the innermost dim is contiguous on both sides
    /// and every stride, offset and the innermost length divide by `k`.
    /// Returns the plan and the new element width.
    pub fn widened(&self, width: usize) -> (Self, usize) {
        let Some(last) = self.dims.len().checked_sub(1) else { return (self.clone(), width) };
        if self.src[last] != 1 || self.dst[last] != 1 {
            return (self.clone(), width);
        }
        let mut k = 16 / width;
        while k >= 2 {
            let kk = k as i64;
            let outer_ok = (0..last).all(|d| self.src[d] % kk == 0 && self.dst[d] % kk == 0);
            if outer_ok
                && self.dims[last] % kk == 0
                && self.src_off % kk == 0
                && self.dst_off % kk == 0
            {
                let mut p = self.clone();
                p.dims[last] /= kk;
                for d in 0..last {
                    p.src[d] /= kk;
                    p.dst[d] /= kk;
                }
                p.src_off /= kk;
                p.dst_off /= kk;
                return (p.simplified(), width * k);
            }
            k /= 2;
        }
        (self.clone(), width)
    }

    /// Queues the copy from `x` to `y`, elements of `width` bytes. Nothing is
    /// launched for an empty copy.
    ///
    /// The caller guarantees that every source and destination offset the plan
    /// reaches lies inside `x` and `y`.
    pub fn launch(&self, gpu: &Gpu, width: usize, x: u64, y: u64) -> Result<(), EpError> {
        if self.numel() == 0 {
            return Ok(());
        }
        let (p, w) = self.simplified().widened(width);
        let n = p.numel();
        let args = CopyArgs {
            numel: n,
            rank: p.dims.len() as i32,
            _pad: 0,
            src_off: p.src_off,
            dst_off: p.dst_off,
            dims: fixed(&p.dims)?,
            src: fixed(&p.src)?,
            dst: fixed(&p.dst)?,
        };
        if let Some(dim) = p.tiled_dim() {
            let (np, nl) = (p.dims[dim], p.dims[p.dims.len() - 1]);
            let tiles = n / (np * nl) * ((np + TILE - 1) / TILE) * ((nl + TILE - 1) / TILE);
            let blocks = (tiles as u64).clamp(1, gpu.sms as u64 * 16) as u32;
            let cfg = LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (TILE as u32, 8, 1),
                shared_mem_bytes: 0,
            };
            let f = gpu.function(Kernel::Movement, name(format!("transpose_w{w}")))?;
            let a = Args::new().push(args).push(dim as i32).push(x).push(y);
            // SAFETY: matches `transpose_wW(CopyArgs, int, const W*, W*)` with W of
            // `w` bytes; it moves exactly the plan's elements, which the caller
            // guarantees stay inside both buffers.
            return unsafe { a.launch(gpu, &f, cfg) };
        }
        let bits = if n <= u32::MAX as i64 { 32 } else { 64 };
        let f = gpu.function(Kernel::Movement, name(format!("copy{bits}_w{w}")))?;
        let a = Args::new().push(args).push(x).push(y);
        // SAFETY: matches `copyNN_wW(CopyArgs, const W*, W*)` with W of `w` bytes;
        // the caller guarantees the plan stays inside both buffers, and widening
        // only regroups whole runs of elements.
        unsafe { a.launch(gpu, &f, gpu.grid(n as u64)) }
    }

    /// For a simplified plan whose innermost dim is contiguous in the
    /// destination but strided in the source: the dim contiguous in the
    /// source, when both are long enough for 32 × 32 tiles to pay off.
    fn tiled_dim(&self) -> Option<usize> {
        let last = self.dims.len().checked_sub(1)?;
        if self.dst[last] != 1 || matches!(self.src[last], 0 | 1) || self.dims[last] < 8 {
            return None;
        }
        (0..last).find(|&d| self.src[d] == 1 && self.dims[d] >= 8)
    }
}

/// The plan of a Transpose of `dims` by `perm`.
fn transpose_plan(dims: &[usize], perm: &[usize]) -> Plan {
    let s = strides(dims);
    let out: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
    Plan::packed(&out, perm.iter().map(|&p| s[p] as i64).collect(), 0)
}

/// The plan of a Tile of `dims` into `out`: each axis splits into
/// (repeats, the input's dim), the repeats reading the same input again.
fn tile_plan(dims: &[usize], out: &[usize]) -> Result<Plan, EpError> {
    if dims.len() != out.len() || dims.iter().zip(out).any(|(&d, &o)| d == 0 && o != 0) {
        return Err(EpError::Kernel(format!("Tile of {dims:?} cannot give {out:?}")));
    }
    let (s, t) = (strides(dims), strides(out));
    let mut p = Plan { dims: vec![], src: vec![], dst: vec![], src_off: 0, dst_off: 0 };
    for d in 0..dims.len() {
        let n = dims[d].max(1);
        if out[d] % n != 0 {
            return Err(EpError::Kernel(format!("Tile of {dims:?} cannot give {out:?}")));
        }
        p.dims.extend([(out[d] / n) as i64, dims[d] as i64]);
        p.src.extend([0, s[d] as i64]);
        p.dst.extend([(dims[d] * t[d]) as i64, t[d] as i64]);
    }
    Ok(p)
}

/// The plan of a Slice of `dims` (the output dims are the resolved lengths).
fn slice_plan(dims: &[usize], axes: &[onyx_core::ops::movement::SliceAxis]) -> Plan {
    let s = strides(dims);
    let out: Vec<usize> = axes.iter().map(|a| a.len).collect();
    let src = axes.iter().zip(&s).map(|(a, &st)| a.step * st as i64).collect();
    let off = axes.iter().zip(&s).map(|(a, &st)| if a.len > 0 { a.start * st as i64 } else { 0 });
    Plan::packed(&out, src, off.sum())
}

/// Transpose by a permutation.
struct TransposeKernel {
    op: Transpose,
    width: usize,
}

impl CudaKernel for TransposeKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let x = io.input(0)?;
        let perm = self.op.perm(x.shape.len()).map_err(|e| EpError::Kernel(e.to_string()))?;
        transpose_plan(&x.shape, &perm).launch(gpu, self.width, io.in_ptr(0)?, io.out_ptr(0)?)
    }
}

/// Slice with bounds from attributes or value inputs 1–4.
struct SliceKernel {
    op: Slice,
    width: usize,
}

impl CudaKernel for SliceKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
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
        let plan = slice_plan(&x.shape, &resolved);
        if plan.numel() != io.output(0)?.numel() as i64 {
            return Err(EpError::Kernel("Slice output does not match its bounds".into()));
        }
        plan.launch(gpu, self.width, io.in_ptr(0)?, io.out_ptr(0)?)
    }
}

/// Expand (broadcast) or Tile (repeat) into the output's shape.
struct ExpandKernel {
    width: usize,
    tile: bool,
}

impl CudaKernel for ExpandKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (x, out) = (&io.input(0)?.shape, &io.output(0)?.shape);
        let plan = if self.tile {
            tile_plan(x, out)?
        } else {
            let fits = x.len() <= out.len()
                && x.iter().rev().zip(out.iter().rev()).all(|(&a, &b)| a == b || a == 1);
            if !fits {
                return Err(EpError::Kernel(format!("Expand of {x:?} cannot give {out:?}")));
            }
            Plan::packed(out, broadcast_strides(x, out), 0)
        };
        plan.launch(gpu, self.width, io.in_ptr(0)?, io.out_ptr(0)?)
    }
}

/// Concat: one copy per input into its region of the output.
struct ConcatKernel {
    axis: i64,
    width: usize,
}

impl CudaKernel for ConcatKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let out = &io.output(0)?.shape;
        let axis = axis(self.axis, out.len())?;
        let t = strides(out);
        let y = io.out_ptr(0)?;
        let mut start = 0;
        for i in (0..io.inputs.len()).filter(|&i| io.has_input(i)) {
            let x = &io.input(i)?.shape;
            let fits = x.len() == out.len()
                && (0..out.len()).all(|d| d == axis || x[d] == out[d])
                && start + x[axis] <= out[axis];
            if !fits {
                return Err(EpError::Kernel(format!("Concat input {x:?} does not fit {out:?}")));
            }
            let plan = Plan {
                dims: signed(x),
                src: signed(&strides(x)),
                dst: signed(&t),
                src_off: 0,
                dst_off: (start * t[axis]) as i64,
            };
            plan.launch(gpu, self.width, io.in_ptr(i)?, y)?;
            start += x[axis];
        }
        Ok(())
    }
}

/// Split: one copy per requested output from its region of the input.
struct SplitKernel {
    op: Split,
    width: usize,
}

impl CudaKernel for SplitKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let x = &io.input(0)?.shape;
        let axis = axis(self.op.axis, x.len())?;
        let split = match &self.op.split_attr {
            Some(s) => Some(s.clone()),
            None if io.has_value(1) => Some(io.ints(1)?),
            None => None,
        };
        let sizes =
            self.op.sizes(x[axis], split.as_deref()).map_err(|e| EpError::Kernel(e.to_string()))?;
        let s = signed(&strides(x));
        let mut start = 0;
        for (o, &size) in sizes.iter().enumerate() {
            if io.has_output(o) {
                let y = &io.output(o)?.shape;
                let mut want = x.clone();
                want[axis] = size;
                if *y != want {
                    return Err(EpError::Kernel(format!(
                        "Split output {o} is {y:?}, not {want:?}"
                    )));
                }
                let plan = Plan::packed(y, s.clone(), start as i64 * s[axis]);
                plan.launch(gpu, self.width, io.in_ptr(0)?, io.out_ptr(o)?)?;
            }
            start += size;
        }
        Ok(())
    }
}

/// Dropout at inference: a copy (none when in place), and an all-true mask when asked.
struct DropoutKernel {
    width: usize,
}

impl CudaKernel for DropoutKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let x = &io.input(0)?.shape;
        let (src, dst) = (io.in_ptr(0)?, io.out_ptr(0)?);
        if src != dst {
            Plan::packed(x, signed(&strides(x)), 0).launch(gpu, self.width, src, dst)?;
        }
        if io.has_output(1) {
            let n = io.output(1)?.numel();
            super::generate::fill(gpu, io.out_ptr(1)?, n, &[1])?;
        }
        Ok(())
    }

    fn in_place(&self) -> bool {
        true
    }
}

/// Registers the data-movement kernels.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("Transpose", |s| {
        Ok(Box::new(TransposeKernel { op: s.op_as::<Transpose>()?.clone(), width: width_of(s)? }))
    });
    r.register("Slice", |s| {
        Ok(Box::new(SliceKernel { op: s.op_as::<Slice>()?.clone(), width: width_of(s)? }))
    });
    r.register("Expand", |s| Ok(Box::new(ExpandKernel { width: width_of(s)?, tile: false })));
    r.register("Tile", |s| Ok(Box::new(ExpandKernel { width: width_of(s)?, tile: true })));
    r.register("Concat", |s| {
        Ok(Box::new(ConcatKernel { axis: s.op_as::<Concat>()?.axis, width: width_of(s)? }))
    });
    r.register("Split", |s| {
        Ok(Box::new(SplitKernel { op: s.op_as::<Split>()?.clone(), width: width_of(s)? }))
    });
    r.register("Dropout", |s| {
        // A training_mode input is a device tensor here: leave it to a host backend.
        if s.input_dtypes.get(2).copied().flatten().is_some() {
            return Err(EpError::Unsupported("Dropout with a training_mode input on CUDA".into()));
        }
        Ok(Box::new(DropoutKernel { width: width_of(s)? }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use onyx_core::ops::movement::SliceAxis;

    /// Every (source, destination) pair a plan moves, in coordinate order.
    fn pairs(p: &Plan) -> Vec<(i64, i64)> {
        let n = p.numel();
        (0..n)
            .map(|mut i| {
                let (mut s, mut t) = (p.src_off, p.dst_off);
                for d in (0..p.dims.len()).rev() {
                    let c = i % p.dims[d];
                    i /= p.dims[d];
                    s += c * p.src[d];
                    t += c * p.dst[d];
                }
                (s, t)
            })
            .collect()
    }

    /// The pairs in bytes, sorted by destination, for comparing plans of different widths.
    fn bytes(p: &Plan, width: usize) -> Vec<(i64, i64)> {
        let w = width as i64;
        let mut v: Vec<(i64, i64)> = pairs(p)
            .into_iter()
            .flat_map(|(s, t)| (0..w).map(move |b| (s * w + b, t * w + b)))
            .map(|(s, t)| (t, s))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn copy_arguments_have_the_size_of_their_cuda_struct() {
        // 416 bytes: `.param .align 8 .b8 copy32_w1_param_0[416]` in the PTX.
        assert_eq!(std::mem::size_of::<CopyArgs>(), 416);
    }

    #[test]
    fn simplifying_merges_contiguous_dims_and_keeps_every_move() {
        let p = transpose_plan(&[2, 3, 4, 5], &[0, 2, 1, 3]);
        let q = p.simplified();
        assert_eq!(q.dims, vec![2, 4, 3, 5]);
        let id = Plan::packed(&[2, 1, 3, 4], signed(&strides(&[2, 1, 3, 4])), 0);
        let q = id.simplified();
        assert_eq!((q.dims.clone(), q.src.clone(), q.dst.clone()), (vec![24], vec![1], vec![1]));
        assert_eq!(bytes(&q, 4), bytes(&id, 4));
        let t = transpose_plan(&[6, 1, 2, 8], &[3, 1, 0, 2]);
        assert_eq!(bytes(&t.simplified(), 2), bytes(&t, 2));
    }

    #[test]
    fn widening_regroups_whole_runs_into_sixteen_byte_elements() {
        // Concat of [2, 4, 8] f32 into [2, 12, 8] at axis 1, offset 4 rows.
        let t = strides(&[2, 12, 8]);
        let p = Plan {
            dims: vec![2, 4, 8],
            src: signed(&strides(&[2, 4, 8])),
            dst: signed(&t),
            src_off: 0,
            dst_off: 4 * t[1] as i64,
        }
        .simplified();
        let (w, width) = p.widened(4);
        assert_eq!(width, 16);
        assert_eq!(bytes(&w, width), bytes(&p, 4));
        // An odd innermost run cannot widen; a run of 6 u8 widens to 2 bytes only.
        let odd = Plan::packed(&[3, 5], vec![10, 1], 0);
        assert_eq!(odd.widened(4).1, 4);
        let six = Plan::packed(&[6], vec![1], 2);
        let (w6, width6) = six.widened(1);
        assert_eq!(width6, 2);
        assert_eq!(bytes(&w6, width6), bytes(&six, 1));
    }

    #[test]
    fn only_transposes_of_the_innermost_dim_take_the_tiled_kernel() {
        let t = transpose_plan(&[4, 64, 48], &[0, 2, 1]).simplified();
        assert_eq!(t.tiled_dim(), Some(1));
        // The innermost dim stays innermost: a plain (widened) copy.
        assert_eq!(transpose_plan(&[4, 64, 48], &[1, 0, 2]).simplified().tiled_dim(), None);
        // Too short a source run, and a broadcast, stay plain.
        assert_eq!(transpose_plan(&[64, 4], &[1, 0]).simplified().tiled_dim(), None);
        let e = Plan::packed(&[64, 64], broadcast_strides(&[64, 1], &[64, 64]), 0);
        assert_eq!(e.simplified().tiled_dim(), None);
    }

    #[test]
    fn tile_plans_repeat_the_input_along_every_axis() {
        let p = tile_plan(&[2, 3], &[4, 6]).unwrap();
        let src: Vec<i64> = {
            let mut v = pairs(&p);
            v.sort_by_key(|&(_, t)| t);
            v.into_iter().map(|(s, _)| s).collect()
        };
        // Row-major [4, 6] output of tile([[0, 1, 2], [3, 4, 5]], [2, 2]).
        let row = |r: i64| [0, 1, 2, 0, 1, 2].map(|c| r * 3 + c);
        let want: Vec<i64> = [0, 1, 0, 1].iter().flat_map(|&r| row(r)).collect();
        assert_eq!(src, want);
        assert!(tile_plan(&[2, 3], &[4, 7]).is_err());
    }

    #[test]
    fn negative_step_slices_read_backwards_from_the_clamped_start() {
        let axes =
            [SliceAxis { start: 1, step: 1, len: 2 }, SliceAxis { start: 3, step: -2, len: 2 }];
        let p = slice_plan(&[3, 4], &axes);
        let src: Vec<i64> = pairs(&p).into_iter().map(|(s, _)| s).collect();
        assert_eq!(src, vec![7, 5, 11, 9]);
        assert_eq!(bytes(&p.simplified().widened(8).0, 8), bytes(&p, 8));
    }

    #[test]
    fn expand_plans_reread_broadcast_dims() {
        let out = [2, 3, 2];
        let p = Plan::packed(&out, broadcast_strides(&[3, 1], &out), 0);
        let src: Vec<i64> = pairs(&p.simplified()).into_iter().map(|(s, _)| s).collect();
        assert_eq!(src, vec![0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]);
    }
}
