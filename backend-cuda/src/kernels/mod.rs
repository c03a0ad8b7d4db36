//! CUDA kernels: each prepared kernel turns one launch into launches of
//! NVRTC-compiled entry points (or cuBLAS calls) on the provider's stream.

mod attention;
mod conv;
mod elementwise;
mod generate;
mod gqa;
mod indexing;
mod linalg;
mod movement;
mod nn;
mod norm;
mod pool;
mod quant;
mod reduce;
mod resize;
mod rotary;
mod scan;
mod scatter;
mod select;

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, Launch};

use crate::gpu::Gpu;

/// The most dims the strided kernels take (`MAX_RANK` in common.cuh).
pub(crate) const MAX_RANK: usize = 8;

/// A launch as a kernel sees it: the shared [`Launch`] accessors (through
/// `Deref`), with the device addresses of its tensors resolved.
pub(crate) struct Io<'a> {
    pub launch: Launch<'a>,
    /// Device addresses of the inputs and outputs, by slot (0 where absent).
    pub in_ptrs: &'a [u64],
    pub out_ptrs: &'a [u64],
}

impl<'a> std::ops::Deref for Io<'a> {
    type Target = Launch<'a>;

    fn deref(&self) -> &Launch<'a> {
        &self.launch
    }
}

impl Io<'_> {
    /// The device address of input `i`.
    pub fn in_ptr(&self, i: usize) -> Result<u64, EpError> {
        self.input(i)?;
        Ok(self.in_ptrs[i])
    }

    /// The device address of input `i`, or 0 where that optional input is absent.
    pub fn opt_in_ptr(&self, i: usize) -> u64 {
        self.in_ptrs.get(i).copied().unwrap_or(0)
    }

    /// The device address of output `o`.
    pub fn out_ptr(&self, o: usize) -> Result<u64, EpError> {
        self.output(o)?;
        Ok(self.out_ptrs[o])
    }
}

/// A prepared CUDA kernel.
pub(crate) trait CudaKernel: Send + Sync {
    /// Queues the work of one launch on the GPU's stream.
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError>;

    /// Whether output 0 may share its buffer with an input. Elementwise kernels
    /// read each element before writing it, so they can.
    fn in_place(&self) -> bool {
        false
    }
}

/// `(domain, op_type)` → builder: the registry of `onyx_core::ep`.
pub(crate) type Registry = onyx_core::ep::KernelRegistry<dyn CudaKernel>;

/// Every kernel a device of compute capability `cc` can run.
pub(crate) fn standard(cc: (i32, i32)) -> Registry {
    let mut r = Registry::new("CUDA");
    elementwise::register_all(&mut r);
    movement::register_all(&mut r);
    indexing::register_all(&mut r);
    generate::register_all(&mut r);
    reduce::register_all(&mut r);
    scan::register_all(&mut r);
    scatter::register_all(&mut r);
    select::register_all(&mut r);
    nn::register_all(&mut r);
    norm::register_all(&mut r);
    linalg::register_all(&mut r);
    quant::register_all(&mut r);
    gqa::register_all(&mut r);
    rotary::register_all(&mut r);
    // attention.cu's tiles use sm_80 instructions (cp.async, bf16 mma),
    // and a module compiles whole: older GPUs run Attention on the CPU.
    if cc.0 >= 8 {
        attention::register_all(&mut r);
    }
    conv::register_all(&mut r);
    pool::register_all(&mut r);
    resize::register_all(&mut r);
    r
}

/// A size as `i32`, or Unsupported when it does not fit.
pub(crate) fn i32_of(x: usize) -> Result<i32, EpError> {
    i32::try_from(x).map_err(|_| {
        EpError::Unsupported(format!("size {x} exceeds the CUDA kernels' 32-bit dims"))
    })
}

pub(crate) fn unsupported(op: &str, dtype: DType) -> EpError {
    EpError::Unsupported(format!("{op} on {dtype} is not implemented on CUDA"))
}

/// The suffix of a per-dtype entry point (`binary_f32`, `binary_i64`, …).
pub(crate) fn suffix(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I8 => "i8",
        DType::U8 => "u8",
        DType::I16 => "i16",
        DType::U16 => "u16",
        DType::I32 => "i32",
        DType::U32 => "u32",
        DType::I64 => "i64",
        DType::U64 => "u64",
        DType::Bool => "bool",
        _ => return None,
    })
}

/// The float dtypes.
pub(crate) fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
}

/// The integer dtypes (bool excluded).
pub(crate) fn is_int(d: DType) -> bool {
    matches!(
        d,
        DType::U8
            | DType::I8
            | DType::U16
            | DType::I16
            | DType::I32
            | DType::U32
            | DType::I64
            | DType::U64
    )
}

/// Bytes per element of the byte-aligned dtypes.
pub(crate) fn width(d: DType) -> Option<usize> {
    (d.is_byte_aligned() && matches!(d.bits(), 8 | 16 | 32 | 64)).then(|| d.bits() / 8)
}

/// Row-major strides.
pub(crate) fn strides(dims: &[usize]) -> Vec<usize> {
    onyx_core::shape::strides(dims)
}

/// Broadcast strides of `input` against `out` (0 on broadcast dims), right-aligned.
pub(crate) fn broadcast_strides(input: &[usize], out: &[usize]) -> Vec<i64> {
    let s = strides(input);
    let pad = out.len() - input.len();
    (0..out.len())
        .map(|d| if d < pad || input[d - pad] == 1 && out[d] != 1 { 0 } else { s[d - pad] as i64 })
        .collect()
}

/// An output shape with up to three input stride sets (`Strided` in common.cuh).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct Strided {
    pub numel: i64,
    pub rank: i32,
    pub _pad: i32,
    pub dims: [i64; MAX_RANK],
    pub a: [i64; MAX_RANK],
    pub b: [i64; MAX_RANK],
    pub c: [i64; MAX_RANK],
}

// SAFETY: plain `#[repr(C)]` data matching `struct Strided` in common.cuh.
unsafe impl cudarc::driver::DeviceRepr for Strided {}

impl Strided {
    /// The output `out` with the given inputs broadcast against it (up to three).
    pub fn broadcast(out: &[usize], inputs: &[&[usize]]) -> Result<Self, EpError> {
        if out.len() > MAX_RANK {
            return Err(EpError::Unsupported(format!(
                "rank {} exceeds the CUDA kernels' {MAX_RANK}",
                out.len()
            )));
        }
        let mut s = Strided {
            numel: out.iter().product::<usize>() as i64,
            rank: out.len() as i32,
            ..Default::default()
        };
        for (d, &n) in out.iter().enumerate() {
            s.dims[d] = n as i64;
        }
        for (k, input) in inputs.iter().enumerate() {
            let st = broadcast_strides(input, out);
            let slot = match k {
                0 => &mut s.a,
                1 => &mut s.b,
                _ => &mut s.c,
            };
            slot[..st.len()].copy_from_slice(&st);
        }
        Ok(s)
    }
}
