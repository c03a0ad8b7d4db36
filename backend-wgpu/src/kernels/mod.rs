//! GPU kernels: each turns a launch into one or more dispatches of a WGSL
//! shader (pipeline overrides, a params block of u32 words, bindings and a
//! grid). The provider records them into its command encoder.

mod elementwise;
mod generate;
mod indexing;
mod linalg;
mod movement;
mod nn;
mod norm;
mod reduce;
mod resize;

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, Launch};
use onyx_shaders::Shader;

/// What a binding slot is bound to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Bind {
    /// Input slot `i` of the launch.
    In(usize),
    /// Output slot `o` of the launch.
    Out(usize),
    /// A throwaway 4-byte buffer, for optional outputs nobody asked for.
    Dummy,
}

/// How many workgroups a dispatch needs.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Grid {
    /// One invocation per item, `WG` invocations per workgroup.
    Invocations(u64),
    /// Exactly this many workgroups.
    Workgroups(u64),
}

/// Invocations that reduce one row of `len`: a power of two between 32 and
/// 256 with about four elements each. Short rows then take few barrier steps
/// and no idle invocations (softmax over 128 attention scores runs 8× faster
/// on SwiftShader with 32 than with 256).
pub(crate) fn row_workgroup(len: usize) -> u32 {
    (len / 4).next_power_of_two().clamp(32, 256) as u32
}

/// One dispatch of one shader.
#[derive(Clone, Debug)]
pub(crate) struct Dispatch {
    pub shader: Shader,
    pub entry: &'static str,
    pub constants: Vec<(&'static str, f64)>,
    pub params: Vec<u32>,
    pub binds: Vec<(u32, Bind)>,
    pub grid: Grid,
}

impl Dispatch {
    /// A dispatch of `shader`'s `main` with these bindings (binding 0 is the params).
    pub fn new(shader: Shader, params: Vec<u32>, binds: &[Bind], grid: Grid) -> Self {
        Dispatch {
            shader,
            entry: "main",
            constants: Vec::new(),
            params,
            binds: binds.iter().enumerate().map(|(i, b)| (i as u32 + 1, *b)).collect(),
            grid,
        }
    }

    /// Sets an override constant.
    pub fn with(mut self, name: &'static str, value: impl Into<f64>) -> Self {
        self.constants.push((name, value.into()));
        self
    }
}

/// The tensors of one launch, as a kernel sees them: the shared [`Launch`]
/// accessors (through `Deref`) and what the adapter can do.
pub(crate) struct Io<'a> {
    pub launch: Launch<'a>,
    /// The adapter computes in f16 natively (`SHADER_F16`).
    pub shader_f16: bool,
}

impl<'a> std::ops::Deref for Io<'a> {
    type Target = Launch<'a>;

    fn deref(&self) -> &Launch<'a> {
        &self.launch
    }
}

/// A prepared GPU kernel.
pub(crate) trait GpuKernel: Send + Sync {
    /// The dispatches for one launch.
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError>;

    /// Whether output 0 may overwrite an input (the kernel has in-place entry points).
    fn in_place(&self) -> bool {
        false
    }
}

/// `(domain, op_type)` → builder: the registry of `onyx_core::ep`.
pub(crate) type Registry = onyx_core::ep::KernelRegistry<dyn GpuKernel>;

pub(crate) fn standard() -> Registry {
    let mut r = Registry::new("wgpu");
    elementwise::register_all(&mut r);
    movement::register_all(&mut r);
    indexing::register_all(&mut r);
    resize::register_all(&mut r);
    generate::register_all(&mut r);
    reduce::register_all(&mut r);
    nn::register_all(&mut r);
    norm::register_all(&mut r);
    linalg::register_all(&mut r);
    r
}

pub(crate) fn unsupported(op: &str, dtype: DType) -> EpError {
    EpError::Unsupported(format!("{op} on {dtype} is not implemented on wgpu"))
}

/// The float dtypes the shaders compute in f32.
pub(crate) fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

/// The integer and bool dtypes the integer shaders handle (int64 emulated exactly).
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
            | DType::Bool
    )
}

/// Bytes per element for the byte-aligned dtypes a shader can move.
pub(crate) fn width(d: DType) -> Option<u32> {
    (d.is_byte_aligned() && matches!(d.bits(), 8 | 16 | 32 | 64)).then(|| d.bits() as u32 / 8)
}

/// 32-bit words a tensor occupies, rounded up: the invocation count of word-owning shaders.
pub(crate) fn words(dtype: DType, numel: usize) -> u64 {
    (dtype.byte_size(numel).unwrap_or(0) as u64).div_ceil(4)
}

/// Row-major strides.
pub(crate) fn strides(dims: &[usize]) -> Vec<usize> {
    onyx_core::shape::strides(dims)
}

/// Broadcast strides of `input` against `out` (0 on broadcast dims), right-aligned.
pub(crate) fn broadcast_strides(input: &[usize], out: &[usize]) -> Vec<usize> {
    let s = strides(input);
    let pad = out.len() - input.len();
    (0..out.len())
        .map(|d| if d < pad || input[d - pad] == 1 && out[d] != 1 { 0 } else { s[d - pad] })
        .collect()
}

/// Pads a list to 8 entries (the shaders' maximum rank) as u32 words.
///
/// # Errors
/// [`EpError::Unsupported`] for more than 8 dims or values beyond 32 bits.
pub(crate) fn pad8(v: &[usize]) -> Result<[u32; 8], EpError> {
    if v.len() > 8 {
        return Err(EpError::Unsupported(format!("rank {} exceeds the GPU kernels' 8", v.len())));
    }
    let mut out = [0u32; 8];
    for (o, &x) in out.iter_mut().zip(v) {
        *o = u32::try_from(x)
            .map_err(|_| EpError::Unsupported(format!("{x} exceeds 32-bit indexing")))?;
    }
    Ok(out)
}

/// Like [`pad8`] for signed strides (negative slice steps wrap in u32 arithmetic).
pub(crate) fn pad8_signed(v: &[i64]) -> Result<[u32; 8], EpError> {
    if v.len() > 8 {
        return Err(EpError::Unsupported(format!("rank {} exceeds the GPU kernels' 8", v.len())));
    }
    let mut out = [0u32; 8];
    for (o, &x) in out.iter_mut().zip(v) {
        *o = i32::try_from(x)
            .map_err(|_| EpError::Unsupported(format!("{x} exceeds 32-bit indexing")))?
            as u32;
    }
    Ok(out)
}

/// A u32 from a size, or an error past 32 bits.
pub(crate) fn u32_of(x: usize) -> Result<u32, EpError> {
    u32::try_from(x).map_err(|_| EpError::Unsupported(format!("{x} exceeds 32-bit indexing")))
}
