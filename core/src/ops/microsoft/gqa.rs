//! `com.microsoft` `GroupQueryAttention`: causal attention with fewer key/value
//! heads than query heads, a per-batch-entry cache length (`seqlens_k`), a
//! buffer that may be shared between past and present, optional rotary
//! embedding of queries and keys, a local window and a softcap.

use super::common::{float_input, positive, same_dtype, scale_attr};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::MICROSOFT_DOMAIN;
use crate::ops::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::shape::{Dim, Shape};

/// onnxruntime's `GroupQueryAttention`. Inputs: query, key, value (absent when
/// the query packs Q, K and V), past_key, past_value (`[B, KV, capacity, H]`),
/// seqlens_k (int32 `[B]`, each entry's total length minus one),
/// total_sequence_length (int32 scalar), cos_cache, sin_cache. Outputs: the
/// attention `[B, S, N·H]`, present_key and present_value
/// `[B, KV, max(capacity, total), H]`.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupQueryAttention {
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (divides `num_heads`).
    pub kv_num_heads: usize,
    /// The product's scale; `1 / sqrt(head_size)` when `None`.
    pub scale: Option<f32>,
    /// `softcap · tanh(score / softcap)` after scaling when positive.
    pub softcap: f32,
    /// A query at position `p` sees the `local_window_size` keys up to its own
    /// (`p - window < j <= p`); 0 or negative: no window.
    pub local_window_size: i64,
    /// Rotate queries and keys with the cos/sin caches (inputs 7 and 8).
    pub do_rotary: bool,
    /// Rotary pairs are adjacent features rather than halves.
    pub rotary_interleaved: bool,
}

/// The concrete sizes of one `GroupQueryAttention` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GqaGeometry {
    /// Batch size.
    pub batch: usize,
    /// New tokens per batch entry.
    pub q_len: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Features per head.
    pub head_size: usize,
    /// Q, K and V packed in the query.
    pub packed: bool,
    /// Rows of the past buffers (0 without them).
    pub past_capacity: usize,
    /// Rows of the present buffers.
    pub present_len: usize,
}

fn shape_err(msg: String) -> OpError {
    OpError::Shape(format!("GroupQueryAttention: {msg}"))
}

impl GroupQueryAttention {
    /// The sizes from the query, key, value and past-key shapes and the total length.
    ///
    /// # Errors
    /// [`OpError::Shape`] when they do not fit together.
    pub fn geometry(
        &self,
        q: &[usize],
        kv: Option<(&[usize], &[usize])>,
        past: Option<&[usize]>,
        total: usize,
    ) -> Result<GqaGeometry, OpError> {
        let (n, kvn) = (self.num_heads, self.kv_num_heads);
        let &[b, s, d] = q else { return Err(shape_err(format!("query {q:?} is not 3-D"))) };
        let (packed, h) = match kv {
            None if d % (n + 2 * kvn) == 0 => (true, d / (n + 2 * kvn)),
            Some((k, v)) if d % n == 0 && k == [b, s, kvn * (d / n)] && v == k => (false, d / n),
            _ => return Err(shape_err(format!("query {q:?} and key/value {kv:?}"))),
        };
        let past_capacity = match past {
            None => 0,
            Some(&[pb, pk, cap, ph]) if (pb, pk, ph) == (b, kvn, h) => cap,
            Some(p) => return Err(shape_err(format!("past {p:?} for query {q:?}"))),
        };
        Ok(GqaGeometry {
            batch: b,
            q_len: s,
            heads: n,
            kv_heads: kvn,
            head_size: h,
            packed,
            past_capacity,
            present_len: past_capacity.max(total),
        })
    }
}

impl Op for GroupQueryAttention {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let q = float_input(inputs, 0)?;
        let t = q.dtype;
        for i in [1, 2, 3, 4, 7, 8] {
            same_dtype(inputs, i, t)?;
        }
        same_dtype(inputs, 5, DType::I32)?;
        same_dtype(inputs, 6, DType::I32)?;
        if inputs.opt(1).is_some() != inputs.opt(2).is_some() {
            return Err(shape_err("key and value must be given together".into()));
        }
        if self.do_rotary && (inputs.opt(7).is_none() || inputs.opt(8).is_none()) {
            return Err(shape_err("do_rotary needs cos_cache and sin_cache".into()));
        }
        let total = inputs.get(6)?.ints().and_then(|v| v.first().copied());
        let dims = |i: usize| inputs.opt(i).and_then(Fact::dims);
        let kv = match (dims(1), dims(2)) {
            (Some(k), Some(v)) => Some(Some((k, v))),
            _ if inputs.opt(1).is_none() => Some(None),
            _ => None,
        };
        let past = match inputs.opt(3) {
            None => Some(None),
            Some(f) => f.dims().map(Some),
        };
        if let (Some(dq), Some(kv), Some(past), Some(total)) = (q.dims(), kv, past, total) {
            let total = usize::try_from(total)
                .map_err(|_| shape_err(format!("total_sequence_length {total}")))?;
            let kv = kv.as_ref().map(|(k, v)| (k.as_slice(), v.as_slice()));
            let g = self.geometry(&dq, kv, past.as_deref(), total)?;
            let present = [g.batch, g.kv_heads, g.present_len, g.head_size];
            return Ok(vec![
                Fact::known(t, &[g.batch, g.q_len, g.heads * g.head_size]),
                Fact::known(t, &present),
                Fact::known(t, &present),
            ]);
        }
        let present =
            Shape(vec![q.dim(0), Dim::Known(self.kv_num_heads), Dim::Unknown, Dim::Unknown]);
        Ok(vec![
            Fact::new(t, Shape(vec![q.dim(0), q.dim(1), Dim::Unknown])),
            Fact::new(t, present.clone()),
            Fact::new(t, present),
        ])
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![6]
    }
}

/// Registers `GroupQueryAttention` in `com.microsoft`.
pub fn register_all(r: &mut OpRegistry) {
    r.register_in(MICROSOFT_DOMAIN, "GroupQueryAttention", |n| {
        check_inputs(n, 7, 9)?;
        if n.attrs.flag_or("smooth_softmax", false)? {
            return Err(OpError::Unsupported("GroupQueryAttention with smooth_softmax".into()));
        }
        let (num_heads, kv_num_heads) = (positive(n, "num_heads")?, positive(n, "kv_num_heads")?);
        if num_heads % kv_num_heads != 0 {
            return Err(OpError::BadAttribute {
                name: "kv_num_heads".into(),
                reason: format!("{kv_num_heads} does not divide num_heads {num_heads}"),
            });
        }
        Ok(Box::new(GroupQueryAttention {
            num_heads,
            kv_num_heads,
            scale: scale_attr(n)?,
            softcap: n.attrs.float_or("softcap", 0.0)?,
            local_window_size: n.attrs.int_or("local_window_size", -1)?,
            do_rotary: n.attrs.flag_or("do_rotary", false)?,
            rotary_interleaved: n.attrs.flag_or("rotary_interleaved", false)?,
        }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op() -> GroupQueryAttention {
        GroupQueryAttention {
            num_heads: 4,
            kv_num_heads: 2,
            scale: None,
            softcap: 0.0,
            local_window_size: -1,
            do_rotary: false,
            rotary_interleaved: false,
        }
    }

    #[test]
    fn a_shared_buffer_keeps_its_capacity_as_the_present_length() {
        let kv: &[usize] = &[2, 1, 32];
        let g = op().geometry(&[2, 1, 64], Some((kv, kv)), Some(&[2, 2, 8, 16]), 6).unwrap();
        assert_eq!((g.head_size, g.past_capacity, g.present_len), (16, 8, 8));
        let g = op().geometry(&[2, 1, 64], Some((kv, kv)), Some(&[2, 2, 5, 16]), 6).unwrap();
        assert_eq!(g.present_len, 6);
    }

    #[test]
    fn a_packed_query_holds_q_k_and_v_heads() {
        let g = op().geometry(&[1, 4, 128], None, None, 4).unwrap();
        assert_eq!((g.packed, g.head_size, g.present_len), (true, 16, 4));
        assert!(op().geometry(&[1, 4, 100], None, None, 4).is_err());
    }
}
