//! `Resize` (and the older `Upsample`): nearest, linear and cubic
//! interpolation with every coordinate transformation, antialiasing, axes and
//! aspect-ratio policies.
//!
//! Interpolation is separable, so the op is planned on the host as one small
//! table per axis: for each output coordinate, `taps` input indices with
//! their weights (and whether the coordinate falls outside the crop box).
//! A backend then computes each output element as the tensor product of its
//! axes' taps. The tables follow the ONNX reference implementation
//! (`onnx.reference.ops.op_resize`) point for point.

use super::{Fact, InferInputs, Op, OpRegistry};
use crate::error::OpError;
use crate::graph::Node;
use crate::shape::{Dim, Shape};

/// How values between samples are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeMode {
    /// The nearest input sample.
    Nearest,
    /// (Multi)linear interpolation.
    Linear,
    /// Cubic convolution with coefficient `a`.
    Cubic,
}

/// How an output coordinate maps back to an input coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordinateMode {
    /// `(x + 0.5) / scale - 0.5`.
    HalfPixel,
    /// Half-pixel, centred when the output size was rounded.
    HalfPixelSymmetric,
    /// Half-pixel, except 0 for a one-element output (PyTorch).
    PytorchHalfPixel,
    /// Corners of input and output aligned.
    AlignCorners,
    /// `x / scale`.
    Asymmetric,
    /// Crop to the `roi` box, then resize; outside the input is extrapolated.
    TfCropAndResize,
}

/// How `Nearest` rounds a fractional coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NearestMode {
    /// Round, halves down.
    RoundPreferFloor,
    /// Round, halves up.
    RoundPreferCeil,
    /// Floor.
    Floor,
    /// Ceil.
    Ceil,
    /// Resize-10 and Upsample: floor when upsampling an axis, ceil when downsampling.
    Simple,
}

/// How `sizes` is honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AspectPolicy {
    /// Each axis gets its size.
    Stretch,
    /// One scale for all axes, the largest that fits inside the sizes.
    NotLarger,
    /// One scale for all axes, the smallest that covers the sizes.
    NotSmaller,
}

/// `Resize` / `Upsample` with its attributes and where its inputs are.
#[derive(Debug, Clone)]
pub struct Resize {
    /// Interpolation.
    pub mode: ResizeMode,
    /// Coordinate transformation.
    pub coordinate: CoordinateMode,
    /// Nearest rounding.
    pub nearest: NearestMode,
    /// The cubic coefficient `a`.
    pub cubic_a: f64,
    /// Give taps outside the input zero weight (and renormalize).
    pub exclude_outside: bool,
    /// The value of outputs outside the crop box (`TfCropAndResize`).
    pub extrapolation: f32,
    /// Widen the kernel when downsampling (linear and cubic).
    pub antialias: bool,
    /// The axes that `roi`, `scales` and `sizes` refer to (default: all).
    pub axes: Option<Vec<i64>>,
    /// How `sizes` is honoured.
    pub policy: AspectPolicy,
    /// Input slots of `roi`, `scales` and `sizes`.
    pub slots: [Option<usize>; 3],
    /// Upsample-7: scales as an attribute.
    pub scales_attr: Option<Vec<f32>>,
}

/// One axis of a [`ResizePlan`]: `taps` input indices and weights per output
/// coordinate (`index[c * taps + t]`), and which coordinates are outside the crop box.
#[derive(Debug, Clone, PartialEq)]
pub struct AxisTaps {
    /// Taps per output coordinate.
    pub taps: usize,
    /// Input indices, clamped into the axis.
    pub index: Vec<u32>,
    /// Weights.
    pub weight: Vec<f32>,
    /// Output coordinates that take the extrapolation value.
    pub outside: Vec<bool>,
}

/// A resize planned for concrete dims.
#[derive(Debug, Clone, PartialEq)]
pub struct ResizePlan {
    /// Output dims.
    pub output: Vec<usize>,
    /// Per-axis taps.
    pub axes: Vec<AxisTaps>,
}

/// The values of `roi`, `scales` and `sizes` for one launch (empty tensors count as absent).
#[derive(Debug, Clone, Default)]
pub struct ResizeArgs {
    /// `roi`: all starts, then all ends.
    pub roi: Option<Vec<f64>>,
    /// `scales`.
    pub scales: Option<Vec<f64>>,
    /// `sizes`.
    pub sizes: Option<Vec<i64>>,
}

fn bad(msg: String) -> OpError {
    OpError::Shape(msg)
}

/// Per-axis scales, output dims and crop boxes `(start, end)`.
struct Geometry {
    scales: Vec<f64>,
    output: Vec<usize>,
    roi: Vec<(f64, f64)>,
}

impl Resize {
    /// Per-axis scales and output dims, and the crop box per axis.
    fn geometry(&self, dims: &[usize], args: &ResizeArgs) -> Result<Geometry, OpError> {
        let r = dims.len();
        let axes: Vec<usize> = match &self.axes {
            Some(a) => a.iter().map(|&v| super::axes::axis_of(v, r)).collect::<Result<_, _>>()?,
            None => (0..r).collect(),
        };
        let n = axes.len();
        let mut roi = vec![(0.0, 1.0); r];
        if let Some(v) = &args.roi {
            if self.coordinate == CoordinateMode::TfCropAndResize {
                if v.len() != 2 * n {
                    return Err(bad(format!("roi has {} values for {n} axes", v.len())));
                }
                for (i, &a) in axes.iter().enumerate() {
                    roi[a] = (v[i], v[n + i]);
                }
            }
        }
        let scales_attr = self.scales_attr.as_ref().map(|v| v.iter().map(|&x| x as f64).collect());
        let scales = args.scales.clone().or(scales_attr);
        if let Some(sizes) = &args.sizes {
            if scales.is_some() {
                return Err(bad("Resize takes scales or sizes, not both".into()));
            }
            if sizes.len() != n || sizes.iter().any(|&s| s < 0) {
                return Err(bad(format!("sizes {sizes:?} do not fit {n} axes")));
            }
            let mut scale = vec![1.0; r];
            let mut out = dims.to_vec();
            for (i, &a) in axes.iter().enumerate() {
                scale[a] = sizes[i] as f64 / dims[a] as f64;
                out[a] = sizes[i] as usize;
            }
            if self.policy != AspectPolicy::Stretch {
                let pick = axes.iter().map(|&a| scale[a]);
                let s = if self.policy == AspectPolicy::NotLarger {
                    pick.fold(f64::INFINITY, f64::min)
                } else {
                    pick.fold(f64::NEG_INFINITY, f64::max)
                };
                for &a in &axes {
                    scale[a] = s;
                    out[a] = (s * dims[a] as f64 + 0.5) as usize;
                }
            }
            return Ok(Geometry { scales: scale, output: out, roi });
        }
        let Some(scales) = scales else {
            return Err(bad("Resize needs scales or sizes".into()));
        };
        if scales.len() != n || scales.iter().any(|&s| s.is_nan() || s <= 0.0) {
            return Err(bad(format!("scales {scales:?} do not fit {n} axes")));
        }
        let mut scale = vec![1.0; r];
        let mut out = dims.to_vec();
        for (i, &a) in axes.iter().enumerate() {
            scale[a] = scales[i];
            out[a] = (scales[i] * dims[a] as f64) as usize;
        }
        Ok(Geometry { scales: scale, output: out, roi })
    }

    /// Output dims for concrete input dims.
    ///
    /// # Errors
    /// [`OpError::Shape`] for inconsistent scales, sizes or roi.
    pub fn output_dims(&self, dims: &[usize], args: &ResizeArgs) -> Result<Vec<usize>, OpError> {
        Ok(self.geometry(dims, args)?.output)
    }

    /// The per-axis tap tables for concrete input dims.
    ///
    /// # Errors
    /// [`OpError::Shape`] for inconsistent scales, sizes or roi.
    pub fn plan(&self, dims: &[usize], args: &ResizeArgs) -> Result<ResizePlan, OpError> {
        let Geometry { scales, output: out, roi } = self.geometry(dims, args)?;
        let axes = (0..dims.len())
            .map(|a| {
                let identity = (scales[a] - 1.0).abs() < 1e-9
                    && out[a] == dims[a]
                    && (roi[a].0.abs() < 1e-9 && (roi[a].1 - 1.0).abs() < 1e-9);
                if identity {
                    return AxisTaps {
                        taps: 1,
                        index: (0..out[a] as u32).collect(),
                        weight: vec![1.0; out[a]],
                        outside: vec![false; out[a]],
                    };
                }
                self.axis_taps(dims[a], out[a], scales[a], roi[a])
            })
            .collect();
        Ok(ResizePlan { output: out, axes })
    }

    /// The input coordinate of output coordinate `y`, and whether it is outside the crop box.
    fn source(
        &self,
        y: f64,
        input: usize,
        output: usize,
        scale: f64,
        roi: (f64, f64),
    ) -> (f64, bool) {
        let (inw, outw) = (input as f64, scale * input as f64);
        match self.coordinate {
            CoordinateMode::AlignCorners if outw == 1.0 => (0.0, false),
            CoordinateMode::AlignCorners => (y * (inw - 1.0) / (outw - 1.0), false),
            CoordinateMode::Asymmetric => (y / scale, false),
            CoordinateMode::TfCropAndResize => {
                let x = if outw == 1.0 {
                    (roi.1 - roi.0) * (inw - 1.0) / 2.0
                } else {
                    y * (roi.1 - roi.0) * (inw - 1.0) / (outw - 1.0)
                } + roi.0 * (inw - 1.0);
                (x, x < 0.0 || x > inw - 1.0)
            }
            CoordinateMode::PytorchHalfPixel if outw == 1.0 => (-0.5, false),
            CoordinateMode::PytorchHalfPixel | CoordinateMode::HalfPixel => {
                ((y + 0.5) / scale - 0.5, false)
            }
            CoordinateMode::HalfPixelSymmetric => {
                let adjustment = output as f64 / outw;
                let offset = inw / 2.0 * (1.0 - adjustment);
                (offset + (y + 0.5) / scale - 0.5, false)
            }
        }
    }

    /// The interpolation coefficients at fractional position `ratio` (in (0, 1]).
    fn coeffs(&self, ratio: f64, scale: f64) -> Vec<f64> {
        match self.mode {
            ResizeMode::Nearest => {
                let second = match self.nearest {
                    _ if ratio == 1.0 => true,
                    NearestMode::RoundPreferFloor => ratio > 0.5,
                    NearestMode::RoundPreferCeil => ratio >= 0.5,
                    NearestMode::Floor => false,
                    NearestMode::Ceil => true,
                    NearestMode::Simple => scale < 1.0,
                };
                if second { vec![0.0, 1.0] } else { vec![1.0, 0.0] }
            }
            ResizeMode::Linear if self.antialias => {
                let s = scale.min(1.0);
                let start = (-1.0 / s).floor() as i64 + 1;
                let c: Vec<f64> = (start..start + 2 - 2 * start)
                    .map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0))
                    .collect();
                let sum: f64 = c.iter().sum();
                c.into_iter().map(|v| v / sum).collect()
            }
            ResizeMode::Linear => vec![1.0 - ratio, ratio],
            ResizeMode::Cubic if self.antialias => {
                let (s, a) = (scale.min(1.0), self.cubic_a);
                let k = |x: f64| {
                    let x = x.abs();
                    if x <= 1.0 {
                        (a + 2.0) * x * x * x - (a + 3.0) * x * x + 1.0
                    } else if x < 2.0 {
                        a * x * x * x - 5.0 * a * x * x + 8.0 * a * x - 4.0 * a
                    } else {
                        0.0
                    }
                };
                let start = (-2.0 / s).floor() as i64 + 1;
                let c: Vec<f64> = (start..2 - start).map(|i| k(s * (i as f64 - ratio))).collect();
                let sum: f64 = c.iter().sum();
                c.into_iter().map(|v| v / sum).collect()
            }
            ResizeMode::Cubic => {
                let (a, r, q) = (self.cubic_a, ratio, 1.0 - ratio);
                vec![
                    ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
                    ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
                    ((a + 2.0) * q - (a + 3.0)) * q * q + 1.0,
                    ((a * (q + 1.0) - 5.0 * a) * (q + 1.0) + 8.0 * a) * (q + 1.0) - 4.0 * a,
                ]
            }
        }
    }

    fn axis_taps(&self, input: usize, output: usize, scale: f64, roi: (f64, f64)) -> AxisTaps {
        let mut t =
            AxisTaps { taps: 0, index: Vec::new(), weight: Vec::new(), outside: Vec::new() };
        for y in 0..output {
            let (x, outside) = self.source(y as f64, input, output, scale, roi);
            let base = x.floor();
            let ratio = if x == base { 1.0 } else { x - base };
            let mut c = self.coeffs(ratio, scale);
            let n = c.len() as i64;
            // The n samples nearest to x, ties to the left (n is even).
            let start = base as i64 - n / 2 + if x == base { 0 } else { 1 };
            let idx: Vec<i64> = (start..start + n).collect();
            if self.exclude_outside {
                for (w, &i) in c.iter_mut().zip(&idx) {
                    if i < 0 || i >= input as i64 {
                        *w = 0.0;
                    }
                }
                let sum: f64 = c.iter().sum();
                if sum != 0.0 {
                    c.iter_mut().for_each(|w| *w /= sum);
                }
            }
            t.taps = c.len();
            t.index.extend(idx.iter().map(|&i| i.clamp(0, input as i64 - 1).max(0) as u32));
            t.weight.extend(c.iter().map(|&w| w as f32));
            t.outside.push(outside);
        }
        t
    }

    /// The launch's `roi`, `scales` and `sizes` from their host values.
    pub fn args(
        &self,
        floats: impl Fn(usize) -> Option<Vec<f64>>,
        ints: impl Fn(usize) -> Option<Vec<i64>>,
    ) -> ResizeArgs {
        let nonempty = |v: Option<Vec<f64>>| v.filter(|v| !v.is_empty());
        ResizeArgs {
            roi: nonempty(self.slots[0].and_then(&floats)),
            scales: nonempty(self.slots[1].and_then(&floats)),
            sizes: self.slots[2].and_then(ints).filter(|v| !v.is_empty()),
        }
    }
}

impl Op for Resize {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let unknown = || match x.rank() {
            Some(r) => Fact::ranked(x.dtype, r),
            None => Fact::unranked(x.dtype),
        };
        // Every present value input must be known on the host to size the output.
        let known =
            self.slots.iter().flatten().all(|&i| inputs.opt(i).is_none_or(|f| f.value.is_some()));
        let Some(dims) = x.dims() else { return Ok(vec![unknown()]) };
        if !known {
            return Ok(vec![unknown()]);
        }
        let args = self
            .args(|i| inputs.opt(i).and_then(Fact::floats), |i| inputs.opt(i).and_then(Fact::ints));
        let out = self.output_dims(&dims, &args)?;
        Ok(vec![Fact::new(x.dtype, Shape(out.into_iter().map(Dim::Known).collect()))])
    }

    fn value_inputs(&self) -> Vec<usize> {
        self.slots.iter().flatten().copied().collect()
    }
}

fn parse(n: &Node, upsample: bool) -> Result<Resize, OpError> {
    let a = &n.attrs;
    let legacy = upsample || n.opset < 11;
    let mode = match a.string_or("mode", "nearest".into())?.as_str() {
        "nearest" => ResizeMode::Nearest,
        "linear" | "bilinear" => ResizeMode::Linear,
        "cubic" if !legacy => ResizeMode::Cubic,
        other => {
            return Err(OpError::BadAttribute {
                name: "mode".into(),
                reason: format!("'{other}'"),
            });
        }
    };
    let coordinate = if legacy {
        CoordinateMode::Asymmetric
    } else {
        match a.string_or("coordinate_transformation_mode", "half_pixel".into())?.as_str() {
            "half_pixel" => CoordinateMode::HalfPixel,
            "half_pixel_symmetric" => CoordinateMode::HalfPixelSymmetric,
            "pytorch_half_pixel" => CoordinateMode::PytorchHalfPixel,
            "align_corners" => CoordinateMode::AlignCorners,
            "asymmetric" => CoordinateMode::Asymmetric,
            "tf_crop_and_resize" => CoordinateMode::TfCropAndResize,
            other => {
                return Err(OpError::BadAttribute {
                    name: "coordinate_transformation_mode".into(),
                    reason: format!("'{other}'"),
                });
            }
        }
    };
    let nearest = if legacy {
        NearestMode::Simple
    } else {
        match a.string_or("nearest_mode", "round_prefer_floor".into())?.as_str() {
            "round_prefer_floor" => NearestMode::RoundPreferFloor,
            "round_prefer_ceil" => NearestMode::RoundPreferCeil,
            "floor" => NearestMode::Floor,
            "ceil" => NearestMode::Ceil,
            other => {
                return Err(OpError::BadAttribute {
                    name: "nearest_mode".into(),
                    reason: format!("'{other}'"),
                });
            }
        }
    };
    let policy = match a.string_or("keep_aspect_ratio_policy", "stretch".into())?.as_str() {
        "stretch" => AspectPolicy::Stretch,
        "not_larger" => AspectPolicy::NotLarger,
        "not_smaller" => AspectPolicy::NotSmaller,
        other => {
            return Err(OpError::BadAttribute {
                name: "keep_aspect_ratio_policy".into(),
                reason: format!("'{other}'"),
            });
        }
    };
    let (slots, scales_attr) = match (upsample, n.opset) {
        (true, v) if v < 9 => ([None, None, None], Some(a.req_floats("scales")?)),
        (true, _) | (false, 10) => ([None, Some(1), None], None),
        _ => ([Some(1), Some(2), Some(3)], None),
    };
    let max = slots.iter().flatten().max().map_or(1, |m| m + 1);
    super::check_inputs(n, 1, max)?;
    Ok(Resize {
        mode,
        coordinate,
        nearest,
        cubic_a: a.float_or("cubic_coeff_a", -0.75)? as f64,
        exclude_outside: a.flag_or("exclude_outside", false)?,
        extrapolation: a.float_or("extrapolation_value", 0.0)?,
        antialias: a.flag_or("antialias", false)?,
        axes: a.ints("axes")?,
        policy,
        slots,
        scales_attr,
    })
}

/// Registers Resize and Upsample.
pub fn register_all(r: &mut OpRegistry) {
    r.register("Resize", |n| Ok(Box::new(parse(n, false)?)));
    r.register("Upsample", |n| Ok(Box::new(parse(n, true)?)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn linear(coordinate: CoordinateMode) -> Resize {
        Resize {
            mode: ResizeMode::Linear,
            coordinate,
            nearest: NearestMode::RoundPreferFloor,
            cubic_a: -0.75,
            exclude_outside: false,
            extrapolation: 0.0,
            antialias: false,
            axes: None,
            policy: AspectPolicy::Stretch,
            slots: [Some(1), Some(2), Some(3)],
            scales_attr: None,
        }
    }

    #[test]
    fn half_pixel_upsampling_by_two_blends_neighbours_a_quarter_apart() {
        let r = linear(CoordinateMode::HalfPixel);
        let args = ResizeArgs { scales: Some(vec![2.0]), ..Default::default() };
        let p = r.plan(&[2], &args).unwrap();
        assert_eq!(p.output, vec![4]);
        let t = &p.axes[0];
        assert_eq!(t.taps, 2);
        // x = -0.25, 0.25, 0.75, 1.25: clamped at the edges.
        assert_eq!(t.index, vec![0, 0, 0, 1, 0, 1, 1, 1]);
        assert_eq!(t.weight, vec![0.25, 0.75, 0.75, 0.25, 0.25, 0.75, 0.75, 0.25]);
    }

    #[test]
    fn sizes_with_not_larger_keep_the_aspect_ratio() {
        let mut r = linear(CoordinateMode::HalfPixel);
        r.policy = AspectPolicy::NotLarger;
        r.axes = Some(vec![2, 3]);
        let args = ResizeArgs { sizes: Some(vec![7, 8]), ..Default::default() };
        assert_eq!(r.output_dims(&[1, 1, 4, 4], &args).unwrap(), vec![1, 1, 7, 7]);
    }

    #[test]
    fn crop_and_resize_flags_coordinates_outside_the_input() {
        let mut r = linear(CoordinateMode::TfCropAndResize);
        r.extrapolation = 10.0;
        let args =
            ResizeArgs { roi: Some(vec![-0.5, 1.5]), sizes: Some(vec![5]), ..Default::default() };
        let p = r.plan(&[3], &args).unwrap();
        assert_eq!(p.axes[0].outside, vec![true, false, false, false, true]);
    }
}
