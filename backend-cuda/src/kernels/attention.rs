//! ai.onnx `Attention` (opset 23 on) without a key/value cache: one launch of
//! attention.cu, tensor-core tiles for f16/bf16 heads of 32, 64 or 128, a
//! warp per query row otherwise. Without a causal cut the tiles are
//! FlashAttention-2's split (32 query rows a warp): `attention_fa*` when the
//! mask, if any, is the same for every query row (a padding mask),
//! `attention_fam*` for an additive mask of the inputs' dtype with a row per
//! query (transformers' eager mask, `[batch, 1, q, keys]`), whose rows are
//! staged in dynamic shared memory. Other masks and causal attention take
//! `attention_mma*` (16 rows a warp, any mask). The scores never reach
//! memory, so the op needs no workspace and the session's peak holds only Q,
//! K, V and Y.
//!
//! The cache inputs, `nonpad_kv_seqlen`, softcap, sliding windows and the
//! `present_*`/`qk_matmul_output` outputs are declined when the kernel is
//! prepared, so those nodes go to the CPU (or fail under strict placement).

use std::sync::Mutex;

use cudarc::driver::LaunchConfig;
use cudarc::driver::sys::CUfunction_attribute;
use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::attention::{Attention, AttentionGeometry};
use onyx_kernels::Kernel;

use super::elementwise::entry;
use super::nn::kernel_err;
use super::{CudaKernel, Io, Registry, unsupported};
use crate::gpu::{Args, Gpu};

/// Head sizes with a tensor-core entry point (`attention_mma{D}_*`).
const MMA_HEADS: [usize; 3] = [32, 64, 128];
/// Query rows of one `attention_mma*` block (four warps of 16).
const MMA_ROWS: usize = 64;

/// Keys per tile of the `attention_fa*` kernels, and a staged mask row's
/// length in values (padded by 8 so the eight rows one load reads fall in
/// distinct banks).
const FA_KEYS: usize = 64;
const FA_MASK_ROW: usize = FA_KEYS + 8;
/// The most dynamic shared memory an `attention_fam*` launch stages: two
/// stages of 128 query rows' mask rows, 16-bit values.
const FA_MAX_MASK_BYTES: usize = 2 * 128 * FA_MASK_ROW * 2;

/// The launch of an `attention_fa*` entry point: query rows per warp (two
/// m16 tiles, one for heads of 128, whose accumulators need the registers)
/// and warps per block: four (the `…w4` builds, three blocks a
/// multiprocessor), unless that leaves the GPU with fewer than two blocks
/// per multiprocessor, then two.
fn fa_launch(head: usize, q_len: usize, heads: usize, batch: usize, sms: usize) -> (usize, usize) {
    let rows_per_warp = if head == 128 { 16 } else { 32 };
    let blocks = |warps: usize| q_len.div_ceil(rows_per_warp * warps) * heads * batch;
    let warps = if blocks(4) >= 2 * sms { 4 } else { 2 };
    (rows_per_warp * warps, warps)
}

/// The widest value head of the warp-per-row kernel (8 slots × 32 lanes).
const ROW_V_HEAD: usize = 256;

/// `AttnArgs` in attention.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
struct AttnArgs {
    q_stride: [i64; 3],
    k_stride: [i64; 3],
    v_stride: [i64; 3],
    y_stride: [i64; 3],
    m_stride: [i64; 3],
    batch: i32,
    q_heads: i32,
    group: i32,
    q_len: i32,
    kv_len: i32,
    mask_len: i32,
    head: i32,
    v_head: i32,
    mask_kind: i32,
    causal: i32,
    causal_offset: i32,
    scale: f32,
}

// SAFETY: plain `#[repr(C)]` data matching `struct AttnArgs` in attention.cu.
unsafe impl cudarc::driver::DeviceRepr for AttnArgs {}

/// Attention of one float dtype.
struct AttentionKernel {
    op: Attention,
    dtype: DType,
    /// 0 without a mask, else the kernel's code for the mask's dtype.
    mask_kind: i32,
    /// `attention_fam*` entry points already allowed the largest dynamic
    /// shared memory any of their launches asks for (once per function, not
    /// per launch).
    opted_in: Mutex<Vec<&'static str>>,
}

/// `(batch, head, row)` strides of a `[batch, seq, heads × size]` (3-D) or
/// `[batch, heads, seq, size]` tensor.
fn strides(rank3: bool, heads: usize, seq: usize, size: usize) -> [i64; 3] {
    let s = if rank3 {
        [seq * heads * size, size, heads * size]
    } else {
        [heads * seq * size, seq * size, size]
    };
    s.map(|v| v as i64)
}

/// The mask's `(batch, head, query row)` strides for a mask of `shape`
/// broadcast to `[batch, heads, q_len, keys]`, and its key count.
fn mask_strides(shape: &[usize], g: &AttentionGeometry) -> Result<([i64; 3], usize), EpError> {
    let Some(&keys) = shape.last().filter(|_| shape.len() <= 4) else {
        return Err(kernel_err(format!("Attention: a mask of shape {shape:?}")));
    };
    if keys > g.total_len() {
        return Err(kernel_err(format!(
            "Attention: a mask of {keys} keys for {} keys",
            g.total_len()
        )));
    }
    let mut dims = vec![1; 4 - shape.len()];
    dims.extend_from_slice(shape);
    let target = [g.batch, g.q_heads, g.q_len];
    let mut out = [0i64; 3];
    for a in 0..3 {
        if dims[a] == target[a] {
            out[a] = dims[a + 1..].iter().product::<usize>() as i64;
        } else if dims[a] != 1 {
            return Err(kernel_err(format!(
                "Attention: mask {shape:?} does not broadcast to {:?}",
                [g.batch, g.q_heads, g.q_len, g.total_len()]
            )));
        }
    }
    Ok((out, keys))
}

impl CudaKernel for AttentionKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (q, k, v) = (io.input(0)?, io.input(1)?, io.input(2)?);
        let g = self.op.geometry(&q.shape, &k.shape, &v.shape, None).map_err(kernel_err)?;
        let y = io.output(0)?;
        if y.shape != g.y_shape() {
            return Err(kernel_err(format!(
                "Attention: output {:?} for {:?}",
                y.shape,
                g.y_shape()
            )));
        }
        if y.numel() == 0 {
            return Ok(());
        }
        let (m_stride, mask_len, mask) = if self.mask_kind != 0 {
            let (s, keys) = mask_strides(&io.input(3)?.shape, &g)?;
            (s, keys, io.in_ptr(3)?)
        } else {
            ([0; 3], g.total_len(), 0)
        };
        let args = AttnArgs {
            q_stride: strides(g.rank3, g.q_heads, g.q_len, g.head_size),
            k_stride: strides(g.rank3, g.kv_heads, g.kv_len, g.head_size),
            v_stride: strides(g.rank3, g.kv_heads, g.kv_len, g.v_head_size),
            y_stride: strides(g.rank3, g.q_heads, g.q_len, g.v_head_size),
            m_stride,
            batch: g.batch as i32,
            q_heads: g.q_heads as i32,
            group: (g.q_heads / g.kv_heads) as i32,
            q_len: g.q_len as i32,
            kv_len: g.kv_len as i32,
            mask_len: mask_len as i32,
            head: g.head_size as i32,
            v_head: g.v_head_size as i32,
            mask_kind: self.mask_kind,
            causal: i32::from(self.op.is_causal),
            causal_offset: 0,
            scale: self.op.scale.unwrap_or(1.0 / (g.head_size as f32).sqrt()),
        };
        let ptrs = [io.in_ptr(0)?, io.in_ptr(1)?, io.in_ptr(2)?, io.out_ptr(0)?];
        let tiled = self.dtype != DType::F32
            && g.head_size == g.v_head_size
            && MMA_HEADS.contains(&g.head_size)
            && [args.q_stride, args.k_stride, args.v_stride, args.y_stride]
                .iter()
                .flatten()
                .all(|s| s % 8 == 0)
            && ptrs.iter().all(|p| p % 16 == 0)
            && g.q_heads <= 65_535
            && g.batch <= 65_535;
        let (name, cfg) = if tiled {
            // No mask, or one broadcast over query rows.
            let key_only = args.m_stride[2] == 0;
            // An additive mask of Q's dtype, rows of whole 16-byte vectors, one value per key.
            let mask_rows = self.mask_kind == if self.dtype == DType::F16 { 2 } else { 3 }
                && args.m_stride.iter().all(|s| s % 8 == 0)
                && mask % 16 == 0
                && mask_len == g.kv_len
                && g.kv_len % 8 == 0;
            let (kind, rows, warps) = if !self.op.is_causal && (key_only || mask_rows) {
                let (rows, warps) =
                    fa_launch(g.head_size, g.q_len, g.q_heads, g.batch, gpu.sms as usize);
                (if key_only { "fa" } else { "fam" }, rows, warps)
            } else {
                ("mma", MMA_ROWS, 4)
            };
            let shared = if kind == "fam" {
                let stages = if g.head_size <= 64 { 2 } else { 1 };
                debug_assert!(stages * rows * FA_MASK_ROW * 2 <= FA_MAX_MASK_BYTES);
                (stages * rows * FA_MASK_ROW * 2) as u32
            } else {
                0
            };
            let blocks = (g.q_len.div_ceil(rows) as u32, g.q_heads as u32, g.batch as u32);
            let cfg = LaunchConfig {
                grid_dim: blocks,
                block_dim: (32 * warps as u32, 1, 1),
                shared_mem_bytes: shared,
            };
            // Four-warp blocks of the flash kernels have their own builds (attention.cu).
            let w4 = if kind != "mma" && warps == 4 { "w4" } else { "" };
            (entry(&format!("attention_{kind}{}{w4}", g.head_size), self.dtype)?, cfg)
        } else {
            if g.v_head_size > ROW_V_HEAD {
                return Err(EpError::Kernel(format!(
                    "Attention: value heads of {} exceed the CUDA kernel's {ROW_V_HEAD}",
                    g.v_head_size
                )));
            }
            let rows = (g.batch * g.q_heads * g.q_len) as u64;
            let blocks = u32::try_from(rows.div_ceil(4))
                .map_err(|_| kernel_err("Attention: too many query rows for one launch"))?;
            let cfg = LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            };
            (entry("attention_rows", self.dtype)?, cfg)
        };
        let f = gpu.function(Kernel::Attention, name)?;
        if cfg.shared_mem_bytes > 0 {
            let mut opted = self.opted_in.lock().unwrap_or_else(|p| p.into_inner());
            if !opted.contains(&name) {
                // With the static tiles this passes the default 48 KiB a block:
                // opt in to the most any launch stages (two stages of 128 rows).
                f.set_attribute(
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    FA_MAX_MASK_BYTES as i32,
                )
                .map_err(|e| {
                    EpError::Device(format!("Attention: opting in to shared memory: {e}"))
                })?;
                opted.push(name);
            }
        }
        let launch = Args::new()
            .push(args)
            .push(ptrs[0])
            .push(ptrs[1])
            .push(ptrs[2])
            .push(mask)
            .push(ptrs[3]);
        // SAFETY: matches `attention_*(AttnArgs, const T* q, const T* k, const T* v,
        // const void* mask, T* y)`. The strides describe Q, K, V and Y of the
        // geometry checked above (Y's shape too); the mask's strides and key count
        // come from its own shape, and it is read only when `mask_kind` is set.
        // The tiled entry points get 16-byte aligned buffers and strides of whole
        // 16-byte vectors; `attention_fam*` also a 16-byte aligned mask of Q's
        // dtype with whole-vector strides, one value per key and a key count
        // that is a multiple of 8, and the dynamic shared memory it stages
        // `rows` mask rows of FA_MASK_ROW values in (per stage).
        unsafe { launch.launch(gpu, &f, cfg) }
    }
}

fn build_attention(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let op = spec.op_as::<Attention>()?.clone();
    let dtype = spec.input_dtype(0)?;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(unsupported("Attention", dtype));
    }
    let has_in = |i: usize| spec.input_dtypes.get(i).copied().flatten().is_some();
    let has_out = |o: usize| spec.output_dtypes.get(o).copied().flatten().is_some();
    let declined = if (4..7).any(has_in) {
        Some("a key/value cache or nonpad_kv_seqlen")
    } else if (1..4).any(has_out) {
        Some("the present or qk_matmul outputs")
    } else if op.softcap != 0.0 {
        Some("softcap")
    } else if op.left_window >= 0 || op.right_window >= 0 {
        Some("a sliding window")
    } else if [1, 2].iter().any(|&i| spec.input_dtype(i).ok() != Some(dtype)) {
        Some("K or V of another dtype than Q")
    } else {
        None
    };
    if let Some(what) = declined {
        return Err(EpError::Unsupported(format!(
            "Attention with {what} is not implemented on CUDA"
        )));
    }
    let mask_kind = match spec.input_dtypes.get(3).copied().flatten() {
        None => 0,
        Some(DType::Bool) => 1,
        Some(DType::F16) => 2,
        Some(DType::BF16) => 3,
        Some(DType::F32) => 4,
        Some(d) => return Err(unsupported("Attention mask", d)),
    };
    Ok(Box::new(AttentionKernel { op, dtype, mask_kind, opted_in: Mutex::default() }))
}

pub(crate) fn register_all(r: &mut Registry) {
    r.register("Attention", build_attention);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(rank3: bool) -> AttentionGeometry {
        AttentionGeometry {
            rank3,
            batch: 2,
            q_heads: 4,
            kv_heads: 2,
            q_len: 3,
            past_len: 0,
            kv_len: 5,
            head_size: 8,
            v_head_size: 8,
        }
    }

    #[test]
    fn three_and_four_dimensional_layouts_have_batch_head_and_row_strides() {
        assert_eq!(strides(true, 4, 3, 8), [96, 8, 32]);
        assert_eq!(strides(false, 4, 3, 8), [96, 24, 8]);
    }

    #[test]
    fn a_padding_mask_broadcasts_over_heads_and_query_rows() {
        let (s, keys) = mask_strides(&[2, 1, 1, 5], &geometry(false)).unwrap();
        assert_eq!((s, keys), ([5, 0, 0], 5));
        let (s, keys) = mask_strides(&[3, 5], &geometry(true)).unwrap();
        assert_eq!((s, keys), ([0, 0, 5], 5));
        let (s, keys) = mask_strides(&[2, 4, 3, 4], &geometry(false)).unwrap();
        assert_eq!((s, keys), ([48, 12, 4], 4));
    }

    #[test]
    fn flash_tiles_take_four_warps_unless_the_grid_would_leave_multiprocessors_idle() {
        // BERT at 8 x 512, heads of 64, on 132 multiprocessors: 384 blocks of 128 rows.
        assert_eq!(fa_launch(64, 512, 12, 8, 132), (128, 4));
        // At 8 x 128 four warps would give 96 blocks: two warps give 192.
        assert_eq!(fa_launch(64, 128, 12, 8, 132), (64, 2));
        // Heads of 128 hold 16 rows a warp.
        assert_eq!(fa_launch(128, 4096, 32, 1, 132), (64, 4));
    }

    #[test]
    fn a_mask_that_does_not_broadcast_is_an_error() {
        assert!(mask_strides(&[3, 1, 5], &geometry(false)).is_err());
        assert!(mask_strides(&[2, 1, 1, 6], &geometry(false)).is_err());
        assert!(mask_strides(&[1, 2, 1, 1, 5], &geometry(false)).is_err());
    }
}
