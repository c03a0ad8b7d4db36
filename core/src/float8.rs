//! Decoding and encoding of the small float formats ONNX defines (float8, float6,
//! float4, e8m0). Encoding rounds to nearest even and treats overflow, NaN and
//! infinities exactly as the ONNX reference (through `ml_dtypes`) does.

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

impl Format {
    fn total_bits(&self) -> u32 {
        1 + self.exp_bits + self.man_bits
    }

    fn exp_max(&self) -> i64 {
        (1i64 << self.exp_bits) - 1
    }

    fn man_max(&self) -> i64 {
        (1i64 << self.man_bits) - 1
    }

    /// The pattern of the largest finite positive value.
    fn max_bits(&self) -> u32 {
        let (e, m) = (self.exp_max(), self.man_max());
        let bits = if self.ieee_specials {
            ((e - 1) << self.man_bits) | m
        } else if self.fn_nan {
            (e << self.man_bits) | (m - 1)
        } else {
            (e << self.man_bits) | m
        };
        bits as u32
    }

    /// The pattern a NaN of the given sign becomes. Formats without a NaN turn it
    /// into a zero of the opposite sign, as `ml_dtypes` does.
    fn nan_bits(&self, negative: bool) -> u32 {
        let sign_bit = 1u32 << (self.total_bits() - 1);
        let sign = if negative { sign_bit } else { 0 };
        if self.fnuz {
            sign_bit
        } else if self.ieee_specials {
            ((self.exp_max() as u32) << self.man_bits) | (1 << (self.man_bits - 1)) | sign
        } else if self.fn_nan {
            (sign_bit - 1) | sign
        } else {
            sign ^ sign_bit
        }
    }

    /// The pattern for an infinite or overflowing value without saturation:
    /// inf where the format has it, else NaN, else (no NaN either) the largest value.
    fn overflow_bits(&self, negative: bool) -> u32 {
        let sign = if negative { 1u32 << (self.total_bits() - 1) } else { 0 };
        if self.ieee_specials {
            ((self.exp_max() as u32) << self.man_bits) | sign
        } else if self.fnuz || self.fn_nan {
            self.nan_bits(negative)
        } else {
            self.max_bits() | sign
        }
    }
}

/// Whether a dtype is one of the formats [`encode`] handles (float8, float6, float4; not e8m0).
pub fn is_small_float(dtype: DType) -> bool {
    format(dtype).is_some()
}

/// The largest finite value of a small float format (`None` for other dtypes).
pub fn max_value(dtype: DType) -> Option<f64> {
    if dtype == DType::F8E8M0 {
        return Some(decode(dtype, 0xFE));
    }
    format(dtype).map(|f| decode(dtype, f.max_bits()))
}

/// Encodes a value into a small float format (float8, float6, float4), rounding to
/// nearest even. With `saturate`, out-of-range values and infinities become the
/// largest finite value of their sign; without it they become inf where the format
/// has one, else NaN, else (float6, float4) the largest value. Returns the raw bit
/// pattern; `None` when `dtype` is not one of these formats (see [`encode_e8m0`]).
pub fn encode(dtype: DType, x: f64, saturate: bool) -> Option<u32> {
    let fmt = format(dtype)?;
    let negative = x.is_sign_negative();
    let sign = if negative { 1u32 << (fmt.total_bits() - 1) } else { 0 };
    if x.is_nan() {
        return Some(fmt.nan_bits(negative));
    }
    let max_bits = fmt.max_bits();
    if x.is_infinite() {
        return Some(if saturate { max_bits | sign } else { fmt.overflow_bits(negative) });
    }
    let mut a = x.abs();
    let max = decode(dtype, max_bits);
    if saturate && a > max {
        a = max;
    }
    let zero = if fmt.fnuz { 0 } else { sign };
    if a == 0.0 {
        return Some(zero);
    }
    let m = fmt.man_bits as i64;
    let emin = 1 - fmt.bias as i64;
    let e = if a < f64::MIN_POSITIVE { -1022 } else { ((a.to_bits() >> 52) & 0x7FF) as i64 - 1023 };
    // Round to a multiple of the quantum 2^q: scaling by powers of two is exact.
    let q = e.max(emin) - m;
    let n = (a * 2f64.powi(-q as i32)).round_ties_even() as i64;
    if n == 0 {
        return Some(zero);
    }
    let (exp_field, man) = if n < (1 << m) {
        (0, n)
    } else if n == (2 << m) {
        (q + 1 + m + fmt.bias as i64, 0)
    } else {
        (q + m + fmt.bias as i64, n - (1 << m))
    };
    if exp_field > fmt.exp_max() || ((exp_field << m) | man) > max_bits as i64 {
        return Some(if saturate { max_bits | sign } else { fmt.overflow_bits(negative) });
    }
    Some(((exp_field << m) | man) as u32 | sign)
}

/// How a cast to float8e8m0 rounds (the `round_mode` attribute of Cast).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RoundMode {
    /// Toward +inf in magnitude (the default).
    #[default]
    Up,
    /// Toward zero.
    Down,
    /// To nearest.
    Nearest,
}

impl RoundMode {
    /// Parses the attribute's spelling (`up`, `down`, `nearest`).
    pub fn parse(name: &str) -> Option<RoundMode> {
        match name {
            "up" => Some(RoundMode::Up),
            "down" => Some(RoundMode::Down),
            "nearest" => Some(RoundMode::Nearest),
            _ => None,
        }
    }
}

/// Encodes a float32 into float8e8m0 (a bare exponent), exactly as the ONNX
/// reference's `to_float8e8m0` does: the sign is dropped, NaN and inf become
/// `0xFF`, and rounding follows `mode`; with `saturate` it never rounds up into `0xFF`.
pub fn encode_e8m0(x: f32, saturate: bool, mode: RoundMode) -> u32 {
    let bits = x.to_bits();
    let exponent = (bits >> 23) & 0xFF;
    if exponent == 0xFF {
        return 0xFF;
    }
    let round_up = match mode {
        RoundMode::Up => bits & 0x7F_FFFF != 0,
        RoundMode::Down => false,
        RoundMode::Nearest => {
            let guard = bits & 0x40_0000 != 0;
            let round = bits & 0x20_0000 != 0;
            let sticky = bits & 0x1F_FFFF != 0;
            guard && (round || sticky || exponent > 0)
        }
    };
    if round_up && !(saturate && exponent == 0xFE) { exponent + 1 } else { exponent }
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

    fn enc(d: DType, x: f64, sat: bool) -> u32 {
        encode(d, x, sat).unwrap()
    }

    #[test]
    fn encoding_rounds_to_nearest_even_and_round_trips_every_pattern() {
        for d in [DType::F8E4M3FN, DType::F8E4M3FNUZ, DType::F8E5M2, DType::F8E5M2FNUZ] {
            for b in 0..256u32 {
                let v = decode(d, b);
                if v.is_finite() && !(v == 0.0 && b != 0) {
                    assert_eq!(enc(d, v, false), b, "{d} {b:#x}");
                }
            }
        }
        // 1.0625 lies halfway between 1 and 1.125: the even mantissa (1) wins.
        assert_eq!(enc(DType::F8E4M3FN, 1.0625, true), 0x38);
        assert_eq!(enc(DType::F8E4M3FN, 1.1875, true), 0x3A);
        assert_eq!(enc(DType::F4E2M1, 1.25, true), 0x2);
    }

    #[test]
    fn overflow_saturates_or_becomes_the_formats_special_value() {
        assert_eq!(enc(DType::F8E4M3FN, 1e6, true), 0x7E);
        assert_eq!(enc(DType::F8E4M3FN, 464.0, false), 0x7E);
        assert_eq!(enc(DType::F8E4M3FN, 470.0, false), 0x7F);
        assert_eq!(enc(DType::F8E4M3FN, f64::NEG_INFINITY, false), 0xFF);
        assert_eq!(enc(DType::F8E5M2, 1e6, false), 0x7C);
        assert_eq!(enc(DType::F8E5M2, f64::NEG_INFINITY, true), 0xFB);
        assert_eq!(enc(DType::F8E5M2FNUZ, -1e6, false), 0x80);
        assert_eq!(enc(DType::F4E2M1, f64::INFINITY, false), 0x7);
        assert_eq!(enc(DType::F8E5M2, f64::NAN, false), 0x7E);
    }

    #[test]
    fn tiny_values_round_to_signed_zero_except_in_fnuz_formats() {
        assert_eq!(enc(DType::F8E4M3FN, -1e-7, true), 0x80);
        assert_eq!(enc(DType::F8E4M3FNUZ, -1e-7, true), 0x00);
        assert_eq!(enc(DType::F8E4M3FN, 2f64.powi(-10) * 1.01, true), 0x01);
    }

    #[test]
    fn e8m0_rounds_up_unless_saturated_at_the_top() {
        assert_eq!(encode_e8m0(1.1, true, RoundMode::Up), 128);
        assert_eq!(encode_e8m0(1.1, true, RoundMode::Down), 127);
        assert_eq!(encode_e8m0(f32::MAX, true, RoundMode::Up), 0xFE);
        assert_eq!(encode_e8m0(f32::MAX, false, RoundMode::Up), 0xFF);
        assert_eq!(encode_e8m0(0.0, true, RoundMode::Up), 0);
    }
}
