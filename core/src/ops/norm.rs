//! The layer-normalization family: `LayerNormalization`, the RMS variants
//! (`RMSNormalization`, onnxruntime's `SimplifiedLayerNormalization`) and
//! onnxruntime's fused `SkipLayerNormalization` and
//! `SkipSimplifiedLayerNormalization` (`com.microsoft`).

use super::defaults;
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::{MICROSOFT_DOMAIN, Node};
use crate::shape::{Dim, Shape, normalize_axis};

/// `LayerNormalization` (opset 17) over the trailing dims from `axis`, or
/// its RMS form (no mean subtracted).
#[derive(Debug, Clone)]
pub struct LayerNorm {
    /// First normalized axis.
    pub axis: i64,
    /// Added to the variance.
    pub epsilon: f32,
    /// Dtype of the statistics outputs.
    pub stash_type: DType,
    /// RMS normalization: `x / sqrt(mean(x²) + eps) * scale`, with the
    /// inverse RMS (if any) as output 1 instead of Mean and InvStdDev.
    pub rms: bool,
}

impl LayerNorm {
    /// The normalized axis, made non-negative.
    ///
    /// # Errors
    /// [`OpError::Shape`] when out of range.
    pub fn axis(&self, rank: usize) -> Result<usize, OpError> {
        normalize_axis(self.axis, rank).ok_or_else(|| {
            OpError::Shape(format!("axis {} out of range for rank {rank}", self.axis))
        })
    }
}

/// The shape of per-row statistics: the input's dims up to `axis`, then ones.
fn stat_shape(s: &Shape, axis: usize) -> Shape {
    let mut stat = s.0[..axis].to_vec();
    stat.extend(std::iter::repeat_n(Dim::Known(1), s.rank() - axis));
    Shape(stat)
}

impl Op for LayerNorm {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let stats = if self.rms { 1 } else { 2 };
        let Some(sx) = &x.shape else {
            let mut out = vec![x.clone()];
            out.extend(std::iter::repeat_n(Fact::unranked(self.stash_type), stats));
            return Ok(out);
        };
        let stat = Fact::new(self.stash_type, stat_shape(sx, self.axis(sx.rank())?));
        let mut out = vec![x.with_dtype(x.dtype)];
        out.extend(std::iter::repeat_n(stat, stats));
        Ok(out)
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// onnxruntime's `SkipLayerNormalization` and `SkipSimplifiedLayerNormalization`:
/// `s = input + skip (+ bias)`, normalized over the last axis, times gamma (plus beta).
///
/// Outputs: the result, `mean` (zero for the simplified form, as onnxruntime
/// writes it), `inv_std_var`, and `input_skip_bias_sum` (`s`). The statistics
/// are float in onnxruntime's schema, but exporters often declare them in the
/// activation dtype: each is written in the dtype its output declares.
#[derive(Debug, Clone)]
pub struct SkipNorm {
    /// RMS form (no mean, no beta).
    pub simplified: bool,
    /// Added to the variance.
    pub epsilon: f32,
    /// Dtypes of outputs 1 (mean) and 2 (inv_std_var).
    pub stats: [DType; 2],
}

impl SkipNorm {
    /// The input slots of beta and bias.
    pub fn slots(&self) -> (Option<usize>, usize) {
        if self.simplified { (None, 3) } else { (Some(3), 4) }
    }

    /// Checks that `skip` is the input's shape or its trailing part (broadcast
    /// over the batch), so input element `i` adds skip element `i % skip.len()`.
    ///
    /// # Errors
    /// [`OpError::Shape`] otherwise.
    pub fn check_skip(input: &[usize], skip: &[usize]) -> Result<(), OpError> {
        let pad = input.len().checked_sub(skip.len());
        let fits = pad.is_some_and(|pad| {
            let first = skip.iter().position(|&d| d != 1).unwrap_or(skip.len());
            skip[first..] == input[pad + first..]
        });
        if !fits {
            return Err(OpError::Shape(format!(
                "skip {skip:?} is neither the input's shape {input:?} nor its trailing dims"
            )));
        }
        Ok(())
    }
}

impl Op for SkipNorm {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, skip) = (inputs.get(0)?, inputs.get(1)?);
        let (beta, bias) = self.slots();
        for i in [Some(1), Some(2), beta, Some(bias)].into_iter().flatten() {
            if let Some(f) = inputs.opt(i) {
                if f.dtype != x.dtype {
                    return Err(OpError::InputDType {
                        index: i,
                        dtype: f.dtype,
                        expected: format!("the input's {}", x.dtype),
                    });
                }
            }
        }
        if let (Some(a), Some(b)) = (x.dims(), skip.dims()) {
            Self::check_skip(&a, &b)?;
        }
        let Some(sx) = &x.shape else {
            return Ok(vec![
                x.clone(),
                Fact::unranked(self.stats[0]),
                Fact::unranked(self.stats[1]),
                x.clone(),
            ]);
        };
        if sx.rank() == 0 {
            return Err(OpError::Shape("SkipLayerNormalization of a scalar".into()));
        }
        let stat = stat_shape(sx, sx.rank() - 1);
        Ok(vec![
            x.with_dtype(x.dtype),
            Fact::new(self.stats[0], stat.clone()),
            Fact::new(self.stats[1], stat),
            x.with_dtype(x.dtype),
        ])
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }

    fn declared_outputs(&mut self, dtypes: &[Option<DType>]) {
        for (slot, d) in self.stats.iter_mut().zip(dtypes.iter().skip(1)) {
            if let Some(d) = d.filter(|d| d.is_float()) {
                *slot = d;
            }
        }
    }
}

fn stash_type(n: &Node) -> Result<DType, OpError> {
    let stash = n.attrs.int_or("stash_type", 1)?;
    DType::from_onnx(stash as i32).filter(|d| d.is_float()).ok_or_else(|| OpError::BadAttribute {
        name: "stash_type".into(),
        reason: format!("{stash} is not a float type"),
    })
}

/// Registers the normalization family.
pub fn register_all(r: &mut OpRegistry) {
    for (op, rms, max_inputs) in [
        ("LayerNormalization", false, 3),
        ("RMSNormalization", true, 2),
        ("SimplifiedLayerNormalization", true, 2),
    ] {
        r.register(op, move |n| {
            check_inputs(n, 2, max_inputs)?;
            Ok(Box::new(LayerNorm {
                axis: n.attrs.int_or("axis", -1)?,
                epsilon: n.attrs.float_or("epsilon", defaults::LAYER_NORM_EPSILON)?,
                stash_type: stash_type(n)?,
                rms,
            }))
        });
    }
    for (op, simplified, max_inputs) in
        [("SkipLayerNormalization", false, 5), ("SkipSimplifiedLayerNormalization", true, 4)]
    {
        r.register_in(MICROSOFT_DOMAIN, op, move |n| {
            check_inputs(n, 3, max_inputs)?;
            Ok(Box::new(SkipNorm {
                simplified,
                epsilon: n.attrs.float_or("epsilon", defaults::SKIP_LAYER_NORM_EPSILON)?,
                stats: [DType::F32; 2],
            }))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_is_the_input_shape_or_its_trailing_dims() {
        assert!(SkipNorm::check_skip(&[2, 3, 4], &[2, 3, 4]).is_ok());
        assert!(SkipNorm::check_skip(&[2, 3, 4], &[1, 3, 4]).is_ok());
        assert!(SkipNorm::check_skip(&[2, 3, 4], &[3, 4]).is_ok());
        assert!(SkipNorm::check_skip(&[2, 3, 4], &[2, 1, 4]).is_err());
        assert!(SkipNorm::check_skip(&[2, 3, 4], &[1, 1, 4]).is_ok());
        assert!(SkipNorm::check_skip(&[3, 4], &[2, 3, 4]).is_err());
    }
}
