//! `Pad`: constant, reflect, edge and wrap padding (negative pads crop).

use super::axes::{axis_of, value_ints};
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::shape::{Dim, Shape};
use crate::tensor::Tensor;

/// How positions outside the input are filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadMode {
    /// A constant value.
    Constant,
    /// The input mirrored at its edges, the edge itself not repeated.
    Reflect,
    /// The edge value repeated.
    Edge,
    /// The input repeated cyclically.
    Wrap,
}

impl PadMode {
    /// The mode's number in the kernels: 0 constant, 1 reflect, 2 edge, 3 wrap.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The input coordinate an output coordinate reads, for a padded
    /// coordinate `c` (output coordinate minus the leading pad) on an axis of
    /// `n`: `None` for constant fill.
    pub fn source(self, c: i64, n: usize) -> Option<usize> {
        let n = n as i64;
        if (0..n).contains(&c) {
            return Some(c as usize);
        }
        if n == 0 {
            return None;
        }
        match self {
            PadMode::Constant => None,
            PadMode::Edge => Some(c.clamp(0, n - 1) as usize),
            PadMode::Wrap => Some(c.rem_euclid(n) as usize),
            PadMode::Reflect if n == 1 => Some(0),
            PadMode::Reflect => {
                let period = 2 * (n - 1);
                let r = c.rem_euclid(period);
                Some(if r < n { r } else { period - r } as usize)
            }
        }
    }
}

/// The pads and fill value of one launch.
#[derive(Debug, Clone, PartialEq)]
pub struct PadLaunch {
    /// `(before, after)` per axis.
    pub pads: Vec<(i64, i64)>,
    /// The fill element's bytes.
    pub fill: Vec<u8>,
}

/// `Pad`. Before opset 11 the pads and the value are attributes; from 11 on
/// they are inputs 1 and 2, and from 18 input 3 names the padded axes.
#[derive(Debug, Clone)]
pub struct Pad {
    /// The fill mode.
    pub mode: PadMode,
    /// Opset < 11: the `pads` and `value` attributes.
    pub attrs: Option<(Vec<i64>, f32)>,
}

impl Pad {
    /// Per-axis `(before, after)` pads for a rank-`rank` input, from the flat
    /// `pads` list (all begins, then all ends) over `axes` (default: all).
    ///
    /// # Errors
    /// [`OpError::Shape`] when the lengths do not match or an axis repeats.
    pub fn resolve(
        rank: usize,
        pads: &[i64],
        axes: Option<&[i64]>,
    ) -> Result<Vec<(i64, i64)>, OpError> {
        let axes: Vec<usize> = match axes {
            Some(a) => a.iter().map(|&v| axis_of(v, rank)).collect::<Result<_, _>>()?,
            None => (0..rank).collect(),
        };
        if pads.len() != 2 * axes.len() {
            return Err(OpError::Shape(format!(
                "{} pads for {} padded axes (need two per axis)",
                pads.len(),
                axes.len()
            )));
        }
        let mut out = vec![(0, 0); rank];
        let mut seen = vec![false; rank];
        for (i, &a) in axes.iter().enumerate() {
            if std::mem::replace(&mut seen[a], true) {
                return Err(OpError::Shape(format!("axis {a} is padded twice")));
            }
            out[a] = (pads[i], pads[i + axes.len()]);
        }
        Ok(out)
    }

    /// Output dims of a padded input.
    ///
    /// # Errors
    /// [`OpError::Shape`] when cropping makes a dim negative.
    pub fn output_dims(dims: &[usize], pads: &[(i64, i64)]) -> Result<Vec<usize>, OpError> {
        dims.iter()
            .zip(pads)
            .map(|(&d, &(b, e))| {
                usize::try_from(d as i64 + b + e).map_err(|_| {
                    OpError::Shape(format!("pads ({b}, {e}) crop a dim of {d} below 0"))
                })
            })
            .collect()
    }

    /// Resolves one launch from the host values of the `pads`, `axes` and
    /// `constant_value` inputs (ignored before opset 11, where attributes hold them).
    ///
    /// # Errors
    /// [`OpError::Shape`] for malformed pads, axes or constant.
    pub fn launch(
        &self,
        rank: usize,
        dtype: DType,
        pads: Option<&[i64]>,
        axes: Option<&[i64]>,
        constant: Option<&Tensor>,
    ) -> Result<PadLaunch, OpError> {
        let (pads, constant) = match &self.attrs {
            Some((pads, _)) => (Pad::resolve(rank, pads, None)?, None),
            None => {
                let pads = pads.ok_or_else(|| OpError::Shape("Pad needs its pads input".into()))?;
                (Pad::resolve(rank, pads, axes)?, constant)
            }
        };
        Ok(PadLaunch { pads, fill: self.fill(dtype, constant)? })
    }

    /// The fill value's bytes in `dtype`: the constant input when given, the
    /// `value` attribute before opset 11, else zero.
    ///
    /// # Errors
    /// [`OpError::Shape`] for a constant of another dtype or more than one element.
    pub fn fill(&self, dtype: DType, constant: Option<&Tensor>) -> Result<Vec<u8>, OpError> {
        let width = dtype.byte_size(1).unwrap_or(0);
        if let Some(t) = constant {
            if t.dtype() != dtype || t.numel() > 1 {
                return Err(OpError::Shape(format!(
                    "Pad constant_value must be one {dtype} element, not {} {:?}",
                    t.dtype(),
                    t.shape()
                )));
            }
            let bytes = t.bytes().map_err(|e| OpError::Shape(e.to_string()))?;
            if t.numel() == 1 {
                return Ok(bytes.to_vec());
            }
        }
        let value = self.attrs.as_ref().map_or(0.0, |a| a.1);
        Ok(match dtype {
            DType::F32 => value.to_le_bytes().to_vec(),
            DType::F64 => (value as f64).to_le_bytes().to_vec(),
            DType::F16 => half::f16::from_f32(value).to_le_bytes().to_vec(),
            DType::BF16 => half::bf16::from_f32(value).to_le_bytes().to_vec(),
            _ => vec![0; width],
        })
    }
}

impl Op for Pad {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let unknown = || match x.rank() {
            Some(r) => Fact::ranked(x.dtype, r),
            None => Fact::unranked(x.dtype),
        };
        if let Some(c) = inputs.opt(2) {
            if c.dtype != x.dtype {
                return Err(OpError::InputDType {
                    index: 2,
                    dtype: c.dtype,
                    expected: format!("the data's {}", x.dtype),
                });
            }
        }
        let (pads, axes) = match &self.attrs {
            Some((pads, _)) => (Some(pads.clone()), None),
            None => {
                let axes = match inputs.opt(3) {
                    Some(f) => match value_ints(f, 3)? {
                        Some(a) => Some(a),
                        None => return Ok(vec![unknown()]),
                    },
                    None => None,
                };
                (value_ints(inputs.get(1)?, 1)?, axes)
            }
        };
        let (Some(pads), Some(s)) = (pads, &x.shape) else { return Ok(vec![unknown()]) };
        let resolved = Pad::resolve(s.rank(), &pads, axes.as_deref())?;
        let out =
            s.0.iter()
                .zip(&resolved)
                .map(|(d, &(b, e))| match d {
                    _ if b == 0 && e == 0 => Ok(d.clone()),
                    Dim::Known(n) => Pad::output_dims(&[*n], &[(b, e)]).map(|v| Dim::Known(v[0])),
                    _ => Ok(Dim::Unknown),
                })
                .collect::<Result<Vec<_>, _>>()?;
        Ok(vec![Fact::new(x.dtype, Shape(out))])
    }

    fn value_inputs(&self) -> Vec<usize> {
        if self.attrs.is_some() { vec![] } else { vec![1, 2, 3] }
    }
}

/// Registers Pad.
pub fn register_all(r: &mut OpRegistry) {
    r.register("Pad", |n| {
        let mode = match n.attrs.string_or("mode", "constant".into())?.as_str() {
            "constant" => PadMode::Constant,
            "reflect" => PadMode::Reflect,
            "edge" => PadMode::Edge,
            "wrap" if n.opset >= 19 => PadMode::Wrap,
            other => {
                return Err(OpError::BadAttribute {
                    name: "mode".into(),
                    reason: format!("unknown pad mode '{other}'"),
                });
            }
        };
        if n.opset < 11 {
            check_inputs(n, 1, 1)?;
            let pads = n.attrs.req_ints("pads")?;
            Ok(Box::new(Pad { mode, attrs: Some((pads, n.attrs.float_or("value", 0.0)?)) }))
        } else {
            check_inputs(n, 2, 4)?;
            Ok(Box::new(Pad { mode, attrs: None }))
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_modes_map_outside_coordinates_like_numpy() {
        // numpy.pad([0, 1, 2, 3], 3, mode) read back as source indices.
        let src = |m: PadMode| (-3..7).map(|c| m.source(c, 4)).collect::<Vec<_>>();
        let s = |v: &[usize]| v.iter().map(|&x| Some(x)).collect::<Vec<_>>();
        assert_eq!(src(PadMode::Reflect), s(&[3, 2, 1, 0, 1, 2, 3, 2, 1, 0]));
        assert_eq!(src(PadMode::Edge), s(&[0, 0, 0, 0, 1, 2, 3, 3, 3, 3]));
        assert_eq!(src(PadMode::Wrap), s(&[1, 2, 3, 0, 1, 2, 3, 0, 1, 2]));
        assert_eq!(PadMode::Constant.source(-1, 4), None);
        assert_eq!(PadMode::Reflect.source(-2, 1), Some(0));
    }

    #[test]
    fn pads_over_chosen_axes_leave_the_others_alone() {
        let r = Pad::resolve(3, &[1, -1, 2, 0], Some(&[0, -1])).unwrap();
        assert_eq!(r, vec![(1, 2), (0, 0), (-1, 0)]);
        assert_eq!(Pad::output_dims(&[2, 3, 4], &r).unwrap(), vec![5, 3, 3]);
        assert!(Pad::output_dims(&[1], &[(-1, -1)]).is_err());
        assert!(Pad::resolve(2, &[1, 1, 1], None).is_err());
    }
}
