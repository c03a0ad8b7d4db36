//! Signal processing: the window generators (HannWindow, HammingWindow,
//! BlackmanWindow), MelWeightMatrix, DFT and STFT. Complex tensors are real
//! tensors with a trailing dim of 2 (real, imaginary); real signals may
//! instead have a trailing 1.

use super::axes::{axis_of, value_ints};
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::Node;
use crate::shape::{Dim, Shape};

/// The window shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// `sin²(πn/N)`.
    Hann,
    /// `α − (1 − α)·cos(2πn/N)`, `α = 25/46`.
    Hamming,
    /// `0.42 − 0.5·cos(2πn/N) + 0.08·cos(4πn/N)`.
    Blackman,
}

/// A window generator: `size` (input 0) values of `dtype`.
#[derive(Debug, Clone)]
pub struct WindowFn {
    /// The shape.
    pub kind: WindowKind,
    /// Output dtype (default float).
    pub dtype: DType,
    /// Periodic (`N = size`, default) or symmetric (`N = size − 1`).
    pub periodic: bool,
}

impl WindowFn {
    /// The window values.
    pub fn values(&self, size: usize) -> Vec<f64> {
        let n = if self.periodic { size as f64 } else { size as f64 - 1.0 };
        let tau = std::f64::consts::TAU;
        (0..size)
            .map(|i| {
                let i = i as f64;
                match self.kind {
                    WindowKind::Hann => (std::f64::consts::PI * i / n).sin().powi(2),
                    WindowKind::Hamming => {
                        let alpha = 25.0 / 46.0;
                        alpha - (tau * i / n).cos() * (1.0 - alpha)
                    }
                    WindowKind::Blackman => {
                        0.42 - 0.5 * (tau * i / n).cos() + 0.08 * (2.0 * tau * i / n).cos()
                    }
                }
            })
            .collect()
    }
}

/// A single non-negative count from a known scalar value.
fn count(v: &[i64], what: &str) -> Result<usize, OpError> {
    match v {
        [n] if *n >= 0 => Ok(*n as usize),
        _ => Err(OpError::Shape(format!("{what} {v:?} is not a non-negative scalar"))),
    }
}

impl Op for WindowFn {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        Ok(vec![match value_ints(inputs.get(0)?, 0)? {
            Some(v) => Fact::known(self.dtype, &[count(&v, "window size")?]),
            None => Fact::ranked(self.dtype, 1),
        }])
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![0]
    }
}

/// `MelWeightMatrix`: `[dft_length / 2 + 1, num_mel_bins]` triangular filters.
#[derive(Debug, Clone)]
pub struct MelWeightMatrix {
    /// Output dtype (default float).
    pub dtype: DType,
}

impl Op for MelWeightMatrix {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let bins = value_ints(inputs.get(0)?, 0)?;
        let dft = value_ints(inputs.get(1)?, 1)?;
        Ok(vec![match (bins, dft) {
            (Some(b), Some(d)) => Fact::known(
                self.dtype,
                &[count(&d, "dft_length")? / 2 + 1, count(&b, "num_mel_bins")?],
            ),
            _ => Fact::ranked(self.dtype, 2),
        }])
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![0, 1]
    }
}

/// `DFT` along one axis of a real (`…×1`) or complex (`…×2`) signal.
#[derive(Debug, Clone)]
pub struct Dft {
    /// The axis from the attribute (opset < 20); later opsets take input 2 (default −2).
    pub axis_attr: Option<i64>,
    /// Inverse transform (normalized by 1/n).
    pub inverse: bool,
    /// Forward: keep `n/2 + 1` bins; inverse: the input is such a half spectrum of a real signal.
    pub onesided: bool,
}

/// A DFT resolved against concrete input dims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DftPlan {
    /// The transformed axis.
    pub axis: usize,
    /// The transform length.
    pub length: usize,
    /// Output length along the axis.
    pub out_len: usize,
    /// Output components: 2 (complex) or 1 (the real result of a one-sided inverse).
    pub out_components: usize,
}

impl Dft {
    /// Resolves the axis and lengths for input dims, given the values of
    /// `dft_length` and `axis` (inputs 1 and 2) when present.
    ///
    /// # Errors
    /// [`OpError::Shape`] for a bad axis, length or trailing dim.
    pub fn plan(
        &self,
        dims: &[usize],
        length: Option<&[i64]>,
        axis: Option<&[i64]>,
    ) -> Result<DftPlan, OpError> {
        let r = dims.len();
        if r < 2 || !matches!(dims[r - 1], 1 | 2) {
            return Err(OpError::Shape(format!("DFT input {dims:?} must end in 1 or 2")));
        }
        let a = match (self.axis_attr, axis) {
            (Some(a), _) => a,
            (None, Some([a])) => *a,
            (None, Some(v)) => {
                return Err(OpError::Shape(format!("DFT axis {v:?} is not a scalar")));
            }
            (None, None) => -2,
        };
        let axis = axis_of(a, r)?;
        if axis == r - 1 {
            return Err(OpError::Shape("DFT cannot transform the component axis".into()));
        }
        let n = dims[axis];
        let length = match length {
            Some(v) => count(v, "dft_length")?,
            None if self.inverse && self.onesided => 2 * n.saturating_sub(1),
            None => n,
        };
        if length == 0 {
            return Err(OpError::Shape("DFT length must be positive".into()));
        }
        let (out_len, out_components) = match (self.inverse, self.onesided) {
            (false, true) => (length / 2 + 1, 2),
            (true, true) => (length, 1),
            _ => (length, 2),
        };
        Ok(DftPlan { axis, length, out_len, out_components })
    }
}

impl Op for Dft {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let length = inputs.opt(1).map(|f| value_ints(f, 1)).transpose()?;
        let axis = if self.axis_attr.is_none() {
            inputs.opt(2).map(|f| value_ints(f, 2)).transpose()?
        } else {
            None
        };
        let unknown = matches!(length, Some(None)) || matches!(axis, Some(None));
        match x.dims() {
            Some(d) if !unknown => {
                let p = self.plan(&d, length.flatten().as_deref(), axis.flatten().as_deref())?;
                let mut out = d.clone();
                out[p.axis] = p.out_len;
                *out.last_mut().unwrap_or(&mut 0) = p.out_components;
                Ok(vec![Fact::known(x.dtype, &out)])
            }
            _ => Ok(vec![x.rank().map_or(Fact::unranked(x.dtype), |r| Fact::ranked(x.dtype, r))]),
        }
    }

    fn value_inputs(&self) -> Vec<usize> {
        if self.axis_attr.is_some() { vec![1] } else { vec![1, 2] }
    }
}

/// `STFT` of signals `[batch, length, 1 or 2]` into `[batch, frames, bins, 2]`.
#[derive(Debug, Clone)]
pub struct Stft {
    /// Keep `frame_length / 2 + 1` bins (default).
    pub onesided: bool,
}

/// An STFT resolved against concrete dims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StftPlan {
    /// Samples between frame starts.
    pub step: usize,
    /// Samples per frame (the transform length).
    pub frame: usize,
    /// Number of frames.
    pub frames: usize,
    /// Output bins per frame.
    pub bins: usize,
}

impl Stft {
    /// Resolves the framing for a signal of `dims`, the frame step, the
    /// window length (if a window is given) and `frame_length` (if given).
    ///
    /// # Errors
    /// [`OpError::Shape`] when the values do not describe at least one frame.
    pub fn plan(
        &self,
        dims: &[usize],
        step: &[i64],
        window: Option<usize>,
        frame: Option<&[i64]>,
    ) -> Result<StftPlan, OpError> {
        let [_, len, 1 | 2] = dims[..] else {
            return Err(OpError::Shape(format!(
                "STFT signal {dims:?} is not [batch, length, 1|2]"
            )));
        };
        let step = count(step, "frame_step")?;
        let frame = match (frame, window) {
            (Some(f), _) => count(f, "frame_length")?,
            (None, Some(w)) => w,
            (None, None) => len,
        };
        if step == 0 || frame == 0 || frame > len || window.is_some_and(|w| w != frame) {
            return Err(OpError::Shape(format!(
                "STFT frames of {frame} (window {window:?}) every {step} over {len} samples"
            )));
        }
        let bins = if self.onesided { frame / 2 + 1 } else { frame };
        Ok(StftPlan { step, frame, frames: 1 + (len - frame) / step, bins })
    }
}

impl Op for Stft {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let unknown = || {
            let dims = vec![x.dim(0), Dim::Unknown, Dim::Unknown, Dim::Known(2)];
            Ok(vec![Fact::new(x.dtype, Shape(dims))])
        };
        let (Some(d), Some(step)) = (x.dims(), value_ints(inputs.get(1)?, 1)?) else {
            return unknown();
        };
        let window = match inputs.opt(2).map(Fact::dims) {
            None => None,
            Some(Some(w)) if w.len() == 1 => Some(w[0]),
            Some(Some(w)) => return Err(OpError::Shape(format!("STFT window {w:?} is not 1-D"))),
            Some(None) => return unknown(),
        };
        let frame = match inputs.opt(3).map(|f| value_ints(f, 3)).transpose()? {
            None => None,
            Some(Some(v)) => Some(v),
            Some(None) => return unknown(),
        };
        let p = self.plan(&d, &step, window, frame.as_deref())?;
        Ok(vec![Fact::known(x.dtype, &[d[0], p.frames, p.bins, 2])])
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![1, 3]
    }
}

fn out_dtype(n: &Node) -> Result<DType, OpError> {
    let code = n.attrs.int_or("output_datatype", 1)?;
    DType::from_onnx(code as i32).ok_or_else(|| OpError::BadAttribute {
        name: "output_datatype".into(),
        reason: format!("{code} is not a data type"),
    })
}

/// Registers the family.
pub fn register_all(r: &mut OpRegistry) {
    for (name, kind) in [
        ("HannWindow", WindowKind::Hann),
        ("HammingWindow", WindowKind::Hamming),
        ("BlackmanWindow", WindowKind::Blackman),
    ] {
        r.register(name, move |n| {
            check_inputs(n, 1, 1)?;
            let periodic = n.attrs.flag_or("periodic", true)?;
            Ok(Box::new(WindowFn { kind, dtype: out_dtype(n)?, periodic }))
        });
    }
    r.register("MelWeightMatrix", |n| {
        check_inputs(n, 5, 5)?;
        Ok(Box::new(MelWeightMatrix { dtype: out_dtype(n)? }))
    });
    r.register("DFT", |n| {
        check_inputs(n, 1, 3)?;
        let axis_attr = if n.opset < 20 { Some(n.attrs.int_or("axis", 1)?) } else { None };
        Ok(Box::new(Dft {
            axis_attr,
            inverse: n.attrs.flag_or("inverse", false)?,
            onesided: n.attrs.flag_or("onesided", false)?,
        }))
    });
    r.register("STFT", |n| {
        check_inputs(n, 2, 4)?;
        Ok(Box::new(Stft { onesided: n.attrs.flag_or("onesided", true)? }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_windows_end_where_they_start() {
        let w = WindowFn { kind: WindowKind::Hann, dtype: DType::F32, periodic: false }.values(5);
        assert!((w[0] - w[4]).abs() < 1e-12 && (w[2] - 1.0).abs() < 1e-12);
        let w = WindowFn { kind: WindowKind::Hamming, dtype: DType::F32, periodic: true }.values(4);
        assert!((w[0] - (25.0 / 46.0 - 21.0 / 46.0)).abs() < 1e-12);
    }

    #[test]
    fn dft_plans_follow_onesided_and_inverse() {
        let d = Dft { axis_attr: None, inverse: false, onesided: true };
        let p = d.plan(&[1, 10, 10, 1], None, Some(&[1])).unwrap();
        assert_eq!((p.axis, p.length, p.out_len, p.out_components), (1, 10, 6, 2));
        let d = Dft { axis_attr: Some(1), inverse: true, onesided: true };
        let p = d.plan(&[1, 6, 10, 2], None, None).unwrap();
        assert_eq!((p.length, p.out_len, p.out_components), (10, 10, 1));
        assert!(d.plan(&[1, 6, 10, 3], None, None).is_err());
    }

    #[test]
    fn stft_counts_whole_frames() {
        let s = Stft { onesided: true };
        let p = s.plan(&[1, 128, 1], &[8], None, Some(&[16])).unwrap();
        assert_eq!((p.frames, p.bins), (15, 9));
        assert!(s.plan(&[1, 128, 1], &[8], Some(12), Some(&[16])).is_err());
    }
}
