//! ai.onnx `LinearAttention` (opset 27): a recurrent state `S` (`d_k × d_v` per
//! key/value head) updated token by token — optionally decayed (`gated`) and
//! delta-corrected (`delta`) — and read by the queries.

use super::dtypes::{expect_dtype, is_float_dtype};
use crate::error::OpError;
use crate::graph::Node;
use crate::ops::{Fact, InferInputs, Op, check_inputs};
use crate::shape::{Dim, Shape};

/// `LinearAttention` over 3-D `[batch, seq, heads × size]` inputs.
#[derive(Debug, Clone)]
pub struct LinearAttention {
    /// Query heads (a multiple of `kv_heads`).
    pub q_heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Output scale; 0 for `1 / sqrt(d_k)`.
    pub scale: f32,
    /// The state decays by `exp(decay)` before each update (input 4).
    pub gated: bool,
    /// Values are corrected by what the state already retrieves, times `beta` (input 5).
    pub delta: bool,
}

/// The concrete sizes of one `LinearAttention` call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearGeometry {
    /// Batch size.
    pub batch: usize,
    /// Tokens.
    pub len: usize,
    /// Key head size.
    pub dk: usize,
    /// Value head size.
    pub dv: usize,
}

fn shape_err(msg: String) -> OpError {
    OpError::Shape(format!("LinearAttention: {msg}"))
}

impl LinearAttention {
    /// Checks concrete query, key and value shapes and returns the sizes.
    ///
    /// # Errors
    /// [`OpError::Shape`] for inconsistent inputs.
    pub fn geometry(
        &self,
        q: &[usize],
        k: &[usize],
        v: &[usize],
    ) -> Result<LinearGeometry, OpError> {
        let ([b, t, qh], [kb, kt, kh], [vb, vt, vh]) = (q, k, v) else {
            return Err(shape_err(format!("inputs must be 3-D, got {q:?}, {k:?}, {v:?}")));
        };
        let dk = qh / self.q_heads;
        if qh % self.q_heads != 0
            || vh % self.kv_heads != 0
            || *kh != self.kv_heads * dk
            || (kb, kt) != (b, t)
            || (vb, vt) != (b, t)
        {
            return Err(shape_err(format!(
                "query {q:?}, key {k:?} and value {v:?} do not fit {} query and {} key/value heads",
                self.q_heads, self.kv_heads
            )));
        }
        Ok(LinearGeometry { batch: *b, len: *t, dk, dv: vh / self.kv_heads })
    }

    /// The scale applied to the output.
    pub fn scale_for(&self, dk: usize) -> f32 {
        if self.scale == 0.0 { (1.0 / (dk as f64).sqrt()) as f32 } else { self.scale }
    }
}

impl Op for LinearAttention {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (q, k, v) = (inputs.get(0)?, inputs.get(1)?, inputs.get(2)?);
        if !is_float_dtype(q.dtype) {
            return Err(OpError::InputDType {
                index: 0,
                dtype: q.dtype,
                expected: "a float type".into(),
            });
        }
        for i in [1, 2, 4, 5] {
            expect_dtype(inputs, i, &[q.dtype])?;
        }
        for (i, want, name) in [(4, self.gated, "decay"), (5, self.delta, "beta")] {
            if inputs.opt(i).is_some() != want {
                let verb = if want { "requires" } else { "forbids" };
                return Err(shape_err(format!("this update_rule {verb} the {name} input")));
            }
        }
        let state = inputs.opt(3).map_or(q.dtype, |s| s.dtype);
        if !is_float_dtype(state) {
            return Err(OpError::InputDType {
                index: 3,
                dtype: state,
                expected: "a float type".into(),
            });
        }
        if let (Some(a), Some(b), Some(c)) = (q.dims(), k.dims(), v.dims()) {
            let g = self.geometry(&a, &b, &c)?;
            return Ok(vec![
                Fact::known(q.dtype, &[g.batch, g.len, self.q_heads * g.dv]),
                Fact::known(state, &[g.batch, self.kv_heads, g.dk, g.dv]),
            ]);
        }
        let (batch, len) = (q.dim(0), q.dim(1));
        let out = Shape(vec![batch.clone(), len, Dim::Unknown]);
        let st = Shape(vec![batch, Dim::Known(self.kv_heads), Dim::Unknown, Dim::Unknown]);
        Ok(vec![Fact::new(q.dtype, out), Fact::new(state, st)])
    }
}

/// Builds `LinearAttention` from a node.
///
/// # Errors
/// [`OpError`] for a bad opset, input count or attribute.
pub(super) fn build(n: &Node) -> Result<LinearAttention, OpError> {
    if n.opset < 27 {
        return Err(OpError::UnsupportedOpset { op_type: n.op_type.clone(), opset: n.opset });
    }
    check_inputs(n, 3, 6)?;
    let heads = |name: &str| -> Result<usize, OpError> {
        let h = n.attrs.req_int(name)?;
        usize::try_from(h).ok().filter(|&h| h > 0).ok_or_else(|| OpError::BadAttribute {
            name: name.into(),
            reason: format!("{h} is not positive"),
        })
    };
    let (q_heads, kv_heads) = (heads("q_num_heads")?, heads("kv_num_heads")?);
    if q_heads % kv_heads != 0 {
        return Err(OpError::BadAttribute {
            name: "q_num_heads".into(),
            reason: format!("{q_heads} is not a multiple of kv_num_heads {kv_heads}"),
        });
    }
    let rule = n.attrs.string_or("update_rule", "gated_delta".into())?;
    let (gated, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => {
            return Err(OpError::BadAttribute {
                name: "update_rule".into(),
                reason: format!("'{other}' is not linear, gated, delta or gated_delta"),
            });
        }
    };
    Ok(LinearAttention { q_heads, kv_heads, scale: n.attrs.float_or("scale", 0.0)?, gated, delta })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_splits_heads_and_checks_the_key_size() {
        let op = LinearAttention { q_heads: 8, kv_heads: 4, scale: 0.0, gated: true, delta: true };
        let g = op.geometry(&[2, 4, 64], &[2, 4, 32], &[2, 4, 48]).unwrap();
        assert_eq!(g, LinearGeometry { batch: 2, len: 4, dk: 8, dv: 12 });
        assert!(op.geometry(&[2, 4, 64], &[2, 4, 16], &[2, 4, 48]).is_err());
        assert!(op.geometry(&[2, 4, 64], &[2, 3, 32], &[2, 4, 48]).is_err());
        assert_eq!(op.scale_for(16), 0.25);
    }
}
