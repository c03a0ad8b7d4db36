//! Convolution and pooling, sharing one window-geometry computation
//! (strides, dilations, explicit or automatic padding, ceil mode).

use super::defaults;
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::Node;
use crate::ops::elementwise::UnaryKind;
use crate::shape::{Dim, Shape};

/// How padding is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoPad {
    /// Use the `pads` attribute.
    NotSet,
    /// Pad so that `out = ceil(in / stride)`, extra padding at the end.
    SameUpper,
    /// Same, extra padding at the beginning.
    SameLower,
    /// No padding.
    Valid,
}

/// Window parameters of a conv or pool, as written in the node.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// Kernel spatial size (for Conv, filled from W's shape when absent).
    pub kernel: Option<Vec<usize>>,
    /// Strides (default 1).
    pub strides: Option<Vec<usize>>,
    /// Dilations (default 1).
    pub dilations: Option<Vec<usize>>,
    /// Explicit pads: all begins, then all ends.
    pub pads: Option<Vec<usize>>,
    /// Automatic padding mode.
    pub auto_pad: AutoPad,
    /// Round the output size up instead of down (pooling).
    pub ceil_mode: bool,
}

/// The resolved geometry for concrete input sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Kernel size per spatial dim.
    pub kernel: Vec<usize>,
    /// Stride per spatial dim.
    pub strides: Vec<usize>,
    /// Dilation per spatial dim.
    pub dilations: Vec<usize>,
    /// Padding before each spatial dim.
    pub pads_begin: Vec<usize>,
    /// Padding after each spatial dim.
    pub pads_end: Vec<usize>,
    /// Output size per spatial dim.
    pub output: Vec<usize>,
}

fn usizes(node: &Node, name: &str) -> Result<Option<Vec<usize>>, OpError> {
    node.attrs
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

impl Window {
    /// Parses the window attributes shared by Conv and the pools.
    ///
    /// # Errors
    /// [`OpError::BadAttribute`] for malformed values.
    pub fn parse(node: &Node) -> Result<Window, OpError> {
        let auto_pad = match node.attrs.string_or("auto_pad", "NOTSET".into())?.as_str() {
            "NOTSET" | "" => AutoPad::NotSet,
            "SAME_UPPER" => AutoPad::SameUpper,
            "SAME_LOWER" => AutoPad::SameLower,
            "VALID" => AutoPad::Valid,
            other => {
                return Err(OpError::BadAttribute {
                    name: "auto_pad".into(),
                    reason: format!("unknown mode '{other}'"),
                });
            }
        };
        Ok(Window {
            kernel: usizes(node, "kernel_shape")?,
            strides: usizes(node, "strides")?,
            dilations: usizes(node, "dilations")?,
            pads: usizes(node, "pads")?,
            auto_pad,
            ceil_mode: node.attrs.flag_or("ceil_mode", false)?,
        })
    }

    /// Resolves the geometry for concrete spatial input sizes.
    ///
    /// # Errors
    /// [`OpError::Shape`] when attribute lengths disagree with the rank or the window does not fit.
    pub fn geometry(&self, input: &[usize], kernel: &[usize]) -> Result<Geometry, OpError> {
        let n = input.len();
        let get = |v: &Option<Vec<usize>>, name: &str| -> Result<Vec<usize>, OpError> {
            match v {
                None => Ok(vec![1; n]),
                Some(v) if v.len() == n => Ok(v.clone()),
                Some(v) => Err(OpError::Shape(format!(
                    "{name} has {} values for {n} spatial dims",
                    v.len()
                ))),
            }
        };
        if kernel.len() != n {
            return Err(OpError::Shape(format!(
                "kernel has {} dims for {n} spatial dims",
                kernel.len()
            )));
        }
        let strides = get(&self.strides, "strides")?;
        let dilations = get(&self.dilations, "dilations")?;
        if strides.contains(&0) || dilations.contains(&0) {
            return Err(OpError::Shape("strides and dilations must be positive".into()));
        }
        let mut pads_begin = vec![0; n];
        let mut pads_end = vec![0; n];
        let mut output = vec![0; n];
        for i in 0..n {
            let eff = (kernel[i] - 1) * dilations[i] + 1;
            match self.auto_pad {
                AutoPad::NotSet => {
                    if let Some(p) = &self.pads {
                        if p.len() != 2 * n {
                            return Err(OpError::Shape(format!(
                                "pads has {} values for {n} spatial dims",
                                p.len()
                            )));
                        }
                        pads_begin[i] = p[i];
                        pads_end[i] = p[i + n];
                    }
                    let padded = input[i] + pads_begin[i] + pads_end[i];
                    if padded < eff {
                        return Err(OpError::Shape(format!(
                            "window {eff} is larger than the padded input {padded}"
                        )));
                    }
                    let span = padded - eff;
                    output[i] = if self.ceil_mode {
                        let mut o = span.div_ceil(strides[i]) + 1;
                        // The last window must start inside the input or its begin padding.
                        if (o - 1) * strides[i] >= input[i] + pads_begin[i] {
                            o -= 1;
                        }
                        o
                    } else {
                        span / strides[i] + 1
                    };
                }
                AutoPad::Valid => {
                    if input[i] < eff {
                        return Err(OpError::Shape(format!(
                            "window {eff} is larger than the input {}",
                            input[i]
                        )));
                    }
                    output[i] = (input[i] - eff) / strides[i] + 1;
                }
                AutoPad::SameUpper | AutoPad::SameLower => {
                    output[i] = input[i].div_ceil(strides[i]);
                    let total =
                        ((output[i].max(1) - 1) * strides[i] + eff).saturating_sub(input[i]);
                    let small = total / 2;
                    let (b, e) = if self.auto_pad == AutoPad::SameUpper {
                        (small, total - small)
                    } else {
                        (total - small, small)
                    };
                    pads_begin[i] = b;
                    pads_end[i] = e;
                }
            }
        }
        Ok(Geometry { kernel: kernel.to_vec(), strides, dilations, pads_begin, pads_end, output })
    }

    /// Output spatial dims for possibly symbolic input dims.
    fn infer_spatial(&self, spatial: &[Dim], kernel: &[usize]) -> Result<Vec<Dim>, OpError> {
        match spatial.iter().map(Dim::known).collect::<Option<Vec<_>>>() {
            Some(sizes) => {
                Ok(self.geometry(&sizes, kernel)?.output.into_iter().map(Dim::Known).collect())
            }
            None => Ok(vec![Dim::Unknown; spatial.len()]),
        }
    }
}

/// `Conv` over N-d inputs `[N, C, D1…]` with weights `[M, C/group, k1…]`.
#[derive(Debug, Clone)]
pub struct Conv {
    /// Window parameters.
    pub window: Window,
    /// Channel groups.
    pub group: usize,
}

impl Conv {
    /// A Conv node's (or FusedConv's) inputs, window and groups.
    ///
    /// # Errors
    /// [`OpError`] for a wrong input count or attributes out of range.
    fn parse(n: &Node) -> Result<Conv, OpError> {
        check_inputs(n, 2, 3)?;
        let group = n.attrs.int_or("group", 1)?;
        if group < 1 {
            return Err(OpError::BadAttribute {
                name: "group".into(),
                reason: format!("{group} < 1"),
            });
        }
        Ok(Conv { window: Window::parse(n)?, group: group as usize })
    }

    /// The kernel's spatial size: from the attribute, or from W's shape.
    ///
    /// # Errors
    /// [`OpError::Shape`] when neither gives it.
    pub fn kernel(&self, w_dims: Option<&[Dim]>) -> Result<Option<Vec<usize>>, OpError> {
        if let Some(k) = &self.window.kernel {
            return Ok(Some(k.clone()));
        }
        Ok(w_dims.and_then(|d| d.get(2..).map(|s| s.iter().map(Dim::known).collect())).flatten())
    }
}

impl Op for Conv {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, w) = (inputs.get(0)?, inputs.get(1)?);
        let (Some(sx), Some(sw)) = (&x.shape, &w.shape) else {
            return Ok(vec![Fact::unranked(x.dtype)]);
        };
        if sx.rank() < 3 || sw.rank() != sx.rank() {
            return Err(OpError::Shape(format!(
                "Conv needs X [N,C,…] and W of the same rank, got {sx} and {sw}"
            )));
        }
        if let (Some(c), Some(wc)) = (sx.0[1].known(), sw.0[1].known()) {
            if c != wc * self.group {
                return Err(OpError::Shape(format!(
                    "X has {c} channels but W expects {wc} × group {}",
                    self.group
                )));
            }
        }
        let spatial = &sx.0[2..];
        let mut out = vec![sx.0[0].clone(), sw.0[0].clone()];
        match self.kernel(Some(&sw.0))? {
            Some(k) => out.extend(self.window.infer_spatial(spatial, &k)?),
            None => out.extend(vec![Dim::Unknown; spatial.len()]),
        }
        Ok(vec![Fact::new(x.dtype, Shape(out))])
    }
}

/// `com.microsoft` `FusedConv`: a Conv whose output goes through an
/// activation in the same kernel (what ONNX Runtime's ConvActivationFusion
/// writes, and what Onyx's fusion makes of a Conv followed by one). The
/// activations are onnxruntime's (`Relu`, `Tanh`, `Sigmoid`, `LeakyRelu` and
/// `HardSigmoid`, with `activation_params`) plus `HardSwish`. `Clip` and the
/// residual input `Z` are not supported.
#[derive(Debug, Clone)]
pub struct FusedConv {
    /// The convolution.
    pub conv: Conv,
    /// The activation applied to its output.
    pub activation: UnaryKind,
}

impl FusedConv {
    /// The activation for an `activation` name and its `activation_params`.
    ///
    /// # Errors
    /// [`OpError::Unsupported`] for any other name.
    pub fn activation(name: &str, params: &[f32]) -> Result<UnaryKind, OpError> {
        let p = |i: usize, default: f32| params.get(i).copied().unwrap_or(default);
        Ok(match name {
            "Relu" => UnaryKind::Relu,
            "Tanh" => UnaryKind::Tanh,
            "Sigmoid" => UnaryKind::Sigmoid,
            "LeakyRelu" => UnaryKind::LeakyRelu { alpha: p(0, defaults::LEAKY_RELU_ALPHA) },
            "HardSigmoid" => UnaryKind::HardSigmoid {
                alpha: p(0, defaults::HARD_SIGMOID_ALPHA),
                beta: p(1, defaults::HARD_SIGMOID_BETA),
            },
            "HardSwish" => UnaryKind::HardSwish,
            other => {
                return Err(OpError::Unsupported(format!("FusedConv activation '{other}'")));
            }
        })
    }
}

impl Op for FusedConv {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        if !matches!(x.dtype, DType::F32 | DType::F16 | DType::F64) {
            return Err(OpError::InputDType {
                index: 0,
                dtype: x.dtype,
                expected: "a float".into(),
            });
        }
        self.conv.infer(inputs)
    }
}

/// The pooling reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// Maximum over the window.
    Max,
    /// Mean over the window.
    Average {
        /// Count padded positions in the divisor.
        count_include_pad: bool,
    },
}

/// `MaxPool` / `AveragePool`.
#[derive(Debug, Clone)]
pub struct Pool {
    /// Which reduction.
    pub kind: PoolKind,
    /// Window parameters (kernel required).
    pub window: Window,
    /// MaxPool's Indices layout: 0 row-major, 1 column-major.
    pub storage_order: i64,
}

impl Pool {
    /// The kernel size.
    pub fn kernel(&self) -> &[usize] {
        self.window.kernel.as_deref().unwrap_or(&[])
    }
}

impl Op for Pool {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let Some(sx) = &x.shape else {
            return Ok(vec![Fact::unranked(x.dtype), Fact::unranked(DType::I64)]);
        };
        if sx.rank() < 3 {
            return Err(OpError::Shape(format!("pooling needs X [N,C,…], got {sx}")));
        }
        let mut out = sx.0[..2].to_vec();
        out.extend(self.window.infer_spatial(&sx.0[2..], self.kernel())?);
        let shape = Shape(out);
        Ok(vec![Fact::new(x.dtype, shape.clone()), Fact::new(DType::I64, shape)])
    }
}

/// `GlobalAveragePool` / `GlobalMaxPool`: reduce every spatial dim to 1.
#[derive(Debug, Clone)]
pub struct GlobalPool {
    /// Max (true) or average (false).
    pub max: bool,
}

impl Op for GlobalPool {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let Some(sx) = &x.shape else { return Ok(vec![Fact::unranked(x.dtype)]) };
        if sx.rank() < 2 {
            return Err(OpError::Shape(format!("global pooling needs X [N,C,…], got {sx}")));
        }
        let mut out = sx.0[..2].to_vec();
        out.extend(std::iter::repeat_n(Dim::Known(1), sx.rank() - 2));
        Ok(vec![Fact::new(x.dtype, Shape(out))])
    }
}

/// Registers Conv, com.microsoft FusedConv and the pools.
pub fn register_all(r: &mut OpRegistry) {
    r.register("Conv", |n| Ok(Box::new(Conv::parse(n)?)));
    r.register_in(crate::graph::MICROSOFT_DOMAIN, "FusedConv", |n| {
        if n.inputs.len() > 3 {
            return Err(OpError::Unsupported("FusedConv with a residual input Z".into()));
        }
        let conv = Conv::parse(n)?;
        let name = n.attrs.req_string("activation")?;
        let params = n.attrs.floats_or("activation_params", vec![])?;
        Ok(Box::new(FusedConv { conv, activation: FusedConv::activation(&name, &params)? }))
    });
    for (op, max) in [("MaxPool", true), ("AveragePool", false)] {
        r.register(op, move |n| {
            check_inputs(n, 1, 1)?;
            let window = Window::parse(n)?;
            if window.kernel.is_none() {
                return Err(OpError::MissingAttribute("kernel_shape".into()));
            }
            let kind = if max {
                PoolKind::Max
            } else {
                PoolKind::Average {
                    count_include_pad: n.attrs.flag_or("count_include_pad", false)?,
                }
            };
            Ok(Box::new(Pool { kind, window, storage_order: n.attrs.int_or("storage_order", 0)? }))
        });
    }
    for (op, max) in [("GlobalMaxPool", true), ("GlobalAveragePool", false)] {
        r.register(op, move |n| {
            check_inputs(n, 1, 1)?;
            Ok(Box::new(GlobalPool { max }))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(auto_pad: AutoPad, pads: Option<Vec<usize>>, strides: usize, ceil: bool) -> Window {
        Window {
            kernel: None,
            strides: Some(vec![strides]),
            dilations: None,
            pads,
            auto_pad,
            ceil_mode: ceil,
        }
    }

    #[test]
    fn same_upper_pads_the_end_more() {
        let g = window(AutoPad::SameUpper, None, 2, false).geometry(&[5], &[4]).unwrap();
        assert_eq!((g.output[0], g.pads_begin[0], g.pads_end[0]), (3, 1, 2));
        let g = window(AutoPad::SameLower, None, 2, false).geometry(&[5], &[4]).unwrap();
        assert_eq!((g.pads_begin[0], g.pads_end[0]), (2, 1));
    }

    #[test]
    fn ceil_mode_drops_a_window_starting_in_the_end_padding() {
        // in 5, k 2, s 2, pad end 1: floor -> 3, ceil -> 3 (a 4th window would start at 6 >= 5).
        let g = window(AutoPad::NotSet, Some(vec![0, 1]), 2, true).geometry(&[5], &[2]).unwrap();
        assert_eq!(g.output[0], 3);
        let g = window(AutoPad::NotSet, None, 2, true).geometry(&[6], &[3]).unwrap();
        assert_eq!(g.output[0], 3);
    }

    #[test]
    fn a_window_larger_than_the_input_is_an_error() {
        assert!(window(AutoPad::NotSet, None, 1, false).geometry(&[2], &[3]).is_err());
    }
}
