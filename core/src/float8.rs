//! Decoding of the small float formats ONNX defines (float8, float6, float4, e8m0).

use crate::dtype::DType;

/// Layout of a small float format.
struct Format {
    exp_bits: u32,
    man_bits: u32,
    bias: i32,
    /// The all-ones exponent encodes inf (mantissa 0) and NaN (IEEE style).
    ieee_specials: bool,
    /// NaN is the bit pattern `1000…0` (negative zero); no inf, no negative zero.
    fnuz: bool,
    /// `S.1111.111` is NaN and there is no inf (E4M3FN).
    fn_nan: bool,
}

fn format(dtype: DType) -> Option<Format> {
    let f = |exp_bits, man_bits, bias, ieee_specials, fnuz, fn_nan| Format {
        exp_bits,
        man_bits,
        bias,
        ieee_specials,
        fnuz,
        fn_nan,
    };
    Some(match dtype {
        DType::F8E4M3FN => f(4, 3, 7, false, false, true),
        DType::F8E4M3FNUZ => f(4, 3, 8, false, true, false),
        DType::F8E5M2 => f(5, 2, 15, true, false, false),
        DType::F8E5M2FNUZ => f(5, 2, 16, false, true, false),
        DType::F4E2M1 => f(2, 1, 1, false, false, false),
        DType::F6E2M3 => f(2, 3, 1, false, false, false),
        DType::F6E3M2 => f(3, 2, 3, false, false, false),
        _ => return None,
    })
}

/// Decodes one element of a small float format from its raw bit pattern.
///
/// # Panics
/// When `dtype` is not one of the small float formats.
pub fn decode(dtype: DType, bits: u32) -> f64 {
    if dtype == DType::F8E8M0 {
        return if bits == 0xFF { f64::NAN } else { 2f64.powi(bits as i32 - 127) };
    }
    let fmt = format(dtype).unwrap_or_else(|| panic!("{dtype} is not a small float format"));
    let total = 1 + fmt.exp_bits + fmt.man_bits;
    let sign_bit = 1u32 << (total - 1);
    if fmt.fnuz && bits == sign_bit {
        return f64::NAN;
    }
    let exp_max = (1u32 << fmt.exp_bits) - 1;
    let man_max = (1u32 << fmt.man_bits) - 1;
    let e = (bits >> fmt.man_bits) & exp_max;
    let m = bits & man_max;
    let sign = if bits & sign_bit != 0 { -1.0 } else { 1.0 };
    if fmt.ieee_specials && e == exp_max {
        return if m == 0 { sign * f64::INFINITY } else { f64::NAN };
    }
    if fmt.fn_nan && e == exp_max && m == man_max {
        return f64::NAN;
    }
    let scale = (1u64 << fmt.man_bits) as f64;
    let magnitude = if e == 0 {
        (m as f64 / scale) * 2f64.powi(1 - fmt.bias)
    } else {
        (1.0 + m as f64 / scale) * 2f64.powi(e as i32 - fmt.bias)
    };
    sign * magnitude
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3fn_decodes_its_extremes() {
        assert_eq!(decode(DType::F8E4M3FN, 0x7E), 448.0);
        assert!(decode(DType::F8E4M3FN, 0x7F).is_nan());
        assert_eq!(decode(DType::F8E4M3FN, 0x38), 1.0);
        assert_eq!(decode(DType::F8E4M3FN, 0x01), 2f64.powi(-9));
    }

    #[test]
    fn e5m2_has_ieee_infinities() {
        assert_eq!(decode(DType::F8E5M2, 0x7C), f64::INFINITY);
        assert_eq!(decode(DType::F8E5M2, 0xFC), f64::NEG_INFINITY);
        assert_eq!(decode(DType::F8E5M2, 0x7B), 57344.0);
    }

    #[test]
    fn fnuz_formats_use_negative_zero_as_nan() {
        assert!(decode(DType::F8E4M3FNUZ, 0x80).is_nan());
        assert_eq!(decode(DType::F8E4M3FNUZ, 0x7F), 240.0);
        assert_eq!(decode(DType::F8E5M2FNUZ, 0x7F), 57344.0);
    }

    #[test]
    fn float4_covers_its_eight_magnitudes() {
        let vals: Vec<f64> = (0..8).map(|b| decode(DType::F4E2M1, b)).collect();
        assert_eq!(vals, vec![0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        assert_eq!(decode(DType::F4E2M1, 0xF), -6.0);
        assert_eq!(decode(DType::F8E8M0, 127), 1.0);
    }
}
