//! Vision ops: AffineGrid, GridSample, DeformConv, RoiAlign and NonMaxSuppression (whose
//! output size depends on every input's values, so all are value inputs and
//! the selection itself lives here, shared by inference and kernels).

use super::axes::value_ints;
use super::conv::Window;
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::Node;
use crate::shape::{Dim, Shape};
use crate::tensor::Tensor;

/// `AffineGrid`: sampling grids `[N, (D,) H, W, 2|3]` from affine matrices `theta`.
#[derive(Debug, Clone)]
pub struct AffineGrid {
    /// Grid points on pixel corners (`-1` and `1` are the edge pixels' centres).
    pub align_corners: bool,
}

impl AffineGrid {
    /// The normalized coordinates of the `n` points along an axis.
    pub fn axis(&self, n: usize) -> Vec<f64> {
        (0..n)
            .map(|i| match (self.align_corners, n) {
                (true, 1) => -1.0,
                (true, _) => -1.0 + 2.0 * i as f64 / (n - 1) as f64,
                (false, _) => -1.0 + (2 * i + 1) as f64 / n as f64,
            })
            .collect()
    }
}

impl Op for AffineGrid {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let theta = inputs.get(0)?;
        let Some(size) = value_ints(inputs.get(1)?, 1)? else {
            return Ok(vec![Fact::unranked(theta.dtype)]);
        };
        if !matches!(size.len(), 4 | 5) || size.iter().any(|&d| d < 0) {
            return Err(OpError::Shape(format!(
                "AffineGrid size {size:?} is not [N, C, (D,) H, W]"
            )));
        }
        let spatial = size.len() - 2;
        if let Some(d) = theta.dims() {
            if d != [size[0] as usize, spatial, spatial + 1] {
                return Err(OpError::Shape(format!("theta {d:?} does not fit size {size:?}")));
            }
        }
        let mut out: Vec<usize> = vec![size[0] as usize];
        out.extend(size[2..].iter().map(|&d| d as usize));
        out.push(spatial);
        Ok(vec![Fact::known(theta.dtype, &out)])
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![1]
    }
}

/// GridSample's interpolation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleMode {
    /// Nearest pixel (ties to even).
    Nearest,
    /// (Multi)linear.
    Linear,
    /// Cubic convolution (Keys, α = −0.75).
    Cubic,
}

/// GridSample's handling of points outside the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplePadding {
    /// Outside pixels are zero.
    Zeros,
    /// Clamp to the edge.
    Border,
    /// Mirror at the edges.
    Reflection,
}

/// `GridSample`: samples `X [N, C, spatial…]` at the normalized points of
/// `grid [N, out…, rank]` (coordinates in reversed axis order: x, y, z).
#[derive(Debug, Clone)]
pub struct GridSample {
    /// Interpolation.
    pub mode: SampleMode,
    /// Out-of-image handling.
    pub padding: SamplePadding,
    /// `-1` and `1` are the edge pixels' centres (else their outer edges).
    pub align_corners: bool,
}

impl Op for GridSample {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, grid) = (inputs.get(0)?, inputs.get(1)?);
        let (Some(sx), Some(sg)) = (&x.shape, &grid.shape) else {
            return Ok(vec![Fact::unranked(x.dtype)]);
        };
        let r = sx.rank();
        if r < 3 || sg.rank() != r || sg.0[r - 1].known().is_some_and(|k| k != r - 2) {
            return Err(OpError::Shape(format!("GridSample X {sx} and grid {sg} do not fit")));
        }
        let mut out = vec![sx.0[0].clone(), sx.0[1].clone()];
        out.extend(sg.0[1..r - 1].iter().cloned());
        Ok(vec![Fact::new(x.dtype, Shape(out))])
    }
}

/// `DeformConv`: a convolution whose taps are displaced by learned `offset`s
/// (sampled bilinearly, zero outside) and optionally scaled by a `mask`.
#[derive(Debug, Clone)]
pub struct DeformConv {
    /// Kernel (default: W's), strides, dilations and pads.
    pub window: Window,
    /// Channel groups.
    pub group: usize,
    /// Groups of input channels sharing one set of offsets.
    pub offset_group: usize,
}

impl Op for DeformConv {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, w, offset) = (inputs.get(0)?, inputs.get(1)?, inputs.get(2)?);
        let (Some(sx), Some(so)) = (&x.shape, &offset.shape) else {
            return Ok(vec![Fact::unranked(x.dtype)]);
        };
        if sx.rank() < 3 || so.rank() != sx.rank() || w.rank().is_some_and(|r| r != sx.rank()) {
            return Err(OpError::Shape(format!("DeformConv X {sx} and offset {so} do not fit")));
        }
        let mut out = vec![sx.0[0].clone(), w.dim(0)];
        out.extend(so.0[2..].iter().cloned());
        Ok(vec![Fact::new(x.dtype, Shape(out))])
    }
}

/// `RoiAlign`: average (or max) of bilinear samples in each bin of each region.
#[derive(Debug, Clone)]
pub struct RoiAlign {
    /// Shift coordinates by half a pixel (`half_pixel`, the default).
    pub half_pixel: bool,
    /// Max instead of average over a bin's samples.
    pub max: bool,
    /// Output bins per region, vertically.
    pub output_height: usize,
    /// Output bins per region, horizontally.
    pub output_width: usize,
    /// Samples per bin and axis (0: adaptive).
    pub sampling_ratio: usize,
    /// Scale from region coordinates to the feature map.
    pub spatial_scale: f32,
}

impl Op for RoiAlign {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, rois) = (inputs.get(0)?, inputs.get(1)?);
        if x.rank().is_some_and(|r| r != 4) || rois.rank().is_some_and(|r| r != 2) {
            return Err(OpError::Shape("RoiAlign needs X [N, C, H, W] and rois [R, 4]".into()));
        }
        let dims = vec![
            rois.dim(0),
            x.dim(1),
            Dim::Known(self.output_height),
            Dim::Known(self.output_width),
        ];
        Ok(vec![Fact::new(x.dtype, Shape(dims))])
    }
}

/// `NonMaxSuppression`: per batch and class, boxes in descending score order,
/// skipping those overlapping an already selected one by more than the IoU threshold.
#[derive(Debug, Clone)]
pub struct NonMaxSuppression {
    /// Boxes are `[x_center, y_center, width, height]` (else `[y1, x1, y2, x2]`).
    pub center_point_box: bool,
}

/// The corners `(x_min, y_min, x_max, y_max)` of a box, computed in f32 as the reference does.
fn corners(b: &[f32], center: bool) -> (f32, f32, f32, f32) {
    if center {
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        (b[0] - hw, b[1] - hh, b[0] + hw, b[1] + hh)
    } else {
        (b[1].min(b[3]), b[0].min(b[2]), b[1].max(b[3]), b[0].max(b[2]))
    }
}

/// Whether two boxes overlap by more than `threshold` (intersection over union).
fn suppresses(a: &[f32], b: &[f32], center: bool, threshold: f32) -> bool {
    let (ax0, ay0, ax1, ay1) = corners(a, center);
    let (bx0, by0, bx1, by1) = corners(b, center);
    let (ix0, ix1) = (ax0.max(bx0), ax1.min(bx1));
    let (iy0, iy1) = (ay0.max(by0), ay1.min(by1));
    if ix1 <= ix0 || iy1 <= iy0 {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    let (area_a, area_b) = ((ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0));
    let union = area_a + area_b - inter;
    if inter <= 0.0 || area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > threshold
}

impl NonMaxSuppression {
    /// The selected `[batch, class, box]` triples for host inputs (absent optional
    /// inputs as `None`).
    ///
    /// # Errors
    /// [`OpError::Shape`] when boxes `[B, N, 4]` and scores `[B, C, N]` disagree.
    pub fn select(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<[i64; 3]>, OpError> {
        let get = |i: usize| inputs.get(i).copied().flatten();
        let (boxes, scores) =
            (get(0).ok_or(OpError::MissingInput(0))?, get(1).ok_or(OpError::MissingInput(1))?);
        let (bd, sd) = (boxes.shape(), scores.shape());
        let ([nb, n, 4], [sb, classes, sn]) = (bd, sd) else {
            return Err(OpError::Shape(format!("NMS boxes {bd:?} and scores {sd:?}")));
        };
        if nb != sb || n != sn {
            return Err(OpError::Shape(format!("NMS boxes {bd:?} and scores {sd:?} disagree")));
        }
        let first_f32 = |i: usize| -> Result<Option<f32>, OpError> {
            Ok(get(i)
                .map(|t| t.to_f64_vec())
                .transpose()?
                .and_then(|v| v.first().map(|&x| x as f32)))
        };
        let max_out = match get(2) {
            Some(t) => t.to_i64_vec()?.first().copied().unwrap_or(0).max(0) as usize,
            None => 0,
        };
        let iou = first_f32(3)?.unwrap_or(0.0);
        let score_threshold = first_f32(4)?;
        let (boxes, scores) = (boxes.to_vec::<f32>()?, scores.to_vec::<f32>()?);
        let mut selected = Vec::new();
        for b in 0..*nb {
            let batch_boxes = &boxes[b * n * 4..][..n * 4];
            for c in 0..*classes {
                let s = &scores[(b * classes + c) * n..][..*n];
                let mut order: Vec<usize> =
                    (0..*n).filter(|&i| score_threshold.is_none_or(|t| s[i] > t)).collect();
                // Descending score; equal scores keep the lower index first.
                order.sort_by(|&i, &j| {
                    s[j].partial_cmp(&s[i]).unwrap_or(std::cmp::Ordering::Equal).then(i.cmp(&j))
                });
                let mut kept: Vec<usize> = Vec::new();
                for i in order {
                    if kept.len() >= max_out {
                        break;
                    }
                    let bx = &batch_boxes[i * 4..][..4];
                    if kept.iter().all(|&k| {
                        !suppresses(bx, &batch_boxes[k * 4..][..4], self.center_point_box, iou)
                    }) {
                        kept.push(i);
                        selected.push([b as i64, c as i64, i as i64]);
                    }
                }
            }
        }
        Ok(selected)
    }
}

impl Op for NonMaxSuppression {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let values: Vec<Option<&Tensor>> =
            (0..inputs.len()).map(|i| inputs.opt(i).and_then(|f| f.value.as_ref())).collect();
        let all_known = (0..inputs.len()).all(|i| inputs.opt(i).is_none() || values[i].is_some());
        let count = if all_known { Dim::Known(self.select(&values)?.len()) } else { Dim::Unknown };
        Ok(vec![Fact::new(DType::I64, Shape(vec![count, Dim::Known(3)]))])
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![0, 1, 2, 3, 4]
    }
}

fn choice<T: Copy>(
    n: &Node,
    name: &str,
    default: &str,
    options: &[(&str, T)],
) -> Result<T, OpError> {
    let v = n.attrs.string_or(name, default.into())?;
    options.iter().find(|(k, _)| *k == v).map(|(_, t)| *t).ok_or_else(|| OpError::BadAttribute {
        name: name.into(),
        reason: format!("unknown value '{v}'"),
    })
}

fn positive(n: &Node, name: &str, default: i64) -> Result<usize, OpError> {
    let v = n.attrs.int_or(name, default)?;
    usize::try_from(v)
        .map_err(|_| OpError::BadAttribute { name: name.into(), reason: format!("{v} < 0") })
}

/// Registers the family.
pub fn register_all(r: &mut OpRegistry) {
    r.register("AffineGrid", |n| {
        check_inputs(n, 2, 2)?;
        Ok(Box::new(AffineGrid { align_corners: n.attrs.flag_or("align_corners", false)? }))
    });
    r.register("GridSample", |n| {
        check_inputs(n, 2, 2)?;
        let modes = [
            ("nearest", SampleMode::Nearest),
            ("linear", SampleMode::Linear),
            ("bilinear", SampleMode::Linear),
            ("cubic", SampleMode::Cubic),
            ("bicubic", SampleMode::Cubic),
        ];
        let paddings = [
            ("zeros", SamplePadding::Zeros),
            ("border", SamplePadding::Border),
            ("reflection", SamplePadding::Reflection),
        ];
        Ok(Box::new(GridSample {
            mode: choice(n, "mode", if n.opset < 20 { "bilinear" } else { "linear" }, &modes)?,
            padding: choice(n, "padding_mode", "zeros", &paddings)?,
            align_corners: n.attrs.flag_or("align_corners", false)?,
        }))
    });
    r.register("DeformConv", |n| {
        check_inputs(n, 3, 5)?;
        let group = positive(n, "group", 1)?;
        let offset_group = positive(n, "offset_group", 1)?;
        if group == 0 || offset_group == 0 {
            return Err(OpError::BadAttribute {
                name: "group".into(),
                reason: "must be positive".into(),
            });
        }
        Ok(Box::new(DeformConv { window: Window::parse(n)?, group, offset_group }))
    });
    r.register("RoiAlign", |n| {
        check_inputs(n, 3, 3)?;
        let ctm = [("half_pixel", true), ("output_half_pixel", false)];
        let default = if n.opset < 16 { "output_half_pixel" } else { "half_pixel" };
        Ok(Box::new(RoiAlign {
            half_pixel: choice(n, "coordinate_transformation_mode", default, &ctm)?,
            max: choice(n, "mode", "avg", &[("avg", false), ("max", true)])?,
            output_height: positive(n, "output_height", 1)?,
            output_width: positive(n, "output_width", 1)?,
            sampling_ratio: positive(n, "sampling_ratio", 0)?,
            spatial_scale: n.attrs.float_or("spatial_scale", 1.0)?,
        }))
    });
    r.register("NonMaxSuppression", |n| {
        check_inputs(n, 2, 5)?;
        Ok(Box::new(NonMaxSuppression {
            center_point_box: n.attrs.flag_or("center_point_box", false)?,
        }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affine_grid_axes_span_pixel_centres_or_corners() {
        assert_eq!(AffineGrid { align_corners: true }.axis(3), vec![-1.0, 0.0, 1.0]);
        assert_eq!(AffineGrid { align_corners: false }.axis(2), vec![-0.5, 0.5]);
    }

    #[test]
    fn nms_keeps_the_best_of_overlapping_boxes() {
        let boxes = Tensor::from_vec(
            vec![1, 3, 4],
            vec![0f32, 0., 1., 1., 0., 0.1, 1., 1.1, 0., 10., 1., 11.],
        )
        .unwrap();
        let scores = Tensor::from_vec(vec![1, 1, 3], vec![0.9f32, 0.95, 0.5]).unwrap();
        let max = Tensor::from_vec(vec![1], vec![3i64]).unwrap();
        let iou = Tensor::from_vec(vec![1], vec![0.5f32]).unwrap();
        let nms = NonMaxSuppression { center_point_box: false };
        let sel = nms.select(&[Some(&boxes), Some(&scores), Some(&max), Some(&iou)]).unwrap();
        assert_eq!(sel, vec![[0, 0, 1], [0, 0, 2]]);
    }
}
