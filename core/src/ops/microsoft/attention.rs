//! `com.microsoft` `Attention` (the QKV projection fused in) and
//! `MultiHeadAttention` (projected Q, K, V given). Both share onnxruntime's
//! masking: `mask_index` / `key_padding_mask` as key lengths `[B]`, ends then
//! starts `[2B]`, or 0/1 masks `[B, T]` and `[B, S, T]`; a masked score gets
//! `mask_filter_value` added (not `-inf`), and `unidirectional` masks keys
//! after the query's own position.

use super::common::{bad, float_input, positive, same_dtype, scale_attr};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::{MICROSOFT_DOMAIN, Node};
use crate::ops::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::shape::{Dim, Shape};

/// The masking and scaling both ops share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MaskParams {
    /// Query heads.
    pub num_heads: usize,
    /// Keys after the query's position (past length + query index) are masked.
    pub unidirectional: bool,
    /// Added to masked scores (onnxruntime's default is -10000).
    pub mask_filter_value: f32,
    /// The product's scale; `1 / sqrt(head_size)` when `None`.
    pub scale: Option<f32>,
}

impl MaskParams {
    fn parse(n: &Node) -> Result<MaskParams, OpError> {
        Ok(MaskParams {
            num_heads: positive(n, "num_heads")?,
            unidirectional: n.attrs.flag_or("unidirectional", false)?,
            mask_filter_value: n.attrs.float_or("mask_filter_value", -10000.0)?,
            scale: scale_attr(n)?,
        })
    }
}

/// The concrete sizes of one attention call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MhaGeometry {
    /// Batch size.
    pub batch: usize,
    /// Heads.
    pub heads: usize,
    /// Queries per batch entry.
    pub q_len: usize,
    /// Cached keys (0 without a cache).
    pub past_len: usize,
    /// New keys.
    pub kv_len: usize,
    /// Query and key features per head.
    pub head_size: usize,
    /// Value features per head.
    pub v_head_size: usize,
}

impl MhaGeometry {
    /// Keys attended: cached plus new.
    pub fn total_len(&self) -> usize {
        self.past_len + self.kv_len
    }

    /// The shape of the attention output `[B, S, heads × v_head_size]`.
    pub fn output_shape(&self) -> Vec<usize> {
        vec![self.batch, self.q_len, self.heads * self.v_head_size]
    }
}

fn shape_err(op: &str, msg: String) -> OpError {
    OpError::Shape(format!("{op}: {msg}"))
}

fn split(op: &str, what: &str, hidden: usize, heads: usize) -> Result<usize, OpError> {
    if hidden % heads != 0 {
        return Err(shape_err(
            op,
            format!("{what} width {hidden} is not a multiple of {heads} heads"),
        ));
    }
    Ok(hidden / heads)
}

/// `com.microsoft` `Attention`: `Q, K, V = input · weights + bias` (stacked along
/// the weights' second axis), multi-head attention over an optional cache
/// `past` (`[2, B, N, P, H]`), output `[B, S, Hv]` and `present` `[2, B, N, P + S, H]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ContribAttention {
    /// Heads, masking and scale.
    pub params: MaskParams,
    /// Widths of Q, K and V in the weights; equal thirds when `None`.
    pub qkv_hidden_sizes: Option<[usize; 3]>,
}

impl ContribAttention {
    /// The widths of Q, K and V for a weights width.
    ///
    /// # Errors
    /// [`OpError::Shape`] when they do not add up.
    pub fn widths(&self, width: usize) -> Result<[usize; 3], OpError> {
        let w = self.qkv_hidden_sizes.unwrap_or([width / 3; 3]);
        if w.iter().sum::<usize>() != width {
            return Err(shape_err(
                "Attention",
                format!("weights width {width} is not Q+K+V {w:?}"),
            ));
        }
        Ok(w)
    }

    /// The sizes from the input, weights and (optional) past shapes.
    ///
    /// # Errors
    /// [`OpError::Shape`] when they do not fit together.
    pub fn geometry(
        &self,
        x: &[usize],
        w: &[usize],
        past: Option<&[usize]>,
    ) -> Result<MhaGeometry, OpError> {
        let (&[b, s, d], &[wd, width]) = (x, w) else {
            return Err(shape_err("Attention", format!("input {x:?} and weights {w:?}")));
        };
        if wd != d {
            return Err(shape_err("Attention", format!("input {x:?} and weights {w:?}")));
        }
        let n = self.params.num_heads;
        let [hq, hk, hv] = self.widths(width)?;
        let (head_size, v_head_size) =
            (split("Attention", "Q", hq, n)?, split("Attention", "V", hv, n)?);
        if hk != hq {
            return Err(shape_err("Attention", format!("Q width {hq} differs from K width {hk}")));
        }
        let past_len = match past {
            None => 0,
            Some(&[2, pb, pn, p, ph]) if pb == b && pn == n && ph == head_size => {
                if v_head_size != head_size {
                    return Err(shape_err(
                        "Attention",
                        "a cache needs equal K and V widths".into(),
                    ));
                }
                p
            }
            Some(p) => return Err(shape_err("Attention", format!("past {p:?} for input {x:?}"))),
        };
        Ok(MhaGeometry {
            batch: b,
            heads: n,
            q_len: s,
            past_len,
            kv_len: s,
            head_size,
            v_head_size,
        })
    }
}

fn dim(f: &Fact, i: usize) -> Dim {
    f.dim(i)
}

impl Op for ContribAttention {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = float_input(inputs, 0)?;
        let t = x.dtype;
        for i in [1, 2, 4, 5] {
            same_dtype(inputs, i, t)?;
        }
        same_dtype(inputs, 3, DType::I32)?;
        let (w, past) = (inputs.get(1)?, inputs.opt(4));
        let past_dims = match past {
            None => Some(None),
            Some(p) => p.dims().map(Some),
        };
        if let (Some(dx), Some(dw), Some(dp)) = (x.dims(), w.dims(), past_dims) {
            let g = self.geometry(&dx, &dw, dp.as_deref())?;
            let present = [2, g.batch, g.heads, g.total_len(), g.head_size];
            return Ok(vec![Fact::known(t, &g.output_shape()), Fact::known(t, &present)]);
        }
        let hv = w.dim(1).known().and_then(|width| self.widths(width).ok()).map(|w| w[2]);
        let out = Shape(vec![dim(x, 0), dim(x, 1), hv.map_or(Dim::Unknown, Dim::Known)]);
        Ok(vec![Fact::new(t, out), Fact::ranked(t, 5)])
    }
}

/// `com.microsoft` `MultiHeadAttention`: query `[B, S, D]` (or packed QKV
/// `[B, S, N, 3, H]`), key/value `[B, L, D]` / `[B, L, Dv]` (or packed KV key
/// `[B, L, N, 2, H]` with no value, or `[B, N, L, H]` cached cross-attention
/// keys), optional bias `[D + D + Dv]`, key padding mask, attention bias
/// `[B|1, N|1, S, T]` and past key/value `[B, N, P, H]`; outputs the attention
/// and present key/value `[B, N, P + L, H]`.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiHeadAttention {
    /// Heads, masking and scale.
    pub params: MaskParams,
}

/// How `MultiHeadAttention` receives its keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvLayout {
    /// `key` `[B, L, N·H]`, `value` `[B, L, N·Hv]`.
    Separate,
    /// `key` `[B, L, N, 2, H]`, no value.
    PackedKv,
    /// `query` `[B, S, N, 3, H]`, no key or value.
    PackedQkv,
    /// `key` `[B, N, L, H]`, `value` `[B, N, L, Hv]` (already projected and split).
    Bnsh,
}

impl MultiHeadAttention {
    /// The layout and sizes from the query, key, value and past-key shapes.
    ///
    /// # Errors
    /// [`OpError::Shape`] when they do not fit together.
    pub fn geometry(
        &self,
        q: &[usize],
        k: Option<&[usize]>,
        v: Option<&[usize]>,
        past: Option<&[usize]>,
    ) -> Result<(KvLayout, MhaGeometry), OpError> {
        let op = "MultiHeadAttention";
        let n = self.params.num_heads;
        let bad_shapes = || shape_err(op, format!("query {q:?}, key {k:?}, value {v:?}"));
        let (layout, b, s, l, h, hv) = match (q, k, v) {
            (&[b, s, qn, 3, h], None, None) if qn == n => (KvLayout::PackedQkv, b, s, s, h, h),
            (&[b, s, d], Some(&[kb, l, kn, 2, h]), None) if kb == b && kn == n && d == n * h => {
                (KvLayout::PackedKv, b, s, l, h, h)
            }
            (&[b, s, d], Some(&[kb, l, dk]), Some(&[vb, vl, dv])) if (kb, vb, vl) == (b, b, l) => {
                let h = split(op, "query", d, n)?;
                if dk != d {
                    return Err(bad_shapes());
                }
                (KvLayout::Separate, b, s, l, h, split(op, "value", dv, n)?)
            }
            (&[b, s, d], Some(&[kb, kn, l, h]), Some(&[vb, vn, vl, hv]))
                if (kb, vb, kn, vn, vl) == (b, b, n, n, l) && d == n * h =>
            {
                (KvLayout::Bnsh, b, s, l, h, hv)
            }
            _ => return Err(bad_shapes()),
        };
        let past_len = match past {
            None => 0,
            Some(_) if layout == KvLayout::Bnsh => {
                return Err(shape_err(op, "cached cross-attention keys take no past".into()));
            }
            Some(&[pb, pn, p, ph]) if (pb, pn, ph) == (b, n, h) => p,
            Some(p) => return Err(shape_err(op, format!("past_key {p:?} for query {q:?}"))),
        };
        let g = MhaGeometry {
            batch: b,
            heads: n,
            q_len: s,
            past_len,
            kv_len: l,
            head_size: h,
            v_head_size: hv,
        };
        Ok((layout, g))
    }
}

impl Op for MultiHeadAttention {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let q = float_input(inputs, 0)?;
        let t = q.dtype;
        for i in [1, 2, 3, 5, 6, 7] {
            same_dtype(inputs, i, t)?;
        }
        same_dtype(inputs, 4, DType::I32)?;
        // Per slot: Some(None) when absent, Some(Some(dims)) when concrete, None otherwise.
        let dims = |i: usize| match inputs.opt(i) {
            None => Some(None),
            Some(f) => f.dims().map(Some),
        };
        if let (Some(Some(dq)), Some(dk), Some(dv), Some(dp)) = (dims(0), dims(1), dims(2), dims(6))
        {
            let (_, g) = self.geometry(&dq, dk.as_deref(), dv.as_deref(), dp.as_deref())?;
            let (b, n, total) = (g.batch, g.heads, g.total_len());
            return Ok(vec![
                Fact::known(t, &g.output_shape()),
                Fact::known(t, &[b, n, total, g.head_size]),
                Fact::known(t, &[b, n, total, g.v_head_size]),
            ]);
        }
        let out = Shape(vec![dim(q, 0), dim(q, 1), Dim::Unknown]);
        Ok(vec![Fact::new(t, out), Fact::ranked(t, 4), Fact::ranked(t, 4)])
    }
}

fn qkv_sizes(n: &Node) -> Result<Option<[usize; 3]>, OpError> {
    let Some(v) = n.attrs.ints("qkv_hidden_sizes")? else { return Ok(None) };
    let sizes: Vec<usize> = v.iter().filter_map(|&x| usize::try_from(x).ok()).collect();
    match sizes[..] {
        [a, b, c] if v.len() == 3 && a > 0 && b > 0 && c > 0 => Ok(Some([a, b, c])),
        _ => Err(bad("qkv_hidden_sizes", format!("{v:?} is not three positive sizes"))),
    }
}

/// Registers `Attention` and `MultiHeadAttention` in `com.microsoft`.
pub fn register_all(r: &mut OpRegistry) {
    r.register_in(MICROSOFT_DOMAIN, "Attention", |n| {
        check_inputs(n, 2, 7)?;
        if n.attrs.flag_or("do_rotary", false)? {
            return Err(OpError::Unsupported("Attention with do_rotary".into()));
        }
        Ok(Box::new(ContribAttention {
            params: MaskParams::parse(n)?,
            qkv_hidden_sizes: qkv_sizes(n)?,
        }))
    });
    r.register_in(MICROSOFT_DOMAIN, "MultiHeadAttention", |n| {
        check_inputs(n, 1, 8)?;
        Ok(Box::new(MultiHeadAttention { params: MaskParams::parse(n)? }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(num_heads: usize) -> MaskParams {
        MaskParams { num_heads, unidirectional: false, mask_filter_value: -1e4, scale: None }
    }

    #[test]
    fn attention_splits_the_weights_into_q_k_and_v_widths() {
        let op = ContribAttention { params: params(2), qkv_hidden_sizes: Some([8, 8, 16]) };
        let g = op.geometry(&[2, 4, 8], &[8, 32], None).unwrap();
        assert_eq!((g.head_size, g.v_head_size, g.output_shape()), (4, 8, vec![2, 4, 16]));
        assert!(op.geometry(&[2, 4, 8], &[8, 24], None).is_err());
        let op = ContribAttention { params: params(2), qkv_hidden_sizes: None };
        let g = op.geometry(&[2, 2, 8], &[8, 24], Some(&[2, 2, 2, 3, 4])).unwrap();
        assert_eq!((g.past_len, g.total_len()), (3, 5));
    }

    #[test]
    fn multi_head_attention_recognizes_each_key_layout() {
        let op = MultiHeadAttention { params: params(2) };
        let sep = op.geometry(&[2, 3, 8], Some(&[2, 5, 8]), Some(&[2, 5, 12]), None).unwrap();
        assert_eq!((sep.0, sep.1.v_head_size, sep.1.kv_len), (KvLayout::Separate, 6, 5));
        let kv = op.geometry(&[2, 3, 8], Some(&[2, 5, 2, 2, 4]), None, None).unwrap();
        assert_eq!(kv.0, KvLayout::PackedKv);
        let qkv = op.geometry(&[2, 3, 2, 3, 4], None, None, None).unwrap();
        assert_eq!((qkv.0, qkv.1.kv_len), (KvLayout::PackedQkv, 3));
        let past = op.geometry(&[2, 1, 8], Some(&[2, 1, 8]), Some(&[2, 1, 8]), Some(&[2, 2, 4, 4]));
        assert_eq!(past.unwrap().1.total_len(), 5);
    }
}
