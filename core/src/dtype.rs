//! Element types: every ONNX `TensorProto.DataType`, with their storage sizes.

use std::fmt;

/// The element type of a tensor. One variant for every ONNX tensor data type.
///
/// Sub-byte types (`U4`, `I4`, `F4E2M1`, `U2`, `I2`, `F6*`) are stored packed,
/// exactly as ONNX `raw_data` stores them; [`DType::byte_size`] accounts for it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)] // the variants are the ONNX names, spelled out in `name()`.
pub enum DType {
    F32,
    U8,
    I8,
    U16,
    I16,
    I32,
    I64,
    String,
    Bool,
    F16,
    F64,
    U32,
    U64,
    C64,
    C128,
    BF16,
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    U4,
    I4,
    F4E2M1,
    F8E8M0,
    U2,
    I2,
    F6E2M3,
    F6E3M2,
}

/// Every dtype, in ONNX enum order.
pub const ALL_DTYPES: [DType; 28] = [
    DType::F32,
    DType::U8,
    DType::I8,
    DType::U16,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::String,
    DType::Bool,
    DType::F16,
    DType::F64,
    DType::U32,
    DType::U64,
    DType::C64,
    DType::C128,
    DType::BF16,
    DType::F8E4M3FN,
    DType::F8E4M3FNUZ,
    DType::F8E5M2,
    DType::F8E5M2FNUZ,
    DType::U4,
    DType::I4,
    DType::F4E2M1,
    DType::F8E8M0,
    DType::U2,
    DType::I2,
    DType::F6E2M3,
    DType::F6E3M2,
];

impl DType {
    /// The dtype for an ONNX `TensorProto.DataType` code, `None` for UNDEFINED or unknown codes.
    pub fn from_onnx(code: i32) -> Option<DType> {
        if (1..=ALL_DTYPES.len() as i32).contains(&code) {
            Some(ALL_DTYPES[(code - 1) as usize])
        } else {
            None
        }
    }

    /// The ONNX `TensorProto.DataType` code.
    pub fn to_onnx(self) -> i32 {
        ALL_DTYPES.iter().position(|d| *d == self).expect("every dtype is listed") as i32 + 1
    }

    /// Bits per element in storage. Strings report 0: they have no fixed-width storage.
    pub fn bits(self) -> usize {
        use DType::*;
        match self {
            U2 | I2 => 2,
            U4 | I4 | F4E2M1 => 4,
            F6E2M3 | F6E3M2 => 6,
            U8 | I8 | Bool | F8E4M3FN | F8E4M3FNUZ | F8E5M2 | F8E5M2FNUZ | F8E8M0 => 8,
            U16 | I16 | F16 | BF16 => 16,
            F32 | I32 | U32 => 32,
            F64 | I64 | U64 | C64 => 64,
            C128 => 128,
            String => 0,
        }
    }

    /// Bytes needed to store `numel` elements, packed for sub-byte types.
    /// `None` for strings, which have no byte layout.
    pub fn byte_size(self, numel: usize) -> Option<usize> {
        match self {
            DType::String => None,
            _ => Some((numel * self.bits()).div_ceil(8)),
        }
    }

    /// Whether elements occupy whole bytes (everything but the packed sub-byte types).
    pub fn is_byte_aligned(self) -> bool {
        self.bits() % 8 == 0 && self != DType::String
    }

    /// The natural alignment of one element, in bytes (1 for packed types).
    pub fn align(self) -> usize {
        match self {
            DType::C64 => 4,
            DType::C128 => 8,
            DType::String => 8,
            _ => (self.bits() / 8).max(1),
        }
    }

    /// True for every floating-point type, including the 8-, 6- and 4-bit formats.
    pub fn is_float(self) -> bool {
        use DType::*;
        matches!(
            self,
            F32 | F64
                | F16
                | BF16
                | F8E4M3FN
                | F8E4M3FNUZ
                | F8E5M2
                | F8E5M2FNUZ
                | F8E8M0
                | F4E2M1
                | F6E2M3
                | F6E3M2
        )
    }

    /// True for the signed and unsigned integer types (not bool).
    pub fn is_int(self) -> bool {
        use DType::*;
        matches!(self, U8 | I8 | U16 | I16 | I32 | I64 | U32 | U64 | U4 | I4 | U2 | I2)
    }

    /// True for the signed integer types.
    pub fn is_signed_int(self) -> bool {
        use DType::*;
        matches!(self, I8 | I16 | I32 | I64 | I4 | I2)
    }

    /// The lower-case name used in messages, numpy-like (`float32`, `int64`, `bfloat16`).
    pub fn name(self) -> &'static str {
        use DType::*;
        match self {
            F32 => "float32",
            U8 => "uint8",
            I8 => "int8",
            U16 => "uint16",
            I16 => "int16",
            I32 => "int32",
            I64 => "int64",
            String => "string",
            Bool => "bool",
            F16 => "float16",
            F64 => "float64",
            U32 => "uint32",
            U64 => "uint64",
            C64 => "complex64",
            C128 => "complex128",
            BF16 => "bfloat16",
            F8E4M3FN => "float8e4m3fn",
            F8E4M3FNUZ => "float8e4m3fnuz",
            F8E5M2 => "float8e5m2",
            F8E5M2FNUZ => "float8e5m2fnuz",
            U4 => "uint4",
            I4 => "int4",
            F4E2M1 => "float4e2m1",
            F8E8M0 => "float8e8m0",
            U2 => "uint2",
            I2 => "int2",
            F6E2M3 => "float6e2m3",
            F6E3M2 => "float6e3m2",
        }
    }

    /// Parses a name as printed by [`DType::name`], also accepting ONNX spellings (`float`, `double`).
    pub fn from_name(name: &str) -> Option<DType> {
        let lower = name.to_ascii_lowercase();
        let alias = match lower.as_str() {
            "float" => "float32",
            "double" => "float64",
            "half" => "float16",
            other => other,
        };
        ALL_DTYPES.iter().copied().find(|d| d.name() == alias)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn onnx_codes_round_trip_for_every_dtype() {
        for d in ALL_DTYPES {
            assert_eq!(DType::from_onnx(d.to_onnx()), Some(d));
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_onnx(0), None);
        assert_eq!(DType::F32.to_onnx(), 1);
        assert_eq!(DType::BF16.to_onnx(), 16);
        assert_eq!(DType::I2.to_onnx(), 26);
    }

    #[test]
    fn packed_types_round_their_byte_size_up() {
        assert_eq!(DType::I4.byte_size(3), Some(2));
        assert_eq!(DType::U2.byte_size(5), Some(2));
        assert_eq!(DType::F6E2M3.byte_size(4), Some(3));
        assert_eq!(DType::F32.byte_size(3), Some(12));
        assert_eq!(DType::String.byte_size(3), None);
    }
}
