//! Onyx's CUDA kernels, as data.
//!
//! Each kernel family is a real `.cu` file under `kernels/cuda/`, compiled at
//! run time by NVRTC for the device's own architecture (so `cargo build
//! --features cuda` needs no CUDA toolkit). Kernels are C++ templates
//! instantiated per dtype as `extern "C"` entry points (`binary_f32`,
//! `binary_f16`, …); the op and the shapes are launch arguments, so a new
//! shape or op never means a new compilation. `common.cuh` is the one shared
//! header: f16/bf16 conversions (NVRTC ships no `cuda_fp16.h`) and index helpers.

#![warn(missing_docs)]

/// The shared header every kernel file includes as `"common.cuh"`.
pub const COMMON_HEADER: (&str, &str) = ("common.cuh", include_str!("../cuda/common.cuh"));

macro_rules! kernels {
    ($($(#[$doc:meta])* $name:ident => $file:literal,)*) => {
        /// A kernel source file.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Kernel {
            $($(#[$doc])* $name,)*
        }

        impl Kernel {
            /// Every kernel file.
            pub const ALL: &'static [Kernel] = &[$(Kernel::$name,)*];

            /// The CUDA C++ source.
            pub fn source(self) -> &'static str {
                match self {
                    $(Kernel::$name => include_str!(concat!("../cuda/", $file)),)*
                }
            }

            /// The file name, for messages and cache keys.
            pub fn file(self) -> &'static str {
                match self {
                    $(Kernel::$name => $file,)*
                }
            }
        }
    };
}

kernels! {
    /// Unary functions, broadcasting binary ops and comparisons, Where, Clip, Cast.
    Elementwise => "elementwise.cu",
    /// Strided copies (Transpose, Slice, Expand, Tile, Concat, Split), gathers, scatters, Pad, fills and ranges.
    Movement => "movement.cu",
    /// Reductions over axes, ArgMax/ArgMin, and the Softmax family.
    Reduce => "reduce.cu",
    /// TopK.
    Select => "select.cu",
    /// Cumulative sums and products (CumSum, CumProd).
    Scan => "scan.cu",
    /// LayerNormalization and its variants, BatchNormalization, InstanceNormalization.
    Norm => "norm.cu",
    /// Convolution as an implicit GEMM.
    Conv => "conv.cu",
    /// Max and average pooling, global pooling.
    Pool => "pool.cu",
    /// Resize and Upsample.
    Resize => "resize.cu",
    /// Attention: flash-style tensor-core tiles and a warp-per-row fallback.
    Attention => "attention.cu",
    /// Casts to and from float8, float8e8m0, float4 and the packed 4- and 2-bit integers.
    Cast => "cast.cu",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_file_includes_the_common_header_and_defines_entry_points() {
        for k in Kernel::ALL {
            let src = k.source();
            assert!(src.contains("#include \"common.cuh\""), "{}", k.file());
            assert!(src.contains("extern \"C\" __global__"), "{}", k.file());
        }
    }
}
