//! CUDA kernels: each prepared kernel turns one launch into launches of
//! NVRTC-compiled entry points (or cuBLAS calls) on the provider's stream.

mod attention;
mod conv;
mod elementwise;
mod generate;
mod indexing;
mod linalg;
mod movement;
mod nn;
mod norm;
mod pool;
mod reduce;
mod resize;
mod scan;
mod scatter;
mod select;

use std::collections::HashMap;

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec, TensorArg};
use onyx_core::tensor::Tensor;

use crate::gpu::Gpu;

/// The most dims the strided kernels take (`MAX_RANK` in common.cuh).
pub(crate) const MAX_RANK: usize = 8;

/// A launch as a kernel sees it: tensors with device addresses resolved.
pub(crate) struct Io<'a> {
    pub inputs: &'a [Option<TensorArg>],
    pub outputs: &'a [Option<TensorArg>],
    pub values: &'a [Option<Tensor>],
    /// Device addresses of the inputs and outputs, by slot (0 where absent).
    pub in_ptrs: &'a [u64],
    pub out_ptrs: &'a [u64],
}

impl Io<'_> {
    pub fn input(&self, i: usize) -> Result<&TensorArg, EpError> {
        self.inputs
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| EpError::Kernel(format!("input {i} is required")))
    }

    pub fn output(&self, o: usize) -> Result<&TensorArg, EpError> {
        self.outputs
            .get(o)
            .and_then(Option::as_ref)
            .ok_or_else(|| EpError::Kernel(format!("output {o} is not requested")))
    }

    pub fn has_input(&self, i: usize) -> bool {
        self.inputs.get(i).is_some_and(Option::is_some)
    }

    pub fn has_output(&self, o: usize) -> bool {
        self.outputs.get(o).is_some_and(Option::is_some)
    }

    /// The device address of input `i`.
    pub fn in_ptr(&self, i: usize) -> Result<u64, EpError> {
        self.input(i)?;
        Ok(self.in_ptrs[i])
    }

    /// The device address of output `o`.
    pub fn out_ptr(&self, o: usize) -> Result<u64, EpError> {
        self.output(o)?;
        Ok(self.out_ptrs[o])
    }

    /// A value input (shape argument) as i64s.
    pub fn ints(&self, i: usize) -> Result<Vec<i64>, EpError> {
        let t = self
            .values
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| EpError::Kernel(format!("value input {i} missing")))?;
        t.to_i64_vec().map_err(|e| EpError::Kernel(e.to_string()))
    }

    /// A value input as f64s.
    pub fn floats(&self, i: usize) -> Result<Vec<f64>, EpError> {
        let t = self
            .values
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| EpError::Kernel(format!("value input {i} missing")))?;
        t.to_f64_vec().map_err(|e| EpError::Kernel(e.to_string()))
    }

    /// Whether value input `i` was given.
    pub fn has_value(&self, i: usize) -> bool {
        self.values.get(i).is_some_and(Option::is_some)
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

/// Builds a kernel for a node.
pub(crate) type Builder = fn(&KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError>;

/// `(domain, op_type)` → builder.
#[derive(Default)]
pub(crate) struct Registry {
    builders: HashMap<(String, String), Builder>,
}

impl Registry {
    /// Every kernel a device of compute capability `cc` can run.
    pub fn standard(cc: (i32, i32)) -> Self {
        let mut r = Registry::default();
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

    pub fn register(&mut self, op_type: &str, builder: Builder) {
        self.register_in(onyx_core::graph::DEFAULT_DOMAIN, op_type, builder);
    }

    pub fn register_in(&mut self, domain: &str, op_type: &str, builder: Builder) {
        self.builders.insert((domain.to_string(), op_type.to_string()), builder);
    }

    pub fn contains(&self, domain: &str, op_type: &str) -> bool {
        self.builders.contains_key(&(domain.to_string(), op_type.to_string()))
    }

    pub fn build(&self, spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
        let node = spec.node;
        let b =
            self.builders.get(&(node.domain.clone(), node.op_type.clone())).ok_or_else(|| {
                EpError::Unsupported(format!(
                    "no CUDA kernel for {}::{}",
                    node.domain, node.op_type
                ))
            })?;
        b(spec)
    }
}

/// The dtype of input `i`.
pub(crate) fn in_dtype(spec: &KernelSpec<'_>, i: usize) -> Result<DType, EpError> {
    spec.input_dtypes
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| EpError::Unsupported(format!("input {i} has no dtype")))
}

/// The dtype of output `o`.
pub(crate) fn out_dtype(spec: &KernelSpec<'_>, o: usize) -> Result<DType, EpError> {
    spec.output_dtypes
        .get(o)
        .copied()
        .flatten()
        .ok_or_else(|| EpError::Unsupported(format!("output {o} has no dtype")))
}

/// The parsed op.
pub(crate) fn op<'a, T: onyx_core::ops::Op>(spec: &'a KernelSpec<'_>) -> Result<&'a T, EpError> {
    onyx_core::ops::downcast::<T>(spec.op).ok_or_else(|| {
        EpError::Unsupported(format!("unexpected op type for {}", spec.node.op_type))
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
