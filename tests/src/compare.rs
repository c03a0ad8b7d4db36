//! Comparing values with per-dtype tolerances.

use onyx_core::dtype::DType;
use onyx_core::tensor::{Tensor, Value};

/// `|actual - expected| <= atol + rtol * |expected|`, numpy style.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Tolerance {
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

impl Default for Tolerance {
    /// The ONNX backend-test defaults.
    fn default() -> Self {
        Tolerance { rtol: 1e-3, atol: 1e-7 }
    }
}

impl Tolerance {
    /// The tolerance for a dtype: the case's own for f32/f64, looser for the
    /// half types (whose epsilon is larger), exact (0) for everything else.
    pub fn for_dtype(self, dtype: DType) -> Tolerance {
        match dtype {
            DType::F32 | DType::F64 | DType::C64 | DType::C128 => self,
            DType::F16 => Tolerance { rtol: self.rtol.max(1e-3), atol: self.atol.max(1e-3) },
            DType::BF16 => Tolerance { rtol: self.rtol.max(1e-2), atol: self.atol.max(1e-2) },
            _ => Tolerance { rtol: 0.0, atol: 0.0 },
        }
    }
}

/// Compares two values; `Err` describes the first mismatch.
///
/// # Errors
/// A message naming the mismatch (dtype, shape, or the worst element).
pub fn compare_values(expected: &Value, actual: &Value, tol: Tolerance) -> Result<(), String> {
    match (expected, actual) {
        (Value::Tensor(e), Value::Tensor(a)) => compare_tensors(e, a, tol),
        (Value::Sequence(_, e), Value::Sequence(_, a)) => {
            if e.len() != a.len() {
                return Err(format!("sequence of {} tensors, expected {}", a.len(), e.len()));
            }
            for (i, (e, a)) in e.iter().zip(a).enumerate() {
                compare_tensors(e, a, tol).map_err(|m| format!("element {i}: {m}"))?;
            }
            Ok(())
        }
        (Value::Empty { .. }, Value::Empty { .. }) => Ok(()),
        (Value::Empty { .. }, _) => Err("a value, expected an empty optional".into()),
        (_, Value::Empty { .. }) => Err("an empty optional, expected a value".into()),
        _ => Err("a tensor and a sequence differ".into()),
    }
}

fn compare_tensors(e: &Tensor, a: &Tensor, tol: Tolerance) -> Result<(), String> {
    if e.dtype() != a.dtype() {
        return Err(format!("dtype {}, expected {}", a.dtype(), e.dtype()));
    }
    if e.shape() != a.shape() {
        return Err(format!("shape {:?}, expected {:?}", a.shape(), e.shape()));
    }
    if e.dtype() == DType::String {
        return if e.strings().ok() == a.strings().ok() {
            Ok(())
        } else {
            Err("strings differ".into())
        };
    }
    let tol = tol.for_dtype(e.dtype());
    let (ev, av) = match (e.to_f64_vec(), a.to_f64_vec()) {
        (Ok(x), Ok(y)) => (x, y),
        _ => return if e == a { Ok(()) } else { Err("values differ".into()) },
    };
    // Exact types compare bits through i64 (f64 would round large int64s).
    if tol.rtol == 0.0 && tol.atol == 0.0 && !e.dtype().is_float() {
        if let (Ok(x), Ok(y)) = (e.to_i64_vec(), a.to_i64_vec()) {
            if let Some(i) = (0..x.len()).find(|&i| x[i] != y[i]) {
                return Err(format!("element {i}: {} vs expected {}", y[i], x[i]));
            }
            return Ok(());
        }
    }
    let mut worst: Option<(usize, f64)> = None;
    for (i, (&x, &y)) in ev.iter().zip(&av).enumerate() {
        let ok = if x.is_nan() || y.is_nan() {
            x.is_nan() && y.is_nan()
        } else if x.is_infinite() || y.is_infinite() {
            x == y
        } else {
            (x - y).abs() <= tol.atol + tol.rtol * x.abs()
        };
        if !ok {
            let err = if x.is_finite() && y.is_finite() { (x - y).abs() } else { f64::INFINITY };
            if worst.is_none_or(|(_, w)| err > w) {
                worst = Some((i, err));
            }
        }
    }
    match worst {
        None => Ok(()),
        Some((i, _)) => {
            let bad = ev.iter().zip(&av).filter(|(x, y)| !close(**x, **y, tol)).count();
            Err(format!(
                "{bad} of {} elements differ; worst at {i}: {} vs expected {} (rtol {}, atol {})",
                ev.len(),
                av[i],
                ev[i],
                tol.rtol,
                tol.atol
            ))
        }
    }
}

fn close(x: f64, y: f64, tol: Tolerance) -> bool {
    if x.is_nan() || y.is_nan() {
        x.is_nan() && y.is_nan()
    } else if x.is_infinite() || y.is_infinite() {
        x == y
    } else {
        (x - y).abs() <= tol.atol + tol.rtol * x.abs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_compare_within_tolerance_and_nan_equals_nan() {
        let e = Value::Tensor(Tensor::from_vec(vec![3], vec![1.0f32, f32::NAN, -2.0]).unwrap());
        let a = Value::Tensor(Tensor::from_vec(vec![3], vec![1.0005f32, f32::NAN, -2.0]).unwrap());
        assert!(compare_values(&e, &a, Tolerance::default()).is_ok());
        let b = Value::Tensor(Tensor::from_vec(vec![3], vec![1.1f32, f32::NAN, -2.0]).unwrap());
        let err = compare_values(&e, &b, Tolerance::default()).unwrap_err();
        assert!(err.contains("1 of 3"), "{err}");
    }

    #[test]
    fn large_int64_values_compare_exactly() {
        let e = Value::Tensor(Tensor::from_vec(vec![1], vec![i64::MAX]).unwrap());
        let a = Value::Tensor(Tensor::from_vec(vec![1], vec![i64::MAX - 1]).unwrap());
        assert!(compare_values(&e, &a, Tolerance::default()).is_err());
    }
}
