//! Onyx's WGSL compute shaders, as data.
//!
//! Each shader is a real `.wgsl` file under `shaders/wgsl/`, compiled with
//! the generated `codes.wgsl` appended (the kernel codes of onyx-core's
//! tables, written by `tools/codegen`), so that a shader switches on
//! `UNARY_ABS`, not on a number kept by hand. A test parses and validates
//! every shader with naga. Kernels are specialized with pipeline `override` constants (op, dtypes, workgroup size) and read
//! shapes and strides from a small params buffer, so a new shape reuses the
//! pipeline: no string templating, no shapes baked into source.

#![warn(missing_docs)]

macro_rules! shaders {
    ($($(#[$doc:meta])* $name:ident => $file:literal,)*) => {
        /// A shader.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        pub enum Shader {
            $($(#[$doc])* $name,)*
        }

        impl Shader {
            /// Every shader.
            pub const ALL: &'static [Shader] = &[$(Shader::$name,)*];

            /// The WGSL source: the shader's file, then the generated codes
            /// (WGSL lets a module use a constant declared below it, and
            /// `enable` directives must come first), so error line numbers
            /// are the file's own.
            pub fn source(self) -> &'static str {
                match self {
                    $(Shader::$name => concat!(
                        include_str!(concat!("../wgsl/", $file)),
                        "\n",
                        include_str!("../wgsl/codes.wgsl"),
                    ),)*
                }
            }

            /// The file name, for labels and messages.
            pub fn file(self) -> &'static str {
                match self {
                    $(Shader::$name => $file,)*
                }
            }
        }
    };
}

shaders! {
    /// Unary functions on f32 / f16 / bf16 tensors.
    UnaryFloat => "unary_float.wgsl",
    /// Unary ops on integer and bool tensors, int64 exact.
    UnaryInt => "unary_int.wgsl",
    /// Broadcasting binary ops on float tensors.
    BinaryFloat => "binary_float.wgsl",
    /// Binary f32 arithmetic four elements at a time, for same-shape and suffix-broadcast inputs.
    BinaryVec4 => "binary_vec4.wgsl",
    /// Binary f16 arithmetic in native f16 (adapters with `SHADER_F16`).
    BinaryF16 => "binary_f16.wgsl",
    /// Broadcasting binary ops on integer and bool tensors, int64 exact.
    BinaryInt => "binary_int.wgsl",
    /// Casts between the supported dtypes.
    Cast => "cast.wgsl",
    /// Strided copies of any element width (Transpose, Slice, Expand, Tile, Concat).
    Copy => "copy.wgsl",
    /// Gather along an axis.
    Gather => "gather.wgsl",
    /// Where with broadcasting.
    Where => "where.wgsl",
    /// Generated data: repeated patterns and ranges.
    Fill => "fill.wgsl",
    /// Reductions over any axes, ArgMax and ArgMin.
    Reduce => "reduce.wgsl",
    /// Softmax, LogSoftmax and Hardmax along an axis.
    Softmax => "softmax.wgsl",
    /// LayerNormalization over trailing dims.
    LayerNorm => "layernorm.wgsl",
    /// BatchNormalization in inference mode.
    BatchNorm => "batchnorm.wgsl",
    /// Resize and Upsample from per-axis tap tables.
    Resize => "resize.wgsl",
    /// Tiled batched matrix products and Gemm.
    MatMul => "matmul.wgsl",
    /// Direct N-d convolution.
    Conv => "conv.wgsl",
    /// Max and average pooling.
    Pool => "pool.wgsl",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shader_parses_and_validates_with_naga() {
        for s in Shader::ALL {
            let module = naga::front::wgsl::parse_str(s.source())
                .unwrap_or_else(|e| panic!("{}: {}", s.file(), e.emit_to_string(s.source())));
            let mut validator = naga::valid::Validator::new(
                naga::valid::ValidationFlags::all(),
                naga::valid::Capabilities::all(),
            );
            validator
                .validate(&module)
                .unwrap_or_else(|e| panic!("{}: {}", s.file(), e.emit_to_string(s.source())));
        }
    }
}
