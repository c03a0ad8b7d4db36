//! Spatial ops beyond Conv and the pools of `conv.rs`: LpPool, MaxUnpool,
//! Col2Im, ConvTranspose and CenterCropPad.

use super::axes::{axis_of, value_ints};
use super::conv::{AutoPad, Geometry, Window};
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::error::OpError;
use crate::graph::Node;
use crate::shape::{Dim, Shape};

/// Leading `[N, C]` dims and the spatial dims.
type BatchSplit = (Vec<Dim>, Vec<Dim>);

/// The `[N, C]` dims of an `[N, C, spatial…]` fact, then the spatial dims,
/// when the rank is known and at least `min`.
fn split_batch(f: &Fact, min: usize) -> Result<Option<BatchSplit>, OpError> {
    let Some(s) = &f.shape else { return Ok(None) };
    if s.rank() < min {
        return Err(OpError::Shape(format!("expected [N, C, …] of rank {min} or more, got {s}")));
    }
    Ok(Some((s.0[..2].to_vec(), s.0[2..].to_vec())))
}

fn known(dims: &[Dim]) -> Option<Vec<usize>> {
    dims.iter().map(Dim::known).collect()
}

/// `LpPool`: `(Σ |x|ᵖ)^(1/p)` over each window; padding contributes nothing.
#[derive(Debug, Clone)]
pub struct LpPool {
    /// Window parameters (kernel required).
    pub window: Window,
    /// The order.
    pub p: i64,
}

impl LpPool {
    /// The geometry for concrete spatial input dims.
    ///
    /// # Errors
    /// [`OpError::Shape`] when the window does not fit.
    pub fn geometry(&self, spatial: &[usize]) -> Result<Geometry, OpError> {
        self.window.geometry(spatial, self.window.kernel.as_deref().unwrap_or(&[]))
    }
}

impl Op for LpPool {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let Some((mut out, spatial)) = split_batch(x, 3)? else {
            return Ok(vec![Fact::unranked(x.dtype)]);
        };
        match known(&spatial) {
            Some(s) => out.extend(self.geometry(&s)?.output.into_iter().map(Dim::Known)),
            None => out.extend(vec![Dim::Unknown; spatial.len()]),
        }
        Ok(vec![Fact::new(x.dtype, Shape(out))])
    }
}

/// `MaxUnpool`: scatters the values of a MaxPool back to the positions its indices name.
#[derive(Debug, Clone)]
pub struct MaxUnpool {
    /// Kernel size.
    pub kernel: Vec<usize>,
    /// Strides (default 1).
    pub strides: Option<Vec<usize>>,
    /// Pads: begins, then ends (default 0).
    pub pads: Option<Vec<usize>>,
}

impl MaxUnpool {
    /// The unpooled spatial dims for pooled dims `spatial`:
    /// `(in - 1) * stride - pad_begin - pad_end + kernel`.
    ///
    /// # Errors
    /// [`OpError::Shape`] when attribute lengths disagree or a size is not positive.
    pub fn inferred(&self, spatial: &[usize]) -> Result<Vec<usize>, OpError> {
        let n = spatial.len();
        let strides = self.strides.clone().unwrap_or_else(|| vec![1; n]);
        let pads = self.pads.clone().unwrap_or_else(|| vec![0; 2 * n]);
        if self.kernel.len() != n || strides.len() != n || pads.len() != 2 * n {
            return Err(OpError::Shape(format!(
                "MaxUnpool attributes do not fit {n} spatial dims"
            )));
        }
        (0..n)
            .map(|i| {
                let full = spatial[i].saturating_sub(1) * strides[i] + self.kernel[i];
                full.checked_sub(pads[i] + pads[i + n]).filter(|&d| d > 0).ok_or_else(|| {
                    OpError::Shape(format!("MaxUnpool pads exceed the output on axis {i}"))
                })
            })
            .collect()
    }
}

impl Op for MaxUnpool {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let Some((mut out, spatial)) = split_batch(x, 3)? else {
            return Ok(vec![Fact::unranked(x.dtype)]);
        };
        if let Some(f) = inputs.opt(2) {
            return Ok(vec![match value_ints(f, 2)? {
                Some(v) if v.iter().all(|&d| d >= 0) => {
                    Fact::known(x.dtype, &v.iter().map(|&d| d as usize).collect::<Vec<_>>())
                }
                Some(v) => return Err(OpError::Shape(format!("negative output_shape {v:?}"))),
                None => Fact::ranked(x.dtype, out.len() + spatial.len()),
            }]);
        }
        match known(&spatial) {
            Some(s) => out.extend(self.inferred(&s)?.into_iter().map(Dim::Known)),
            None => out.extend(vec![Dim::Unknown; spatial.len()]),
        }
        Ok(vec![Fact::new(x.dtype, Shape(out))])
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![2]
    }
}

/// Per-axis window attributes of Col2Im (lengths checked against the image rank).
#[derive(Debug, Clone)]
pub struct Col2Im {
    /// Strides (default 1).
    pub strides: Option<Vec<usize>>,
    /// Dilations (default 1).
    pub dilations: Option<Vec<usize>>,
    /// Pads: begins, then ends (default 0).
    pub pads: Option<Vec<usize>>,
}

/// A resolved Col2Im: the image, the block, and the grid of block positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Col2ImPlan {
    /// Image dims.
    pub image: Vec<usize>,
    /// Block (kernel) dims.
    pub block: Vec<usize>,
    /// Block positions per axis.
    pub grid: Vec<usize>,
    /// Strides.
    pub strides: Vec<usize>,
    /// Dilations.
    pub dilations: Vec<usize>,
    /// Padding before each axis.
    pub pads_begin: Vec<usize>,
}

impl Col2Im {
    /// Resolves image and block shapes against the input `[N, C·Πblock, L]`.
    ///
    /// # Errors
    /// [`OpError::Shape`] when the blocks do not tile the padded image in `L` positions.
    pub fn plan(
        &self,
        image: &[i64],
        block: &[i64],
        input: &[usize],
    ) -> Result<Col2ImPlan, OpError> {
        let n = image.len();
        let to_usize =
            |v: &[i64]| v.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<Vec<_>>>();
        let (Some(image), Some(block)) = (to_usize(image), to_usize(block)) else {
            return Err(OpError::Shape("Col2Im shapes must not be negative".into()));
        };
        let get = |v: &Option<Vec<usize>>, len: usize, d: usize| v.clone().unwrap_or(vec![d; len]);
        let (strides, dilations) = (get(&self.strides, n, 1), get(&self.dilations, n, 1));
        let pads = get(&self.pads, 2 * n, 0);
        let bad = |why: &str| OpError::Shape(format!("Col2Im: {why}"));
        if block.len() != n || strides.len() != n || dilations.len() != n || pads.len() != 2 * n {
            return Err(bad("attribute lengths do not match the image rank"));
        }
        let mut grid = Vec::with_capacity(n);
        for i in 0..n {
            let eff = block[i].saturating_sub(1) * dilations[i] + 1;
            let padded = image[i] + pads[i] + pads[i + n];
            if block[i] == 0 || strides[i] == 0 || padded < eff {
                return Err(bad("the block does not fit the padded image"));
            }
            grid.push((padded - eff) / strides[i] + 1);
        }
        let bl: usize = block.iter().product();
        let [_, cb, l] = input[..] else { return Err(bad("the input must be [N, C·block, L]")) };
        if cb % bl != 0 || l != grid.iter().product::<usize>() {
            return Err(bad(&format!(
                "input {input:?} does not hold blocks {block:?} on grid {grid:?}"
            )));
        }
        Ok(Col2ImPlan { image, block, grid, strides, dilations, pads_begin: pads[..n].to_vec() })
    }
}

impl Op for Col2Im {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let (image, block) = (value_ints(inputs.get(1)?, 1)?, value_ints(inputs.get(2)?, 2)?);
        match (image, block, x.dims()) {
            (Some(image), Some(block), Some(d)) => {
                let p = self.plan(&image, &block, &d)?;
                let mut out = vec![d[0], d[1] / p.block.iter().product::<usize>()];
                out.extend(p.image);
                Ok(vec![Fact::known(x.dtype, &out)])
            }
            (Some(image), _, _) => Ok(vec![Fact::ranked(x.dtype, image.len() + 2)]),
            _ => Ok(vec![Fact::unranked(x.dtype)]),
        }
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![1, 2]
    }
}

/// `ConvTranspose` of `X [N, C, …]` with `W [C, M/group, k…]`.
#[derive(Debug, Clone)]
pub struct ConvTranspose {
    /// Strides, dilations, pads and auto_pad (kernel from W when absent).
    pub window: Window,
    /// Channel groups.
    pub group: usize,
    /// Extra size added at the end of each output axis.
    pub output_padding: Option<Vec<usize>>,
    /// The requested output spatial size (pads are then derived from it).
    pub output_shape: Option<Vec<usize>>,
}

/// A resolved ConvTranspose geometry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransposeGeometry {
    /// Output spatial dims.
    pub output: Vec<usize>,
    /// Output positions cut from the start of each axis (may be negative: extended).
    pub pads_begin: Vec<i64>,
    /// Strides.
    pub strides: Vec<usize>,
    /// Dilations.
    pub dilations: Vec<usize>,
}

impl ConvTranspose {
    /// The geometry for concrete input spatial dims and kernel dims.
    ///
    /// # Errors
    /// [`OpError::Shape`] when attribute lengths disagree or the output would be empty.
    pub fn geometry(
        &self,
        input: &[usize],
        kernel: &[usize],
    ) -> Result<TransposeGeometry, OpError> {
        let n = input.len();
        let w = &self.window;
        let get = |v: &Option<Vec<usize>>, len: usize, d: usize| v.clone().unwrap_or(vec![d; len]);
        let (strides, dilations) = (get(&w.strides, n, 1), get(&w.dilations, n, 1));
        let out_pad = get(&self.output_padding, n, 0);
        let bad = |why: &str| OpError::Shape(format!("ConvTranspose: {why}"));
        if kernel.len() != n || strides.len() != n || dilations.len() != n || out_pad.len() != n {
            return Err(bad("attribute lengths do not match the spatial rank"));
        }
        // The full output before padding is cut: s·(in−1) + output_padding + effective kernel.
        let full: Vec<i64> = (0..n)
            .map(|i| {
                let eff = kernel[i].saturating_sub(1) * dilations[i] + 1;
                (strides[i] * input[i].saturating_sub(1) + out_pad[i] + eff) as i64
            })
            .collect();
        let same = matches!(w.auto_pad, AutoPad::SameUpper | AutoPad::SameLower);
        let target: Option<Vec<usize>> = match (&self.output_shape, same) {
            (Some(s), _) => Some(s.clone()),
            (None, true) => Some((0..n).map(|i| input[i] * strides[i]).collect()),
            (None, false) => None,
        };
        let (output, pads_begin) = match target {
            Some(t) => {
                if t.len() != n {
                    return Err(bad("output_shape does not match the spatial rank"));
                }
                let begin = (0..n)
                    .map(|i| {
                        let total = full[i] - t[i] as i64;
                        if w.auto_pad == AutoPad::SameUpper {
                            total.div_euclid(2)
                        } else {
                            total - total.div_euclid(2)
                        }
                    })
                    .collect();
                (t, begin)
            }
            None => {
                let pads = match (w.auto_pad, &w.pads) {
                    (AutoPad::NotSet, Some(p)) if p.len() == 2 * n => p.clone(),
                    (AutoPad::NotSet, Some(_)) => return Err(bad("pads has the wrong length")),
                    _ => vec![0; 2 * n],
                };
                let out = (0..n)
                    .map(|i| full[i] - (pads[i] + pads[i + n]) as i64)
                    .map(|d| usize::try_from(d).map_err(|_| bad("pads exceed the output")))
                    .collect::<Result<Vec<_>, _>>()?;
                (out, pads[..n].iter().map(|&p| p as i64).collect())
            }
        };
        Ok(TransposeGeometry { output, pads_begin, strides, dilations })
    }
}

impl Op for ConvTranspose {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, w) = (inputs.get(0)?, inputs.get(1)?);
        let (Some((nc, spatial)), Some(sw)) = (split_batch(x, 3)?, &w.shape) else {
            return Ok(vec![Fact::unranked(x.dtype)]);
        };
        if sw.rank() != spatial.len() + 2 {
            return Err(OpError::Shape(format!(
                "W {sw} does not match X of rank {}",
                spatial.len() + 2
            )));
        }
        let m = match sw.0[1].known() {
            Some(m) => Dim::Known(m * self.group),
            None => Dim::Unknown,
        };
        let mut out = vec![nc[0].clone(), m];
        let kernel = self.window.kernel.clone().or_else(|| known(&sw.0[2..]));
        match (known(&spatial), kernel) {
            (Some(s), Some(k)) => {
                out.extend(self.geometry(&s, &k)?.output.into_iter().map(Dim::Known))
            }
            _ => out.extend(vec![Dim::Unknown; spatial.len()]),
        }
        Ok(vec![Fact::new(x.dtype, Shape(out))])
    }
}

/// `CenterCropPad`: crops or zero-pads the given axes to `shape`, centred.
#[derive(Debug, Clone)]
pub struct CenterCropPad {
    /// The axes `shape` applies to (default: all).
    pub axes: Option<Vec<i64>>,
}

impl CenterCropPad {
    /// The output dims for concrete input dims and target sizes.
    ///
    /// # Errors
    /// [`OpError::Shape`] when `shape` does not match the axes or an axis repeats.
    pub fn output_dims(&self, dims: &[usize], shape: &[i64]) -> Result<Vec<usize>, OpError> {
        let axes: Vec<usize> = match &self.axes {
            None => (0..dims.len()).collect(),
            Some(a) => a.iter().map(|&a| axis_of(a, dims.len())).collect::<Result<_, _>>()?,
        };
        if axes.len() != shape.len() {
            return Err(OpError::Shape(format!("{} sizes for {} axes", shape.len(), axes.len())));
        }
        let mut out = dims.to_vec();
        let mut seen = vec![false; dims.len()];
        for (&a, &s) in axes.iter().zip(shape) {
            if std::mem::replace(&mut seen[a], true) || s < 0 {
                return Err(OpError::Shape(format!("bad CenterCropPad axis {a} or size {s}")));
            }
            out[a] = s as usize;
        }
        Ok(out)
    }
}

impl Op for CenterCropPad {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        match (x.dims(), value_ints(inputs.get(1)?, 1)?) {
            (Some(d), Some(s)) => Ok(vec![Fact::known(x.dtype, &self.output_dims(&d, &s)?)]),
            _ => Ok(vec![x.rank().map_or(Fact::unranked(x.dtype), |r| Fact::ranked(x.dtype, r))]),
        }
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![1]
    }
}

fn usizes(n: &Node, name: &str) -> Result<Option<Vec<usize>>, OpError> {
    n.attrs
        .ints(name)?
        .map(|v| {
            v.iter()
                .map(|&x| {
                    usize::try_from(x).map_err(|_| OpError::BadAttribute {
                        name: name.into(),
                        reason: format!("negative value {x}"),
                    })
                })
                .collect()
        })
        .transpose()
}

/// Registers the family.
pub fn register_all(r: &mut OpRegistry) {
    r.register("LpPool", |n| {
        check_inputs(n, 1, 1)?;
        let window = Window::parse(n)?;
        if window.kernel.is_none() {
            return Err(OpError::MissingAttribute("kernel_shape".into()));
        }
        Ok(Box::new(LpPool { window, p: n.attrs.int_or("p", 2)? }))
    });
    r.register("MaxUnpool", |n| {
        check_inputs(n, 2, 3)?;
        Ok(Box::new(MaxUnpool {
            kernel: usizes(n, "kernel_shape")?
                .ok_or_else(|| OpError::MissingAttribute("kernel_shape".into()))?,
            strides: usizes(n, "strides")?,
            pads: usizes(n, "pads")?,
        }))
    });
    r.register("Col2Im", |n| {
        check_inputs(n, 3, 3)?;
        Ok(Box::new(Col2Im {
            strides: usizes(n, "strides")?,
            dilations: usizes(n, "dilations")?,
            pads: usizes(n, "pads")?,
        }))
    });
    r.register("ConvTranspose", |n| {
        check_inputs(n, 2, 3)?;
        let group = n.attrs.int_or("group", 1)?;
        let group = usize::try_from(group).ok().filter(|&g| g > 0).ok_or_else(|| {
            OpError::BadAttribute { name: "group".into(), reason: format!("{group} < 1") }
        })?;
        Ok(Box::new(ConvTranspose {
            window: Window::parse(n)?,
            group,
            output_padding: usizes(n, "output_padding")?,
            output_shape: usizes(n, "output_shape")?,
        }))
    });
    r.register("CenterCropPad", |n| {
        check_inputs(n, 2, 2)?;
        Ok(Box::new(CenterCropPad { axes: n.attrs.ints("axes")? }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transpose(strides: usize, pads: Option<Vec<usize>>, auto_pad: AutoPad) -> ConvTranspose {
        ConvTranspose {
            window: Window {
                kernel: None,
                strides: Some(vec![strides]),
                dilations: None,
                pads,
                auto_pad,
                ceil_mode: false,
            },
            group: 1,
            output_padding: None,
            output_shape: None,
        }
    }

    #[test]
    fn conv_transpose_output_grows_by_the_stride_and_shrinks_by_the_pads() {
        let g = transpose(3, None, AutoPad::NotSet).geometry(&[3], &[3]).unwrap();
        assert_eq!((g.output, g.pads_begin), (vec![9], vec![0]));
        let g = transpose(3, Some(vec![1, 1]), AutoPad::NotSet).geometry(&[3], &[3]).unwrap();
        assert_eq!((g.output, g.pads_begin), (vec![7], vec![1]));
        let g = transpose(2, None, AutoPad::SameUpper).geometry(&[3], &[3]).unwrap();
        assert_eq!((g.output, g.pads_begin), (vec![6], vec![0]));
        let mut t = transpose(3, None, AutoPad::NotSet);
        t.output_shape = Some(vec![10]);
        assert_eq!(
            t.geometry(&[3], &[3]).unwrap().pads_begin,
            vec![0],
            "one extra zero row at the end"
        );
    }

    #[test]
    fn col2im_needs_one_column_per_block_position() {
        let c = Col2Im { strides: None, dilations: None, pads: None };
        let p = c.plan(&[5, 5], &[1, 5], &[1, 5, 5]).unwrap();
        assert_eq!(p.grid, vec![5, 1]);
        assert!(c.plan(&[5, 5], &[1, 5], &[1, 5, 4]).is_err());
        assert!(c.plan(&[5, 5], &[2, 2], &[1, 5, 16]).is_err(), "5 columns do not hold 2×2 blocks");
    }

    #[test]
    fn max_unpool_inverts_the_pool_size() {
        let m = MaxUnpool { kernel: vec![2, 2], strides: Some(vec![2, 2]), pads: None };
        assert_eq!(m.inferred(&[2, 2]).unwrap(), vec![4, 4]);
    }

    #[test]
    fn center_crop_pad_sets_only_the_named_axes() {
        let c = CenterCropPad { axes: Some(vec![-3, -2]) };
        assert_eq!(c.output_dims(&[20, 8, 3], &[10, 9]).unwrap(), vec![10, 9, 3]);
        assert!(c.output_dims(&[20, 8, 3], &[10]).is_err());
    }
}
