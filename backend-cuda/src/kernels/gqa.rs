//! com.microsoft `GroupQueryAttention` on the device: `gqa_kv_T` writes the
//! present key/value buffers (past rows, then the new rows with rotated
//! keys; only those where past and present share a buffer), then
//! `gqa_attend_T` runs one block per query row against them, keys in chunks
//! with a running maximum and sum (decoder.cu). `seqlens_k` and `position_ids` are read on
//! the device, so a decode step copies nothing to or from the host; a length
//! or position outside the buffers fails the run through the fault word.
//! The present outputs must be requested: they are where the keys live.

use cudarc::driver::LaunchConfig;
use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::MICROSOFT_DOMAIN;
use onyx_core::ops::microsoft::gqa::{GqaGeometry, GroupQueryAttention};
use onyx_kernels::Kernel;

use super::elementwise::entry;
use super::nn::kernel_err;
use super::{CudaKernel, Io, Registry, i32_of, unsupported};
use crate::gpu::{Args, Gpu};

/// The widest head `gqa_attend_*` takes (`GQA_MAX_HEAD` in decoder.cu).
const MAX_HEAD: usize = 256;
/// Threads of a `gqa_attend_*` block, one block per query row (`GQA_THREADS`).
const THREADS: u32 = 256;

/// `GqaArgs` in decoder.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
struct GqaArgs {
    batch: i32,
    q_len: i32,
    heads: i32,
    kv_heads: i32,
    head: i32,
    q_row: i32,
    kv_row: i32,
    k_off: i32,
    v_off: i32,
    past_cap: i32,
    present_len: i32,
    total: i32,
    first_prompt: i32,
    rot_half: i32,
    interleaved: i32,
    cache_rows: i32,
    has_pos: i32,
    shared: i32,
    causal: i32,
    window: i32,
    bias_b: i32,
    bias_n: i32,
    sink_kind: i32,
    vec: i32,
    scale: f32,
    softcap: f32,
}

// SAFETY: plain `#[repr(C)]` data matching `struct GqaArgs` in decoder.cu.
unsafe impl cudarc::driver::DeviceRepr for GqaArgs {}

struct GqaKernel {
    op: GroupQueryAttention,
    kv_entry: &'static str,
    attend_entry: &'static str,
    /// Bytes of one element of the query, keys and values.
    elem_bytes: usize,
}

impl GqaKernel {
    /// The geometry of this call and its arguments, every buffer's shape checked.
    fn args(&self, io: &Io<'_>) -> Result<(GqaGeometry, GqaArgs), EpError> {
        let shape = |i: usize| io.has_input(i).then(|| io.input(i).map(|t| t.shape.clone()));
        let total = io.ints(6)?.first().copied().unwrap_or(-1);
        let total = usize::try_from(total)
            .map_err(|_| kernel_err(format!("GroupQueryAttention: total length {total}")))?;
        let (ks, vs) = (shape(1).transpose()?, shape(2).transpose()?);
        let past = shape(3).transpose()?;
        let g = self
            .op
            .geometry(&io.input(0)?.shape, ks.as_deref().zip(vs.as_deref()), past.as_deref(), total)
            .map_err(kernel_err)?;
        if g.head_size > MAX_HEAD {
            return Err(EpError::Unsupported(format!(
                "GroupQueryAttention with heads of {} on CUDA (at most {MAX_HEAD})",
                g.head_size
            )));
        }
        if io.has_input(3) != io.has_input(4) || shape(4).transpose()? != past {
            return Err(kernel_err("GroupQueryAttention: past_key and past_value differ"));
        }
        let (b, s, n, kvn, h) = (g.batch, g.q_len, g.heads, g.kv_heads, g.head_size);
        let present = [b, kvn, g.present_len, h];
        for o in [1, 2] {
            if io.output(o)?.shape != present {
                return Err(kernel_err(format!(
                    "GroupQueryAttention: present {:?}, expected {present:?}",
                    io.output(o)?.shape
                )));
            }
        }
        if io.input(5)?.numel() != b {
            return Err(kernel_err(format!(
                "GroupQueryAttention: {} seqlens_k for batch {b}",
                io.input(5)?.numel()
            )));
        }
        let first_prompt = s > 1 && s == total;
        let has_pos = io.has_input(9) && !first_prompt;
        if has_pos && io.input(9)?.shape != [b, s] {
            return Err(kernel_err(format!(
                "GroupQueryAttention: position_ids {:?} for batch {b} and {s} new tokens",
                io.input(9)?.shape
            )));
        }
        let (rot_half, cache_rows) = if self.op.do_rotary {
            let cs = &io.input(7)?.shape;
            match cs[..] {
                [rows, half] if 2 * half <= h && io.input(8)?.shape == *cs => (half, rows),
                _ => {
                    return Err(kernel_err(format!(
                        "GroupQueryAttention: caches {cs:?} and {:?} for heads of {h}",
                        io.input(8)?.shape
                    )));
                }
            }
        } else {
            (0, 0)
        };
        let (bias_b, bias_n) = match shape(10).transpose()? {
            None => (0, 0),
            Some(bs) => match bs[..] {
                [bb, nb, bs_, bt]
                    if (bb == 1 || bb == b) && (nb == 1 || nb == n) && bs_ == s && bt == total =>
                {
                    (bb, nb)
                }
                _ => {
                    return Err(kernel_err(format!(
                        "GroupQueryAttention: attention_bias {bs:?} for [{b}, {n}, {s}, {total}]"
                    )));
                }
            },
        };
        let sink_kind = if io.has_input(11) {
            if io.input(11)?.numel() != n {
                return Err(kernel_err(format!(
                    "GroupQueryAttention: {} head_sink values for {n} heads",
                    io.input(11)?.numel()
                )));
            }
            1
        } else {
            i32::from(self.op.smooth_softmax) * 2
        };
        let (q_row, kv_row, k_off, v_off) = if g.packed {
            let row = (n + 2 * kvn) * h;
            (row, row, n * h, (n + kvn) * h)
        } else {
            (n * h, kvn * h, 0, 0)
        };
        let shared = io.has_input(3) && io.in_ptr(3)? == io.out_ptr(1)?;
        if shared != (io.has_input(4) && io.in_ptr(4)? == io.out_ptr(2)?) {
            return Err(kernel_err("GroupQueryAttention: only one of past key/value is shared"));
        }
        let args = GqaArgs {
            batch: i32_of(b)?,
            q_len: i32_of(s)?,
            heads: n as i32,
            kv_heads: kvn as i32,
            head: h as i32,
            q_row: i32_of(q_row)?,
            kv_row: i32_of(kv_row)?,
            k_off: k_off as i32,
            v_off: v_off as i32,
            past_cap: i32_of(g.past_capacity)?,
            present_len: i32_of(g.present_len)?,
            total: i32_of(total)?,
            first_prompt: first_prompt.into(),
            rot_half: rot_half as i32,
            interleaved: self.op.rotary_interleaved.into(),
            cache_rows: i32_of(cache_rows)?,
            has_pos: has_pos.into(),
            shared: shared.into(),
            causal: self.op.causal.into(),
            window: i32::try_from(self.op.local_window_size).unwrap_or(i32::MAX),
            bias_b: bias_b as i32,
            bias_n: bias_n as i32,
            sink_kind,
            vec: 0,
            scale: self.op.scale.unwrap_or_else(|| (1.0 / (h as f64).sqrt()) as f32),
            softcap: self.op.softcap,
        };
        Ok((g, args))
    }
}

impl CudaKernel for GqaKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (g, mut a) = self.args(io)?;
        let q = io.in_ptr(0)?;
        let (k, v) = if g.packed { (q, q) } else { (io.in_ptr(1)?, io.in_ptr(2)?) };
        let (pk, pv) = (io.out_ptr(1)?, io.out_ptr(2)?);
        // 16-byte loads where every key and value row starts on a 16-byte boundary.
        let row_bytes = g.head_size * self.elem_bytes;
        a.vec = (row_bytes % 16 == 0 && pk % 16 == 0 && pv % 16 == 0).into();
        let rows = if a.shared != 0 { g.q_len } else { g.present_len };
        let kv_len = (g.batch * g.kv_heads * rows * g.head_size) as u64;
        if kv_len > 0 {
            let f = gpu.function(Kernel::Decoder, self.kv_entry)?;
            let launch = Args::new()
                .push(a)
                .push(k)
                .push(v)
                .push(io.opt_in_ptr(3))
                .push(io.opt_in_ptr(4))
                .push(io.in_ptr(5)?)
                .push(io.opt_in_ptr(9))
                .push(io.opt_in_ptr(7))
                .push(io.opt_in_ptr(8))
                .push(pk)
                .push(pv);
            // SAFETY: matches `gqa_kv_T(GqaArgs, const T* key, const T* value,
            // const T* past_k, const T* past_v, const int* seqlens, const i64*
            // pos_ids, const T* cos, const T* sin, T* pk, T* pv)`. The shapes of
            // every buffer were checked against the arguments in `args`: key and
            // value rows of kv_row elements (the query's when packed), past
            // [B, KV, past_cap, H], present [B, KV, present_len, H], B seqlens,
            // [B, S] positions when has_pos, caches of cache_rows × rot_half when
            // rot_half > 0. Rows the lengths would put outside them are skipped
            // on the device (and fault).
            unsafe { launch.launch(gpu, &f, gpu.grid(kv_len)) }?;
        }
        let rows = g.batch * g.heads * g.q_len;
        if rows == 0 {
            return Ok(());
        }
        let blocks = u32::try_from(rows)
            .ok()
            .filter(|&b| b <= i32::MAX as u32)
            .ok_or_else(|| kernel_err("GroupQueryAttention: too many query rows for one launch"))?;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let f = gpu.function(Kernel::Decoder, self.attend_entry)?;
        let launch = Args::new()
            .push(a)
            .push(q)
            .push(pk)
            .push(pv)
            .push(io.in_ptr(5)?)
            .push(io.opt_in_ptr(9))
            .push(io.opt_in_ptr(7))
            .push(io.opt_in_ptr(8))
            .push(io.opt_in_ptr(10))
            .push(io.opt_in_ptr(11))
            .push(io.out_ptr(0)?);
        // SAFETY: matches `gqa_attend_T(GqaArgs, const T* query, const T* pk,
        // const T* pv, const int* seqlens, const i64* pos_ids, const T* cos,
        // const T* sin, const T* bias, const T* sinks, T* y)`: the query has
        // B × S rows of q_row elements, y is [B, S, N·H] (the op's inferred
        // output), the present buffers were written above, the bias is
        // [bias_b, bias_n, S, total] when bias_b > 0 and the sinks N values when
        // sink_kind is 1 (all checked in `args`); keys beyond present_len are
        // never read.
        unsafe { launch.launch(gpu, &f, cfg) }
    }
}

fn build(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let op = spec.op_as::<GroupQueryAttention>()?.clone();
    let dtype = spec.input_dtype(0)?;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(unsupported("GroupQueryAttention", dtype));
    }
    let has_out = |o: usize| spec.output_dtypes.get(o).copied().flatten().is_some();
    if !has_out(1) || !has_out(2) {
        return Err(EpError::Unsupported(
            "GroupQueryAttention without its present outputs on CUDA".into(),
        ));
    }
    Ok(Box::new(GqaKernel {
        op,
        kv_entry: entry("gqa_kv", dtype)?,
        attend_entry: entry("gqa_attend", dtype)?,
        elem_bytes: dtype.bits() / 8,
    }))
}

/// Registers `GroupQueryAttention` in `com.microsoft`.
pub(crate) fn register_all(r: &mut Registry) {
    r.register_in(MICROSOFT_DOMAIN, "GroupQueryAttention", build);
}
