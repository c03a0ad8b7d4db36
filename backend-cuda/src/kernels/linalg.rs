//! MatMul and Gemm through cuBLAS (`cublasGemmStridedBatchedEx`), in f32
//! (TF32 only when the session allows it), f16 and bf16 with f32 accumulation,
//! and f64. A Gemm whose C is a bias along its rows (what fusion makes of
//! `MatMul + bias`) adds it in cuBLASLt's epilogue instead ([`crate::lt`]).
//!
//! Row-major products map onto column-major cuBLAS by computing the transpose:
//! `C = A·B` (row-major) is `Cᵀ = Bᵀ·Aᵀ`, and a row-major matrix read as
//! column-major is its transpose, so the operands are passed swapped and untransposed.

use cudarc::cublas::result as blas;
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::linalg::Gemm;
use onyx_kernels::Kernel;

use super::{CudaKernel, Io, Registry, Strided, broadcast_strides, unsupported, width};
use crate::gpu::{Args, Gpu};
use crate::lt::BiasProduct;

/// The cuBLAS data and compute types of a dtype.
fn types(dtype: DType, tf32: bool) -> Option<(cudaDataType, cublasComputeType_t)> {
    use cublasComputeType_t::*;
    Some(match dtype {
        DType::F32 if tf32 => (cudaDataType::CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32),
        DType::F32 => (cudaDataType::CUDA_R_32F, CUBLAS_COMPUTE_32F),
        DType::F16 => (cudaDataType::CUDA_R_16F, CUBLAS_COMPUTE_32F),
        DType::BF16 => (cudaDataType::CUDA_R_16BF, CUBLAS_COMPUTE_32F),
        DType::F64 => (cudaDataType::CUDA_R_64F, CUBLAS_COMPUTE_64F),
        _ => return None,
    })
}

/// One strided-batched product in row-major terms: `C[b] = op(A[b])·op(B[b])`
/// with `C[b]` of shape m×n, scaled by `alpha`, plus `beta·C[b]`.
struct Product {
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
    batch: usize,
    /// Element strides between batches (0 broadcasts one matrix).
    stride_a: usize,
    stride_b: usize,
    stride_c: usize,
    alpha: f32,
    beta: f32,
}

fn int(x: usize, what: &str) -> Result<i32, EpError> {
    i32::try_from(x)
        .map_err(|_| EpError::Unsupported(format!("{what} {x} exceeds cuBLAS's 32-bit sizes")))
}

/// Queues one strided-batched GEMM.
fn gemm(gpu: &Gpu, dtype: DType, p: &Product, a: u64, b: u64, c: u64) -> Result<(), EpError> {
    if p.m == 0 || p.n == 0 || p.batch == 0 {
        return Ok(());
    }
    let (ty, compute) = types(dtype, gpu.allow_tf32).ok_or_else(|| unsupported("MatMul", dtype))?;
    // Column-major: Cᵀ (n×m) = op(B)ᵀ (n×k) · op(A)ᵀ (k×m).
    let (op_b, ldb) = if p.trans_b {
        (cublasOperation_t::CUBLAS_OP_T, p.k)
    } else {
        (cublasOperation_t::CUBLAS_OP_N, p.n)
    };
    let (op_a, lda) = if p.trans_a {
        (cublasOperation_t::CUBLAS_OP_T, p.m)
    } else {
        (cublasOperation_t::CUBLAS_OP_N, p.k)
    };
    let (alpha64, beta64) = (p.alpha as f64, p.beta as f64);
    let (alpha, beta): (*const std::ffi::c_void, *const std::ffi::c_void) = if dtype == DType::F64 {
        ((&alpha64 as *const f64).cast(), (&beta64 as *const f64).cast())
    } else {
        ((&p.alpha as *const f32).cast(), (&p.beta as *const f32).cast())
    };
    // SAFETY: the handle is bound to the provider's stream; the pointers hold
    // `batch` matrices of the given shapes and strides (checked by the caller
    // against the tensors' shapes); alpha and beta live across the call and
    // match the compute type (f64 for CUBLAS_COMPUTE_64F, f32 otherwise).
    unsafe {
        blas::gemm_strided_batched_ex(
            *gpu.blas.handle(),
            op_b,
            op_a,
            int(p.n, "N")?,
            int(p.m, "M")?,
            int(p.k, "K")?,
            alpha,
            b as *const std::ffi::c_void,
            ty,
            int(ldb.max(1), "ldb")?,
            p.stride_b as i64,
            a as *const std::ffi::c_void,
            ty,
            int(lda.max(1), "lda")?,
            p.stride_a as i64,
            beta,
            c as *mut std::ffi::c_void,
            ty,
            int(p.n.max(1), "ldc")?,
            p.stride_c as i64,
            int(p.batch, "batch")?,
            compute,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| {
        EpError::Device(format!("cuBLAS GEMM ({}x{}x{}, batch {}): {e:?}", p.m, p.n, p.k, p.batch))
    })
}

/// Fills `y` (shape `out`) with `x` (shape `shape`) broadcast, for Gemm's C.
fn broadcast(
    gpu: &Gpu,
    dtype: DType,
    shape: &[usize],
    out: &[usize],
    x: u64,
    y: u64,
) -> Result<(), EpError> {
    let name = match width(dtype) {
        Some(2) => "broadcast_w2",
        Some(4) => "broadcast_w4",
        Some(8) => "broadcast_w8",
        _ => return Err(unsupported("Gemm", dtype)),
    };
    let s = Strided::broadcast(out, &[shape])?;
    let f = gpu.function(Kernel::Elementwise, name)?;
    let args = Args::new().push(s).push(x).push(y);
    // SAFETY: matches `broadcast_wN(Strided, const W*, W*)`; strides stay inside `x`.
    unsafe { args.launch(gpu, &f, gpu.grid(s.numel as u64)) }
}

/// MatMul with numpy broadcasting of the batch dims.
struct MatMulKernel {
    dtype: DType,
}

impl CudaKernel for MatMulKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (sa, sb) = (&io.input(0)?.shape, &io.input(1)?.shape);
        let (a, b, c) = (io.in_ptr(0)?, io.in_ptr(1)?, io.out_ptr(0)?);
        let mut da = sa.clone();
        let mut db = sb.clone();
        if da.len() == 1 {
            da.insert(0, 1);
        }
        if db.len() == 1 {
            db.push(1);
        }
        let (m, k) = (da[da.len() - 2], da[da.len() - 1]);
        let n = db[db.len() - 1];
        if db[db.len() - 2] != k {
            return Err(EpError::Kernel(format!("MatMul inner dims differ: {sa:?} x {sb:?}")));
        }
        let (ba, bb) = (&da[..da.len() - 2], &db[..db.len() - 2]);
        let rank = ba.len().max(bb.len());
        let pad = |s: &[usize]| -> Vec<usize> {
            std::iter::repeat_n(1, rank - s.len()).chain(s.iter().copied()).collect()
        };
        let (pa, pb) = (pad(ba), pad(bb));
        let batch_dims: Vec<usize> =
            pa.iter().zip(&pb).map(|(x, y)| if *x == 1 { *y } else { *x }).collect();
        let batch: usize = batch_dims.iter().product();
        let base = Product {
            m,
            n,
            k,
            trans_a: false,
            trans_b: false,
            batch,
            stride_a: m * k,
            stride_b: k * n,
            stride_c: m * n,
            alpha: 1.0,
            beta: 0.0,
        };
        let a_all = pa.iter().product::<usize>() == batch;
        let b_all = pb.iter().product::<usize>() == batch;
        let b_one = pb.iter().product::<usize>() == 1;
        let a_one = pa.iter().product::<usize>() == 1;
        if a_all && b_one {
            // Weights shared by every batch: one tall product (batch·m)×k · k×n.
            return gemm(gpu, self.dtype, &Product { m: batch * m, batch: 1, ..base }, a, b, c);
        }
        if (a_all || a_one) && (b_all || b_one) {
            let p = Product {
                stride_a: if a_one { 0 } else { m * k },
                stride_b: if b_one { 0 } else { k * n },
                ..base
            };
            return gemm(gpu, self.dtype, &p, a, b, c);
        }
        // Mixed broadcasting (e.g. [2,1,m,k] x [1,3,k,n]): one product per output batch.
        let elem = self.dtype.byte_size(1).unwrap_or(4) as u64;
        let (st_a, st_b) =
            (broadcast_strides(&pa, &batch_dims), broadcast_strides(&pb, &batch_dims));
        for i in 0..batch {
            let (mut rem, mut oa, mut ob) = (i, 0i64, 0i64);
            for d in (0..rank).rev() {
                let idx = (rem % batch_dims[d]) as i64;
                rem /= batch_dims[d];
                oa += idx * st_a[d];
                ob += idx * st_b[d];
            }
            let p = Product { batch: 1, ..base };
            let (pa_ptr, pb_ptr) =
                (a + oa as u64 * (m * k) as u64 * elem, b + ob as u64 * (k * n) as u64 * elem);
            gemm(gpu, self.dtype, &p, pa_ptr, pb_ptr, c + (i * m * n) as u64 * elem)?;
        }
        Ok(())
    }
}

/// Gemm: `alpha·op(A)·op(B) + beta·C` with C broadcast into the output first.
struct GemmKernel {
    op: Gemm,
    dtype: DType,
}

impl CudaKernel for GemmKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (sa, sb) = (&io.input(0)?.shape, &io.input(1)?.shape);
        let out = &io.output(0)?.shape;
        let (m, k) = if self.op.trans_a { (sa[1], sa[0]) } else { (sa[0], sa[1]) };
        let n = out[1];
        let y = io.out_ptr(0)?;
        let use_c = io.has_input(2) && self.op.beta != 0.0;
        let positive = m > 0 && n > 0 && k > 0;
        if use_c && positive && self.op.beta == 1.0 && is_row_bias(&io.input(2)?.shape, n) {
            // C is a bias along the rows: added in cuBLASLt's epilogue.
            let p = BiasProduct {
                m,
                n,
                k,
                trans_a: self.op.trans_a,
                trans_b: self.op.trans_b,
                alpha: self.op.alpha,
            };
            let ptrs = [io.in_ptr(0)?, io.in_ptr(1)?, io.in_ptr(2)?, y];
            // SAFETY: A, B and Y have the 2-D shapes Gemm's inference checked
            // (A m×k, B k×n, each as transposed, Y m×n) in this dtype, C has n
            // elements (`is_row_bias`), and the workspace is the provider's,
            // used only on its stream.
            let queued = unsafe {
                gpu.lt.gemm_bias(
                    self.dtype,
                    gpu.allow_tf32,
                    &p,
                    ptrs,
                    gpu.blas_workspace,
                    crate::gpu::BLAS_WORKSPACE,
                    gpu.stream.cu_stream().cast(),
                )?
            };
            if queued {
                return Ok(());
            }
        }
        if use_c {
            broadcast(gpu, self.dtype, &io.input(2)?.shape, out, io.in_ptr(2)?, y)?;
        }
        let p = Product {
            m,
            n,
            k,
            trans_a: self.op.trans_a,
            trans_b: self.op.trans_b,
            batch: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
            alpha: self.op.alpha,
            beta: if use_c { self.op.beta } else { 0.0 },
        };
        debug_assert_eq!(sb.len(), 2);
        gemm(gpu, self.dtype, &p, io.in_ptr(0)?, io.in_ptr(1)?, y)
    }
}

/// Whether Gemm's C of shape `c` is one value per output column: `[n]` or `[1, n]`.
fn is_row_bias(c: &[usize], n: usize) -> bool {
    matches!(c, [w] | [1, w] if *w == n)
}

fn float_dtype(s: &KernelSpec<'_>) -> Result<DType, EpError> {
    let d = s.input_dtype(0)?;
    if types(d, false).is_none() {
        return Err(unsupported(&s.node.op_type, d));
    }
    Ok(d)
}

/// Registers MatMul and Gemm.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("MatMul", |s| Ok(Box::new(MatMulKernel { dtype: float_dtype(s)? })));
    r.register("Gemm", |s| {
        Ok(Box::new(GemmKernel { op: s.op_as::<Gemm>()?.clone(), dtype: float_dtype(s)? }))
    });
}
