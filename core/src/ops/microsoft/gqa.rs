//! `com.microsoft` `GroupQueryAttention`: attention with fewer key/value heads
//! than query heads, a per-batch-entry cache length (`seqlens_k`), a buffer
//! that may be shared between past and present, optional rotary embedding of
//! queries and keys (at computed or given positions), a local window, a
//! softcap, an additive bias, and a per-head sink in the softmax.

use super::common::{float_input, positive, same_dtype, scale_attr};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::{MICROSOFT_DOMAIN, Node};
use crate::ops::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::shape::{Dim, Shape};

/// The inputs of onnxruntime 1.32's schema, in order. Onyx runs the first
/// twelve (the slots onnxruntime-genai's builder writes); a model that gives
/// any later one is refused with its name.
pub const INPUTS: [&str; 17] = [
    "query",
    "key",
    "value",
    "past_key",
    "past_value",
    "seqlens_k",
    "total_sequence_length",
    "cos_cache",
    "sin_cache",
    "position_ids",
    "attention_bias",
    "head_sink",
    "k_scale",
    "v_scale",
    "q_norm_weight",
    "k_norm_weight",
    "query_seqlens",
];

/// Inputs Onyx runs: [`INPUTS`] up to and including `head_sink`.
const RUN_INPUTS: usize = 12;

/// onnxruntime's `GroupQueryAttention`. Inputs ([`INPUTS`]): query, key,
/// value (absent when the query packs Q, K and V), past_key, past_value
/// (`[B, KV, capacity, H]`), seqlens_k (int32 `[B]`, each entry's total length
/// minus one), total_sequence_length (int32 scalar), cos_cache, sin_cache,
/// position_ids (int64 `[B, S]`: the rotary positions of the new tokens,
/// except on a first prompt), attention_bias (`[B or 1, N or 1, S, total]`,
/// added after the softcap) and head_sink (`[N]`). Outputs: the attention
/// `[B, S, N·H]`, present_key and present_value `[B, KV, max(capacity, total), H]`.
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
    /// Queries see only keys up to their own position; when false every
    /// query sees all `T_b` keys of its batch entry.
    pub causal: bool,
    /// Each softmax's denominator gains `exp(0)` (a sink logit of 0) when no
    /// `head_sink` input gives the heads their own.
    pub smooth_softmax: bool,
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
        for i in [1, 2, 3, 4, 7, 8, 10, 11] {
            same_dtype(inputs, i, t)?;
        }
        same_dtype(inputs, 5, DType::I32)?;
        same_dtype(inputs, 6, DType::I32)?;
        same_dtype(inputs, 9, DType::I64)?;
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

    /// Present key and value over past key and value, as onnxruntime-genai
    /// binds them: the kernels write only the new rows when the two are one
    /// buffer (CUDA), or read the past before writing the present (CPU).
    fn shares_buffer(&self) -> Vec<(usize, usize)> {
        vec![(1, 3), (2, 4)]
    }
}

/// Refuses what the schema allows but Onyx does not run: the later inputs
/// (a quantized cache, Q/K norms, right-padded chunks), a sliding-window
/// cache and the QK output.
fn refuse_unsupported(n: &Node) -> Result<(), OpError> {
    if let Some(i) = (RUN_INPUTS..n.inputs.len()).find(|&i| n.input(i).is_some()) {
        return Err(OpError::Unsupported(format!(
            "GroupQueryAttention with input {i} ({})",
            INPUTS.get(i).copied().unwrap_or("beyond the schema")
        )));
    }
    if n.outputs.get(3).copied().flatten().is_some() || n.attrs.int_or("qk_output", 0)? != 0 {
        return Err(OpError::Unsupported("GroupQueryAttention's output_qk".into()));
    }
    if n.attrs.flag_or("sliding_window_cache", false)? {
        return Err(OpError::Unsupported("GroupQueryAttention with sliding_window_cache".into()));
    }
    for a in ["k_quant_type", "v_quant_type"] {
        match n.attrs.string(a)?.as_deref() {
            None | Some("NONE") => {}
            Some(q) => {
                return Err(OpError::Unsupported(format!("GroupQueryAttention with {a} {q}")));
            }
        }
    }
    Ok(())
}

/// Registers `GroupQueryAttention` in `com.microsoft`.
pub fn register_all(r: &mut OpRegistry) {
    r.register_in(MICROSOFT_DOMAIN, "GroupQueryAttention", |n| {
        check_inputs(n, 7, INPUTS.len())?;
        refuse_unsupported(n)?;
        let (num_heads, kv_num_heads) = (positive(n, "num_heads")?, positive(n, "kv_num_heads")?);
        if num_heads % kv_num_heads != 0 {
            return Err(OpError::BadAttribute {
                name: "kv_num_heads".into(),
                reason: format!("{kv_num_heads} does not divide num_heads {num_heads}"),
            });
        }
        let causal = match n.attrs.int_or("causal", 1)? {
            0 => false,
            1 => true,
            c => {
                return Err(OpError::BadAttribute {
                    name: "causal".into(),
                    reason: format!("{c} is neither 0 nor 1"),
                });
            }
        };
        let local_window_size = n.attrs.int_or("local_window_size", -1)?;
        if !causal && local_window_size != -1 {
            return Err(OpError::BadAttribute {
                name: "local_window_size".into(),
                reason: format!("{local_window_size} with causal 0 (a window needs causal 1)"),
            });
        }
        Ok(Box::new(GroupQueryAttention {
            num_heads,
            kv_num_heads,
            scale: scale_attr(n)?,
            softcap: n.attrs.float_or("softcap", 0.0)?,
            local_window_size,
            do_rotary: n.attrs.flag_or("do_rotary", false)?,
            rotary_interleaved: n.attrs.flag_or("rotary_interleaved", false)?,
            causal,
            smooth_softmax: n.attrs.flag_or("smooth_softmax", false)?,
        }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Attribute, Attributes, ValueId};

    fn op() -> GroupQueryAttention {
        GroupQueryAttention {
            num_heads: 4,
            kv_num_heads: 2,
            scale: None,
            softcap: 0.0,
            local_window_size: -1,
            do_rotary: false,
            rotary_interleaved: false,
            causal: true,
            smooth_softmax: false,
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

    /// A GQA node with inputs at `present` (and the required ones), through the registry.
    fn build(present: &[usize], attrs: Vec<(&str, Attribute)>) -> Result<Box<dyn Op>, OpError> {
        let last = present.iter().copied().chain([6]).max().unwrap_or(6);
        let inputs = (0..=last)
            .map(|i| {
                (i == 0 || i == 5 || i == 6 || present.contains(&i)).then_some(ValueId(i as u32))
            })
            .collect();
        let mut a = vec![("num_heads".to_string(), Attribute::Int(4))];
        a.push(("kv_num_heads".to_string(), Attribute::Int(2)));
        a.extend(attrs.into_iter().map(|(n, v)| (n.to_string(), v)));
        let node = Node {
            name: "gqa".into(),
            op_type: "GroupQueryAttention".into(),
            domain: MICROSOFT_DOMAIN.into(),
            opset: 1,
            inputs,
            outputs: vec![Some(ValueId(100))],
            implicit_inputs: Vec::new(),
            attrs: Attributes(a),
        };
        let mut r = OpRegistry::new();
        register_all(&mut r);
        r.build(&node)
    }

    fn refusal(present: &[usize]) -> String {
        match build(present, vec![]) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("inputs {present:?} were accepted"),
        }
    }

    #[test]
    fn the_twelve_input_slots_of_the_genai_builder_are_accepted() {
        assert!(build(&[1, 2, 3, 4, 7, 8, 9, 10, 11], vec![]).is_ok());
        // Absent trailing slots (empty names) count as absent.
        assert!(build(&[1, 2], vec![]).is_ok());
    }

    #[test]
    fn later_inputs_are_refused_by_name() {
        for (i, name) in [(12, "k_scale"), (14, "q_norm_weight"), (16, "query_seqlens")] {
            let e = refusal(&[1, 2, i]);
            assert!(e.contains(name), "{e}");
        }
        let e = refusal(&[1, 2, 17]);
        assert!(e.contains("7 to 17"), "{e}");
    }

    #[test]
    fn a_quantized_or_windowed_cache_is_refused_and_a_window_needs_causal() {
        let refused = |a: Vec<(&str, Attribute)>| build(&[1, 2], a).is_err();
        assert!(refused(vec![("k_quant_type", Attribute::String("PER_TENSOR".into()))]));
        assert!(refused(vec![("sliding_window_cache", Attribute::Int(1))]));
        assert!(refused(vec![("qk_output", Attribute::Int(1))]));
        assert!(refused(vec![("causal", Attribute::Int(2))]));
        assert!(refused(vec![
            ("causal", Attribute::Int(0)),
            ("local_window_size", Attribute::Int(3))
        ]));
        assert!(!refused(vec![
            ("causal", Attribute::Int(0)),
            ("smooth_softmax", Attribute::Int(1))
        ]));
    }

    #[test]
    fn a_packed_query_holds_q_k_and_v_heads() {
        let g = op().geometry(&[1, 4, 128], None, None, 4).unwrap();
        assert_eq!((g.packed, g.head_size, g.present_len), (true, 16, 4));
        assert!(op().geometry(&[1, 4, 100], None, None, 4).is_err());
    }
}
