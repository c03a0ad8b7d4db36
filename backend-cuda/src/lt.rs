//! cuBLASLt, for the one product plain cuBLAS cannot finish alone: a GEMM
//! whose bias is added in the kernel's epilogue (`CUBLASLT_EPILOGUE_BIAS`),
//! so a projection with a bias writes its output once. The algorithm
//! cuBLASLt's heuristic picks is kept per shape, transposition, type and
//! operand alignment, so a shape pays the heuristic once.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use onyx_core::dtype::DType;
use onyx_core::ep::EpError;

fn lt_err(what: &'static str) -> impl Fn(lt::CublasError) -> EpError {
    move |e| EpError::Device(format!("cuBLASLt, {what}: {e:?}"))
}

/// One row-major product with a bias along its rows: `C = alpha·op(A)·op(B) + bias`,
/// `C` of shape m×n and `bias` of n elements.
pub(crate) struct BiasProduct {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub trans_a: bool,
    pub trans_b: bool,
    pub alpha: f32,
}

/// What the heuristic's choice depends on.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
    dtype: DType,
    tf32: bool,
    /// Alignments of A, B, bias and C in bytes (powers of two, at most 256).
    align: [u32; 4],
}

/// A cuBLASLt handle and the algorithms chosen so far.
pub(crate) struct Lt {
    handle: sys::cublasLtHandle_t,
    algos: Mutex<HashMap<Key, sys::cublasLtMatmulAlgo_t>>,
}

// SAFETY: a cuBLASLt handle may be used from any thread as long as calls on
// it are not concurrent; every call here is made under the provider's
// launch order (one stream, one launching thread at a time).
unsafe impl Send for Lt {}
// SAFETY: as above; the algorithm table has its own lock.
unsafe impl Sync for Lt {}

impl Drop for Lt {
    fn drop(&mut self) {
        // SAFETY: the handle was created by `Lt::new` and is destroyed once.
        let _ = unsafe { lt::destroy_handle(self.handle) };
    }
}

/// Destroys a descriptor when it goes out of scope.
struct Guard<T: Copy>(T, unsafe fn(T) -> Result<(), lt::CublasError>);

impl<T: Copy> Drop for Guard<T> {
    fn drop(&mut self) {
        // SAFETY: the descriptor was created once and is destroyed once, here.
        let _ = unsafe { (self.1)(self.0) };
    }
}

fn layout(
    ty: sys::cudaDataType,
    rows: usize,
    cols: usize,
    ld: usize,
) -> Result<Guard<sys::cublasLtMatrixLayout_t>, EpError> {
    let l = lt::create_matrix_layout(ty, rows as u64, cols as u64, ld.max(1) as i64)
        .map_err(lt_err("creating a matrix layout"))?;
    Ok(Guard(l, lt::destroy_matrix_layout))
}

/// Sets one descriptor attribute to `value`.
///
/// # Safety
/// `attr` must take a value of `V`'s size and meaning.
unsafe fn set<V>(
    desc: sys::cublasLtMatmulDesc_t,
    attr: sys::cublasLtMatmulDescAttributes_t,
    value: &V,
) -> Result<(), EpError> {
    // SAFETY: the caller matches the attribute to the value's type; the
    // value lives across the call, which copies it.
    unsafe {
        lt::set_matmul_desc_attribute(
            desc,
            attr,
            (value as *const V).cast(),
            std::mem::size_of::<V>(),
        )
    }
    .map_err(lt_err("setting a matmul attribute"))
}

/// The largest power of two (at most 256) dividing `ptr`.
fn alignment(ptr: u64) -> u32 {
    if ptr == 0 { 256 } else { 1u32 << ptr.trailing_zeros().min(8) }
}

/// The cuBLASLt element and compute types of a dtype (f64 is not offered).
fn types(dtype: DType, tf32: bool) -> Option<(sys::cudaDataType, sys::cublasComputeType_t)> {
    use sys::cublasComputeType_t::*;
    use sys::cudaDataType::*;
    Some(match dtype {
        DType::F32 if tf32 => (CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32),
        DType::F32 => (CUDA_R_32F, CUBLAS_COMPUTE_32F),
        DType::F16 => (CUDA_R_16F, CUBLAS_COMPUTE_32F),
        DType::BF16 => (CUDA_R_16BF, CUBLAS_COMPUTE_32F),
        _ => return None,
    })
}

impl Lt {
    /// A new handle.
    ///
    /// # Errors
    /// [`EpError::Device`] when cuBLASLt cannot be loaded or initialized.
    pub fn new() -> Result<Self, EpError> {
        let handle = lt::create_handle().map_err(lt_err("creating a handle"))?;
        Ok(Lt { handle, algos: Mutex::new(HashMap::new()) })
    }

    /// Queues `c = alpha·op(a)·op(b) + bias` on `stream`, with `workspace`
    /// (`workspace_len` bytes) as scratch. Returns `Ok(false)`, queuing
    /// nothing, when cuBLASLt has no algorithm for it (the caller then
    /// computes it another way).
    ///
    /// # Safety
    /// `a`, `b`, `bias` and `c` must be live device buffers of the product's
    /// shapes in `dtype`, `workspace` a live buffer of `workspace_len` bytes
    /// used only on `stream`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn gemm_bias(
        &self,
        dtype: DType,
        tf32: bool,
        p: &BiasProduct,
        [a, b, bias, c]: [u64; 4],
        workspace: u64,
        workspace_len: usize,
        stream: sys::cudaStream_t,
    ) -> Result<bool, EpError> {
        let Some((ty, compute)) = types(dtype, tf32) else { return Ok(false) };
        if alignment(bias) < 16 {
            // The epilogue reads the bias in vectors.
            return Ok(false);
        }
        use cudarc::cublas::sys::cublasOperation_t::*;
        use sys::cublasLtMatmulDescAttributes_t::*;
        // Column-major, as in `linalg::gemm`: Cᵀ (n×m) = op(B)ᵀ (n×k) · op(A)ᵀ (k×m),
        // and the bias runs along Cᵀ's rows, which are C's columns.
        let (op_b, lb) = if p.trans_b {
            (CUBLAS_OP_T, layout(ty, p.k, p.n, p.k)?)
        } else {
            (CUBLAS_OP_N, layout(ty, p.n, p.k, p.n)?)
        };
        let (op_a, la) = if p.trans_a {
            (CUBLAS_OP_T, layout(ty, p.m, p.k, p.m)?)
        } else {
            (CUBLAS_OP_N, layout(ty, p.k, p.m, p.k)?)
        };
        let lc = layout(ty, p.n, p.m, p.n)?;
        let desc = lt::create_matmul_desc(compute, sys::cudaDataType::CUDA_R_32F)
            .map_err(lt_err("creating a matmul descriptor"))?;
        let desc = Guard(desc, lt::destroy_matmul_desc);
        let epilogue = sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS;
        // SAFETY: TRANSA/TRANSB take a cublasOperation_t, EPILOGUE a
        // cublasLtEpilogue_t and BIAS_POINTER a device pointer.
        unsafe {
            set(desc.0, CUBLASLT_MATMUL_DESC_TRANSA, &op_b)?;
            set(desc.0, CUBLASLT_MATMUL_DESC_TRANSB, &op_a)?;
            set(desc.0, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue)?;
            set(desc.0, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias)?;
        }
        let key = Key {
            m: p.m,
            n: p.n,
            k: p.k,
            trans_a: p.trans_a,
            trans_b: p.trans_b,
            dtype,
            tf32,
            align: [alignment(a), alignment(b), alignment(bias), alignment(c)],
        };
        let known = self.algos.lock().unwrap_or_else(|e| e.into_inner()).get(&key).copied();
        let algo = match known {
            Some(algo) => algo,
            None => {
                // SAFETY: every descriptor is live; the preference describes
                // the real workspace and operand alignments.
                let Some(algo) =
                    (unsafe { self.heuristic(&key, &desc, [&lb, &la, &lc], workspace_len)? })
                else {
                    return Ok(false);
                };
                self.algos.lock().unwrap_or_else(|e| e.into_inner()).insert(key, algo);
                algo
            }
        };
        let (alpha, beta) = (p.alpha, 0f32);
        // SAFETY: the caller guarantees the buffers; the descriptors live
        // across the call; alpha and beta are f32, the scale type.
        unsafe {
            lt::matmul(
                self.handle,
                desc.0,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                b as *const c_void,
                lb.0,
                a as *const c_void,
                la.0,
                c as *const c_void,
                lc.0,
                c as *mut c_void,
                lc.0,
                &algo,
                workspace as *mut c_void,
                workspace_len,
                stream,
            )
        }
        .map_err(lt_err("queuing a GEMM with a bias"))?;
        Ok(true)
    }

    /// The heuristic's first algorithm for `key`, or `None` when it has none.
    ///
    /// # Safety
    /// The descriptor and layouts must be live and describe `key`.
    unsafe fn heuristic(
        &self,
        key: &Key,
        desc: &Guard<sys::cublasLtMatmulDesc_t>,
        [lb, la, lc]: [&Guard<sys::cublasLtMatrixLayout_t>; 3],
        workspace_len: usize,
    ) -> Result<Option<sys::cublasLtMatmulAlgo_t>, EpError> {
        use sys::cublasLtMatmulPreferenceAttributes_t::*;
        let pref = lt::create_matmul_pref().map_err(lt_err("creating a preference"))?;
        let pref = Guard(pref, lt::destroy_matmul_pref);
        let ws = workspace_len as u64;
        // SAFETY: the workspace size is a uint64 attribute.
        unsafe {
            lt::set_matmul_pref_attribute(
                pref.0,
                CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&ws as *const u64).cast(),
                8,
            )
        }
        .map_err(lt_err("setting the workspace size"))?;
        let [al_a, al_b, _, al_c] = key.align;
        // cuBLASLt's A is Onyx's B and the other way round.
        let aligns = [
            (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al_b),
            (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al_a),
            (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al_c),
            (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al_c),
        ];
        for (attr, value) in aligns {
            // SAFETY: the alignments are uint32 attributes.
            unsafe {
                lt::set_matmul_pref_attribute(pref.0, attr, (&value as *const u32).cast(), 4)
            }
            .map_err(lt_err("setting an alignment"))?;
        }
        // SAFETY: the caller guarantees the descriptors.
        match unsafe {
            lt::get_matmul_algo_heuristic(self.handle, desc.0, lb.0, la.0, lc.0, lc.0, pref.0)
        } {
            Ok(found) => Ok(Some(found.algo)),
            Err(lt::CublasError(sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED)) => Ok(None),
            Err(e) => Err(lt_err("choosing an algorithm")(e)),
        }
    }
}
