//! CPU kernels, one module per op family, each with a `register_all`.
//!
//! A kernel sees its tensors as [`View`]s over the provider's blocks. The
//! executor only lets an output share an input's buffer when the op declared
//! that input in-place-capable; [`KernelIo::input`] refuses to hand out an
//! input that aliases an output, so a kernel that forgot the in-place case
//! fails loudly instead of reading through a mutable alias.

mod arrange;
mod attention;
mod binary;
mod broadcast;
mod cast;
mod causal;
mod conv;
mod depthwise;
#[cfg(target_arch = "x86_64")]
mod depthwise_blocked;
mod direct;
mod dispatch;
mod domains;
mod einsum;
mod elementwise;
mod fastmath;
mod indexing;
mod matmul;
mod microsoft;
mod narrow;
mod nn;
mod norm;
mod pad;
mod pool;
mod quant;
mod recurrent;
mod reduce;
mod resize;
mod scatter;
mod select;
mod shape;
mod signal;
mod spatial;
mod stats;
mod vision;

use onyx_core::dtype::DType;
use onyx_core::ep::EpError;

/// Elements a parallel task covers at least: below that, handing work to
/// another thread costs more than it saves (small models ran slower at two
/// threads than at one).
pub(crate) const PAR_TASK: usize = 16 * 1024;

/// The least number of `len`-element rows a parallel task takes.
pub(crate) fn min_rows(len: usize) -> usize {
    PAR_TASK.div_ceil(len.max(1))
}

/// A prepared CPU kernel.
pub trait CpuKernel: Send + Sync {
    /// Runs on the given tensors. Output buffers are allocated with
    /// unspecified contents (see [`crate::storage`]): a kernel writes every
    /// element of its outputs.
    ///
    /// # Errors
    /// [`EpError::Kernel`] for invalid input values (indices out of range…).
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError>;
}

/// `(domain, op_type)` → builder: the registry of `onyx_core::ep`.
pub type KernelRegistry = onyx_core::ep::KernelRegistry<dyn CpuKernel>;

/// Every CPU kernel.
pub(crate) fn standard() -> KernelRegistry {
    let mut r = KernelRegistry::new("CPU");
    elementwise::register_all(&mut r);
    matmul::register_all(&mut r);
    conv::register_all(&mut r);
    pool::register_all(&mut r);
    nn::register_all(&mut r);
    norm::register_all(&mut r);
    shape::register_all(&mut r);
    indexing::register_all(&mut r);
    pad::register_all(&mut r);
    resize::register_all(&mut r);
    recurrent::register_all(&mut r);
    cast::register_all(&mut r);
    causal::register_all(&mut r);
    reduce::register_all(&mut r);
    attention::register_all(&mut r);
    quant::register_all(&mut r);
    scatter::register_all(&mut r);
    arrange::register_all(&mut r);
    select::register_all(&mut r);
    einsum::register_all(&mut r);
    stats::register_all(&mut r);
    spatial::register_all(&mut r);
    signal::register_all(&mut r);
    vision::register_all(&mut r);
    domains::register_all(&mut r);
    microsoft::register_all(&mut r);
    r
}

/// A tensor as a kernel sees it.
#[derive(Clone, Debug)]
pub struct View {
    ptr: *mut u8,
    bytes: usize,
    /// Element type.
    pub dtype: DType,
    /// Concrete shape.
    pub shape: Vec<usize>,
}

impl View {
    pub(crate) fn new(ptr: *mut u8, bytes: usize, dtype: DType, shape: Vec<usize>) -> Self {
        View { ptr, bytes, dtype, shape }
    }

    /// Element count.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The tensor's bytes.
    pub fn raw(&self) -> &[u8] {
        let len = self.dtype.byte_size(self.numel()).unwrap_or(0).min(self.bytes);
        // SAFETY: `ptr` addresses a live block of `bytes` bytes for the duration of the launch.
        unsafe { std::slice::from_raw_parts(self.ptr, len) }
    }

    fn typed<T: bytemuck::Pod>(&self) -> Result<&[T], EpError> {
        check_type::<T>(self)?;
        // SAFETY: the block is live, aligned to at least 64 bytes, holds `numel` elements of
        // `T` (checked above), and no mutable view of it exists while this borrow is used.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr as *const T, self.numel()) })
    }

    #[allow(clippy::mut_from_ref)]
    fn typed_mut<T: bytemuck::Pod>(&self) -> Result<&mut [T], EpError> {
        check_type::<T>(self)?;
        // SAFETY: as in `typed`; outputs are distinct blocks (or declared in-place aliases,
        // which the kernel then reads only through this slice).
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut T, self.numel()) })
    }
}

fn check_type<T>(v: &View) -> Result<(), EpError> {
    let need = v.numel() * std::mem::size_of::<T>();
    if v.dtype.bits() / 8 != std::mem::size_of::<T>() || need > v.bytes {
        return Err(EpError::Kernel(format!(
            "internal: {} view of {} bytes read as {}-byte elements",
            v.dtype,
            v.bytes,
            std::mem::size_of::<T>()
        )));
    }
    Ok(())
}

/// The tensors of one launch.
pub struct KernelIo {
    pub(crate) inputs: Vec<Option<View>>,
    pub(crate) outputs: Vec<Option<View>>,
    /// Host copies of the op's value inputs (shape arguments), by slot.
    pub(crate) values: Vec<Option<onyx_core::tensor::Tensor>>,
}

impl KernelIo {
    /// The view of input `i` (present or not).
    pub fn input_view(&self, i: usize) -> Option<&View> {
        self.inputs.get(i).and_then(Option::as_ref)
    }

    /// Optional input `i` as a slice of `T`, `None` when absent.
    ///
    /// # Errors
    /// As [`KernelIo::input`], when present.
    pub fn optional_input<T: bytemuck::Pod>(&self, i: usize) -> Result<Option<&[T]>, EpError> {
        self.input_view(i).map(|_| self.input::<T>(i)).transpose()
    }

    /// The view of a required input.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when absent.
    pub fn in_view(&self, i: usize) -> Result<&View, EpError> {
        self.input_view(i).ok_or_else(|| EpError::Kernel(format!("input {i} is required")))
    }

    /// The view of output `o`.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when absent.
    pub fn out_view(&self, o: usize) -> Result<&View, EpError> {
        self.outputs
            .get(o)
            .and_then(Option::as_ref)
            .ok_or_else(|| EpError::Kernel(format!("output {o} is not requested")))
    }

    /// Whether output `o` is requested.
    pub fn has_output(&self, o: usize) -> bool {
        self.outputs.get(o).is_some_and(Option::is_some)
    }

    /// Whether input `i` shares its buffer with output `o` (in-place).
    pub fn aliased(&self, i: usize, o: usize) -> bool {
        match (self.input_view(i), self.outputs.get(o).and_then(Option::as_ref)) {
            (Some(a), Some(b)) => a.ptr == b.ptr,
            _ => false,
        }
    }

    fn aliases_any_output(&self, i: usize) -> bool {
        (0..self.outputs.len()).any(|o| self.aliased(i, o))
    }

    /// Input `i` as typed elements.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when absent, of another dtype size, or aliased with an output.
    pub fn input<T: bytemuck::Pod>(&self, i: usize) -> Result<&[T], EpError> {
        if self.aliases_any_output(i) {
            return Err(EpError::Kernel(format!(
                "internal: input {i} is shared with an output; the kernel must use its in-place path"
            )));
        }
        self.in_view(i)?.typed()
    }

    /// Output `o` as typed elements.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when absent or of another dtype size.
    #[allow(clippy::mut_from_ref)]
    pub fn output<T: bytemuck::Pod>(&self, o: usize) -> Result<&mut [T], EpError> {
        self.out_view(o)?.typed_mut()
    }

    /// Input `i` as raw bytes.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when absent or aliased with an output.
    pub fn input_bytes(&self, i: usize) -> Result<&[u8], EpError> {
        if self.aliases_any_output(i) {
            return Err(EpError::Kernel(format!("internal: input {i} is shared with an output")));
        }
        Ok(self.in_view(i)?.raw())
    }

    /// Output `o` as raw bytes.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when absent.
    #[allow(clippy::mut_from_ref)]
    pub fn output_bytes(&self, o: usize) -> Result<&mut [u8], EpError> {
        let v = self.out_view(o)?;
        let len = v.dtype.byte_size(v.numel()).unwrap_or(0).min(v.bytes);
        // SAFETY: the output block is live for the launch and not otherwise borrowed.
        Ok(unsafe { std::slice::from_raw_parts_mut(v.ptr, len) })
    }

    /// Whether input `i` is given, on the device or as a host value.
    pub fn present(&self, i: usize) -> bool {
        self.input_view(i).is_some() || self.values.get(i).is_some_and(Option::is_some)
    }

    /// A small input on the host (axes, shapes, scalars): the executor's host copy
    /// for value inputs, else read from the device buffer.
    fn host(&self, i: usize) -> Result<onyx_core::tensor::Tensor, EpError> {
        if let Some(Some(t)) = self.values.get(i) {
            return Ok(t.clone());
        }
        let v = self.in_view(i)?;
        onyx_core::tensor::Tensor::from_bytes(v.dtype, v.shape.clone(), v.raw().to_vec().into())
            .map_err(|e| EpError::Kernel(e.to_string()))
    }

    /// The elements of a small input on the host, typed.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when absent or of another dtype.
    pub fn host_vec<T: onyx_core::tensor::Element>(&self, i: usize) -> Result<Vec<T>, EpError> {
        self.host(i)?.to_vec::<T>().map_err(|e| EpError::Kernel(format!("input {i}: {e}")))
    }

    /// The values of a small integer input (axes, shapes), widened to i64.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when absent or not an integer tensor.
    pub fn ints(&self, i: usize) -> Result<Vec<i64>, EpError> {
        self.host(i)?.to_i64_vec().map_err(|e| EpError::Kernel(format!("input {i}: {e}")))
    }

    /// The values of a small numeric input as f64.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when absent or not numeric.
    pub fn floats(&self, i: usize) -> Result<Vec<f64>, EpError> {
        self.host(i)?.to_f64_vec().map_err(|e| EpError::Kernel(format!("input {i}: {e}")))
    }
}

/// The error for a dtype a kernel does not implement.
pub(crate) fn unsupported_dtype(op: &str, dtype: DType) -> EpError {
    EpError::Unsupported(format!("{op} on {dtype} is not implemented on the CPU"))
}
