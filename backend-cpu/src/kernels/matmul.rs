//! MatMul and Gemm through the `gemm` crate (f32, f64, f16; bf16 via f32),
//! with a plain loop for the integer types the spec allows.

use gemm::Parallelism;
use half::bf16;
use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::linalg::Gemm;

use crate::par::Loop;

use rayon::prelude::*;

use super::broadcast::{Broadcast, Run};
use super::dispatch::AsF64;
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// Strides (in elements) of a row-major matrix operand, possibly transposed.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Mat {
    pub offset: usize,
    pub row_stride: isize,
    pub col_stride: isize,
}

impl Mat {
    /// A row-major `rows × cols` matrix at `offset`; transposed views swap the strides.
    pub fn row_major(offset: usize, cols: usize, transposed: bool) -> Mat {
        if transposed {
            Mat { offset, row_stride: 1, col_stride: cols as isize }
        } else {
            Mat { offset, row_stride: cols as isize, col_stride: 1 }
        }
    }
}

/// Types the `gemm` crate multiplies natively.
pub(crate) trait GemmType:
    Copy + Send + Sync + 'static + num_traits::Zero + num_traits::One
{
}
impl GemmType for f32 {}
impl GemmType for f64 {}
impl GemmType for half::f16 {}

fn parallelism(m: usize, n: usize, k: usize) -> Parallelism {
    // A serial run (crate::par) keeps products on the calling thread.
    if m * n * k >= 48 * 48 * 48 && !crate::par::is_serial() {
        Parallelism::Rayon(0)
    } else {
        Parallelism::None
    }
}

/// `dst = dst_scale * dst + scale * a @ b` for one `m × n × k` product.
///
/// # Safety
/// Every element addressed through the offsets and strides must lie inside the
/// slices, and `dst` must not overlap `a` or `b`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_into<T: GemmType>(
    (m, n, k): (usize, usize, usize),
    dst: &mut [T],
    dst_offset: usize,
    a: &[T],
    ma: Mat,
    b: &[T],
    mb: Mat,
    accumulate: bool,
    scale: T,
) {
    let par = parallelism(m, n, k);
    // SAFETY: forwarded from the caller.
    unsafe { gemm_with(par, (m, n, k), dst, dst_offset, a, ma, b, mb, accumulate, scale) }
}

/// [`gemm_into`] with the given parallelism.
///
/// # Safety
/// As [`gemm_into`].
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_with<T: GemmType>(
    par: Parallelism,
    (m, n, k): (usize, usize, usize),
    dst: &mut [T],
    dst_offset: usize,
    a: &[T],
    ma: Mat,
    b: &[T],
    mb: Mat,
    accumulate: bool,
    scale: T,
) {
    // SAFETY: guaranteed by the caller (bounds) and by the borrow rules (no overlap).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr().add(dst_offset),
            1,
            n as isize,
            accumulate,
            a.as_ptr().add(ma.offset),
            ma.col_stride,
            ma.row_stride,
            b.as_ptr().add(mb.offset),
            mb.col_stride,
            mb.row_stride,
            if accumulate { T::one() } else { T::zero() },
            scale,
            false,
            false,
            false,
            par,
        )
    }
}

/// What [`gemm_row_bands`] does to rows of the product once they are
/// computed: `(index of the first row, those rows)`, for a bias and an
/// activation applied while the rows are still in cache.
pub(crate) type RowsDone<'a, T> = &'a (dyn Fn(usize, &mut [T]) + Sync);

/// [`gemm_into`] for a row-major `dst` (row stride `n`), not accumulating,
/// with its rows split among the pool's threads: each part is a one-thread
/// product of a band of `a`'s rows with all of `b`, after which `done` (if
/// any) runs on the band's rows.
///
/// `gemm`'s own parallel split scaled a 1 × 1 Conv (256 → 256 channels over
/// 14 × 14) 1.5× on two threads; bands of rows, each packing `b` for itself,
/// took 8% less time there (122 → 113 µs). Serial runs, products too small to
/// split and wide ones take [`gemm_into`], then `done` over parallel runs
/// of rows.
///
/// # Safety
/// As [`gemm_into`]; `a` must advance by `ma.row_stride` per row of `dst`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_row_bands<T: GemmType>(
    (m, n, k): (usize, usize, usize),
    dst: &mut [T],
    dst_offset: usize,
    a: &[T],
    ma: Mat,
    b: &[T],
    mb: Mat,
    done: Option<RowsDone<'_, T>>,
) {
    let threads = rayon::current_num_threads();
    let out = &mut dst[dst_offset..dst_offset + m * n];
    // Wide products (many columns) split well in `gemm` itself, and there
    // each band's own packing of `b` cost more than it saved (a 1 × 1 Conv
    // over 56 × 56 positions went from 138 to 156 µs).
    // `parallelism` also keeps serial runs on one thread.
    if threads < 2 || m < 32 || n > 1024 || matches!(parallelism(m, n, k), Parallelism::None) {
        // SAFETY: forwarded from the caller.
        unsafe { gemm_into((m, n, k), out, 0, a, ma, b, mb, false, T::one()) };
        if let Some(done) = done {
            let rows = super::min_rows(n);
            out.par_chunks_mut(rows * n.max(1)).enumerate().each(|(i, c)| done(i * rows, c));
        }
        return;
    }
    // Two bands per thread (the last ones finish while others still run),
    // in whole groups of 16 rows (gemm's micro-kernel height).
    let rows = m.div_ceil(2 * threads).next_multiple_of(16);
    out.par_chunks_mut(rows * n).enumerate().each(|(i, band)| {
        let r0 = i * rows;
        let mr = band.len() / n;
        let ma = Mat { offset: (ma.offset as isize + r0 as isize * ma.row_stride) as usize, ..ma };
        // SAFETY: band rows r0..r0 + mr of dst, and the same rows of `a`,
        // lie inside the caller's bounds; bands do not overlap.
        unsafe { gemm_with(Parallelism::None, (mr, n, k), band, 0, a, ma, b, mb, false, T::one()) };
        if let Some(done) = done {
            done(r0, band);
        }
    });
}

fn int_gemm<T>(
    (m, n, k): (usize, usize, usize),
    dst: &mut [T],
    dst_offset: usize,
    a: &[T],
    ma: Mat,
    b: &[T],
    mb: Mat,
) where
    T: Copy + num_traits::WrappingAdd + num_traits::WrappingMul + num_traits::Zero,
{
    let at = |i: usize, p: usize| {
        a[(ma.offset as isize + i as isize * ma.row_stride + p as isize * ma.col_stride) as usize]
    };
    let bt = |p: usize, j: usize| {
        b[(mb.offset as isize + p as isize * mb.row_stride + j as isize * mb.col_stride) as usize]
    };
    for i in 0..m {
        for j in 0..n {
            let mut acc = T::zero();
            for p in 0..k {
                acc = acc.wrapping_add(&at(i, p).wrapping_mul(&bt(p, j)));
            }
            dst[dst_offset + i * n + j] = acc;
        }
    }
}

/// The batched product plan of a numpy-style MatMul.
struct MatMulPlan {
    m: usize,
    n: usize,
    k: usize,
    /// `(dst offset, a offset, b offset)` per batch.
    batches: Vec<(usize, usize, usize)>,
}

fn plan(a: &[usize], b: &[usize]) -> Result<MatMulPlan, EpError> {
    let mut da = a.to_vec();
    let mut db = b.to_vec();
    if da.len() == 1 {
        da.insert(0, 1);
    }
    if db.len() == 1 {
        db.push(1);
    }
    let (m, k) = (da[da.len() - 2], da[da.len() - 1]);
    let (k2, n) = (db[db.len() - 2], db[db.len() - 1]);
    if k != k2 {
        return Err(EpError::Kernel(format!("MatMul inner dimensions differ: {a:?} × {b:?}")));
    }
    let ba = &da[..da.len() - 2];
    let bb = &db[..db.len() - 2];
    let rank = ba.len().max(bb.len());
    let pad = |s: &[usize]| {
        let mut v = vec![1; rank - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (pa, pb) = (pad(ba), pad(bb));
    let out: Vec<usize> = pa.iter().zip(&pb).map(|(&x, &y)| x.max(y)).collect();
    let nb: usize = out.iter().product();
    // Batch offsets from a broadcast over the batch dims, one index per batch.
    let bc = Broadcast::new(&out, &[&pa, &pb]);
    let mut idx = vec![(0usize, 0usize); nb];
    bc.for_each(&mut idx, |o, range, runs| {
        for (j, slot) in o.iter_mut().enumerate() {
            let pick = |r: Run| match r {
                Run::Slice(s) => s + j,
                Run::Scalar(s) => s,
            };
            let _ = range.start;
            *slot = (pick(runs[0]), pick(runs[1]));
        }
    });
    let batches = idx
        .into_iter()
        .enumerate()
        .map(|(i, (ia, ib))| (i * m * n, ia * m * k, ib * k * n))
        .collect();
    Ok(MatMulPlan { m, n, k, batches })
}

struct MatMulKernel {
    dtype: DType,
}

fn matmul_float<T: GemmType + bytemuck::Pod>(io: &KernelIo) -> Result<(), EpError> {
    let (va, vb) = (io.in_view(0)?, io.in_view(1)?);
    let p = plan(&va.shape, &vb.shape)?;
    let (a, b) = (io.input::<T>(0)?, io.input::<T>(1)?);
    let out = io.output::<T>(0)?;
    let shared_b = p.batches.iter().all(|&(_, _, ob)| ob == 0);
    let contiguous_a = p.batches.iter().enumerate().all(|(i, &(_, oa, _))| oa == i * p.m * p.k);
    if shared_b && contiguous_a && !p.batches.is_empty() {
        // [batch, M, K] @ [K, N]: one product with batch folded into M.
        let rows = p.m * p.batches.len();
        // SAFETY: a holds rows×k, b holds k×n, out holds rows×n elements.
        unsafe {
            gemm_into(
                (rows, p.n, p.k),
                out,
                0,
                a,
                Mat::row_major(0, p.k, false),
                b,
                Mat::row_major(0, p.n, false),
                false,
                T::one(),
            )
        };
        return Ok(());
    }
    for &(od, oa, ob) in &p.batches {
        // SAFETY: plan() derived every offset from the operand shapes.
        unsafe {
            gemm_into(
                (p.m, p.n, p.k),
                out,
                od,
                a,
                Mat::row_major(oa, p.k, false),
                b,
                Mat::row_major(ob, p.n, false),
                false,
                T::one(),
            )
        };
    }
    Ok(())
}

fn matmul_int<T>(io: &KernelIo) -> Result<(), EpError>
where
    T: bytemuck::Pod + num_traits::WrappingAdd + num_traits::WrappingMul + num_traits::Zero,
{
    let (va, vb) = (io.in_view(0)?, io.in_view(1)?);
    let p = plan(&va.shape, &vb.shape)?;
    let (a, b) = (io.input::<T>(0)?, io.input::<T>(1)?);
    let out = io.output::<T>(0)?;
    for &(od, oa, ob) in &p.batches {
        int_gemm(
            (p.m, p.n, p.k),
            out,
            od,
            a,
            Mat::row_major(oa, p.k, false),
            b,
            Mat::row_major(ob, p.n, false),
        );
    }
    Ok(())
}

fn to_f32(v: &[bf16]) -> Vec<f32> {
    v.iter().map(|x| x.to_f32()).collect()
}

impl CpuKernel for MatMulKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        match self.dtype {
            DType::F32 => matmul_float::<f32>(io),
            DType::F64 => matmul_float::<f64>(io),
            DType::F16 => matmul_float::<half::f16>(io),
            DType::BF16 => {
                let (va, vb) = (io.in_view(0)?, io.in_view(1)?);
                let p = plan(&va.shape, &vb.shape)?;
                let (a, b) = (to_f32(io.input::<bf16>(0)?), to_f32(io.input::<bf16>(1)?));
                let mut tmp = vec![0f32; io.out_view(0)?.numel()];
                for &(od, oa, ob) in &p.batches {
                    // SAFETY: offsets come from plan() over these shapes.
                    unsafe {
                        gemm_into(
                            (p.m, p.n, p.k),
                            &mut tmp,
                            od,
                            &a,
                            Mat::row_major(oa, p.k, false),
                            &b,
                            Mat::row_major(ob, p.n, false),
                            false,
                            1.0,
                        )
                    };
                }
                io.output::<bf16>(0)?.iter_mut().zip(tmp).for_each(|(o, v)| *o = bf16::from_f32(v));
                Ok(())
            }
            DType::I32 => matmul_int::<i32>(io),
            DType::I64 => matmul_int::<i64>(io),
            DType::U32 => matmul_int::<u32>(io),
            DType::U64 => matmul_int::<u64>(io),
            d => Err(unsupported_dtype("MatMul", d)),
        }
    }
}

const MATMUL_DTYPES: [DType; 8] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::I64,
    DType::U32,
    DType::U64,
];

fn build_matmul(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let dtype = spec.input_dtype(0)?;
    if !MATMUL_DTYPES.contains(&dtype) {
        return Err(unsupported_dtype("MatMul", dtype));
    }
    Ok(Box::new(MatMulKernel { dtype }))
}

struct GemmKernel {
    op: Gemm,
    dtype: DType,
}

/// Fills `out` ([m, n]) with `beta * C` broadcast; returns whether anything was written.
fn init_with_c<T: bytemuck::Pod + AsF64 + Send + Sync>(
    io: &KernelIo,
    beta: f32,
) -> Result<bool, EpError> {
    let Some(vc) = io.input_view(2) else { return Ok(false) };
    if beta == 0.0 {
        return Ok(false);
    }
    let shape = io.out_view(0)?.shape.clone();
    let c = io.input::<T>(2)?;
    let out = io.output::<T>(0)?;
    let beta = beta as f64;
    Broadcast::new(&shape, &[&vc.shape]).for_each(out, |o, _, runs| match runs[0] {
        Run::Slice(s) => {
            o.iter_mut().zip(&c[s..]).for_each(|(o, &c)| *o = T::from_f64(beta * c.to_f64()))
        }
        Run::Scalar(s) => o.fill(T::from_f64(beta * c[s].to_f64())),
    });
    Ok(true)
}

fn gemm_float<T: GemmType + bytemuck::Pod + AsF64>(io: &KernelIo, g: &Gemm) -> Result<(), EpError> {
    let (va, vb) = (io.in_view(0)?, io.in_view(1)?);
    let (m, k) = if g.trans_a { (va.shape[1], va.shape[0]) } else { (va.shape[0], va.shape[1]) };
    let n = if g.trans_b { vb.shape[0] } else { vb.shape[1] };
    let accumulate = init_with_c::<T>(io, g.beta)?;
    let (a, b) = (io.input::<T>(0)?, io.input::<T>(1)?);
    let out = io.output::<T>(0)?;
    let ma = Mat::row_major(0, va.shape[1], g.trans_a);
    let mb = Mat::row_major(0, vb.shape[1], g.trans_b);
    // SAFETY: A is m×k (or k×m transposed), B is k×n (or n×k), out is m×n.
    unsafe { gemm_into((m, n, k), out, 0, a, ma, b, mb, accumulate, T::from_f64(g.alpha as f64)) };
    Ok(())
}

fn gemm_int<T>(io: &KernelIo, g: &Gemm) -> Result<(), EpError>
where
    T: bytemuck::Pod
        + AsF64
        + Send
        + Sync
        + num_traits::WrappingAdd
        + num_traits::WrappingMul
        + num_traits::Zero,
{
    let (va, vb) = (io.in_view(0)?, io.in_view(1)?);
    let (m, k) = if g.trans_a { (va.shape[1], va.shape[0]) } else { (va.shape[0], va.shape[1]) };
    let n = if g.trans_b { vb.shape[0] } else { vb.shape[1] };
    let mut prod = vec![T::zero(); m * n];
    let (a, b) = (io.input::<T>(0)?, io.input::<T>(1)?);
    int_gemm(
        (m, n, k),
        &mut prod,
        0,
        a,
        Mat::row_major(0, va.shape[1], g.trans_a),
        b,
        Mat::row_major(0, vb.shape[1], g.trans_b),
    );
    let had_c = init_with_c::<T>(io, g.beta)?;
    let out = io.output::<T>(0)?;
    let alpha = g.alpha as f64;
    for (o, p) in out.iter_mut().zip(prod) {
        let c = if had_c { o.to_f64() } else { 0.0 };
        *o = T::from_f64(c + alpha * p.to_f64());
    }
    Ok(())
}

impl CpuKernel for GemmKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        match self.dtype {
            DType::F32 => gemm_float::<f32>(io, &self.op),
            DType::F64 => gemm_float::<f64>(io, &self.op),
            DType::F16 => gemm_float::<half::f16>(io, &self.op),
            DType::I32 => gemm_int::<i32>(io, &self.op),
            DType::I64 => gemm_int::<i64>(io, &self.op),
            DType::U32 => gemm_int::<u32>(io, &self.op),
            DType::U64 => gemm_int::<u64>(io, &self.op),
            d => Err(unsupported_dtype("Gemm", d)),
        }
    }
}

fn build_gemm(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let g = spec.op_as::<Gemm>()?.clone();
    let dtype = spec.input_dtype(0)?;
    if !matches!(
        dtype,
        DType::F32 | DType::F64 | DType::F16 | DType::I32 | DType::I64 | DType::U32 | DType::U64
    ) {
        return Err(unsupported_dtype("Gemm", dtype));
    }
    Ok(Box::new(GemmKernel { op: g, dtype }))
}

/// Registers MatMul and Gemm.
pub fn register_all(r: &mut KernelRegistry) {
    r.register("MatMul", build_matmul);
    r.register("Gemm", build_gemm);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_bands_give_the_product_of_one_call() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for (m, n, k) in [(100, 196, 64), (33, 50, 7), (256, 49, 512), (64, 1025, 16)] {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
            let b: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 11) as f32 * 0.25).collect();
            let mut want = vec![f32::NAN; m * n];
            let mut got = vec![f32::NAN; m * n + 3];
            let (ma, mb) = (Mat::row_major(0, k, false), Mat::row_major(0, n, false));
            // SAFETY: both products address m × k, k × n and m × n row-major
            // blocks of slices that large (`got` from offset 3).
            unsafe {
                crate::par::serial(|| {
                    gemm_into((m, n, k), &mut want, 0, &a, ma, &b, mb, false, 1.0)
                });
                pool.install(|| gemm_row_bands((m, n, k), &mut got, 3, &a, ma, &b, mb, None));
            }
            assert!(got[..3].iter().all(|v| v.is_nan()), "{m}x{n}x{k}: wrote before its offset");
            // Small integers and quarters: every partial sum is exact.
            assert_eq!(&got[3..], &want[..], "{m}x{n}x{k}");
            // With a row function: each row once, told its index, on the
            // banded and on the single-call path.
            let plus_row = |r0: usize, rows: &mut [f32]| {
                for (i, row) in rows.chunks_exact_mut(n).enumerate() {
                    row.iter_mut().for_each(|v| *v += (r0 + i) as f32);
                }
            };
            for p in [&pool, &rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap()] {
                let mut got = vec![f32::NAN; m * n];
                // SAFETY: as above, from offset 0.
                p.install(|| unsafe {
                    gemm_row_bands((m, n, k), &mut got, 0, &a, ma, &b, mb, Some(&plus_row))
                });
                let shifted: Vec<f32> =
                    want.iter().enumerate().map(|(i, v)| v + (i / n) as f32).collect();
                assert_eq!(got, shifted, "{m}x{n}x{k}, {} threads", p.current_num_threads());
            }
        }
    }
}
