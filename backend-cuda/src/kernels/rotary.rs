//! com.microsoft `RotaryEmbedding` on the device: `rotary_T` in decoder.cu,
//! one thread per rotated pair or copied feature (so it runs in place), with
//! `position_ids` read on the device. A position outside the caches fails the
//! run through the fault word.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::MICROSOFT_DOMAIN;
use onyx_core::ops::microsoft::rotary::ContribRotary;
use onyx_kernels::Kernel;

use super::elementwise::entry;
use super::nn::kernel_err;
use super::{CudaKernel, Io, Registry, i32_of, unsupported};
use crate::gpu::{Args, Gpu};

/// `RopeArgs` in decoder.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
struct RopeArgs {
    vectors: i64,
    batch: i32,
    seq: i32,
    heads: i32,
    head: i32,
    half: i32,
    rank3: i32,
    interleaved: i32,
    per_token: i32,
    cache_rows: i32,
}

// SAFETY: plain `#[repr(C)]` data matching `struct RopeArgs` in decoder.cu.
unsafe impl cudarc::driver::DeviceRepr for RopeArgs {}

struct RopeKernel {
    op: ContribRotary,
    name: &'static str,
}

impl CudaKernel for RopeKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (x, cos, sin) = (io.input(0)?, io.input(2)?, io.input(3)?);
        if sin.shape != cos.shape {
            return Err(kernel_err("RotaryEmbedding: cos and sin caches differ in shape"));
        }
        let g = self.op.geometry(&x.shape, &cos.shape).map_err(kernel_err)?;
        let ids = io.input(1)?.numel();
        let tokens = g.batch * g.seq;
        let per_token = match ids {
            n if n == tokens => true,
            1 => false,
            n => {
                return Err(kernel_err(format!(
                    "RotaryEmbedding: {n} position ids for batch {} and sequence {}",
                    g.batch, g.seq
                )));
            }
        };
        if io.output(0)?.shape != x.shape {
            return Err(kernel_err(format!(
                "RotaryEmbedding: output {:?} for input {:?}",
                io.output(0)?.shape,
                x.shape
            )));
        }
        let vectors = tokens * g.heads;
        let half = g.rotary_dim / 2;
        let units = vectors * (half + g.head_size - g.rotary_dim);
        if units == 0 {
            return Ok(());
        }
        let args = RopeArgs {
            vectors: vectors as i64,
            batch: i32_of(g.batch)?,
            seq: i32_of(g.seq)?,
            heads: i32_of(g.heads)?,
            head: i32_of(g.head_size)?,
            half: half as i32,
            rank3: g.rank3.into(),
            interleaved: self.op.interleaved.into(),
            per_token: per_token.into(),
            cache_rows: i32_of(g.max_positions)?,
        };
        let f = gpu.function(Kernel::Decoder, self.name)?;
        let launch = Args::new()
            .push(args)
            .push(io.in_ptr(0)?)
            .push(io.in_ptr(1)?)
            .push(io.in_ptr(2)?)
            .push(io.in_ptr(3)?)
            .push(io.out_ptr(0)?);
        // SAFETY: matches `rotary_T(RopeArgs, const T* x, const i64* pos_ids,
        // const T* cos, const T* sin, T* y)`. x and y hold `vectors` head
        // vectors of `head` elements (the geometry of x's shape, y's shape
        // equal), the caches cache_rows × half values (the geometry checks the
        // width), pos_ids batch × seq ids when per_token, else at least one;
        // positions outside the caches read nothing. Each thread reads and
        // writes only its own pair or feature, so y may be x's buffer.
        unsafe { launch.launch(gpu, &f, gpu.grid(units as u64)) }
    }

    fn in_place(&self) -> bool {
        true
    }
}

fn build(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let op = spec.op_as::<ContribRotary>()?.clone();
    let dtype = spec.input_dtype(0)?;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(unsupported("RotaryEmbedding", dtype));
    }
    Ok(Box::new(RopeKernel { op, name: entry("rotary", dtype)? }))
}

/// Registers `RotaryEmbedding` in `com.microsoft`.
pub(crate) fn register_all(r: &mut Registry) {
    r.register_in(MICROSOFT_DOMAIN, "RotaryEmbedding", build);
}
