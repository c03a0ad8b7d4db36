//! Attention-family ops: ai.onnx `Attention` (opsets 23–25), `LinearAttention`
//! (27), `RotaryEmbedding` (23), and the gated activations `Swish` (24) and
//! `SwiGLU` (28).

mod dtypes;
mod linear;

pub use linear::{LinearAttention, LinearGeometry};

use dtypes::{expect_dtype, is_float_dtype};

use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::shape::{Dim, Shape};

/// What `Attention`'s optional `qk_matmul_output` output holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkOutput {
    /// The scaled `Q @ Kᵀ` product, after the softcap when one is set (modes 0 and 1,
    /// as the reference implementation writes both).
    Product,
    /// The product plus the attention bias (mask, causal and window terms) (mode 2).
    WithBias,
    /// The softmax probabilities, fully masked rows zeroed (mode 3).
    Softmax,
}

/// ai.onnx `Attention`: `softmax(softcap(Q·Kᵀ·scale) + bias) · V`, with grouped
/// query heads, a key/value cache (`past_*` in, `present_*` out), an optional
/// padding length per batch (`nonpad_kv_seqlen`, opset 24) and a sliding window
/// (opset 25).
#[derive(Debug, Clone)]
pub struct Attention {
    /// Bottom-right aligned causal masking.
    pub is_causal: bool,
    /// Query heads of 3-D inputs.
    pub q_num_heads: Option<usize>,
    /// Key/value heads of 3-D inputs.
    pub kv_num_heads: Option<usize>,
    /// The product's scale; `1 / sqrt(head_size)` when absent.
    pub scale: Option<f32>,
    /// `softcap · tanh(x / softcap)` on the product when positive.
    pub softcap: f32,
    /// The dtype the softmax runs in; the input's when absent.
    pub softmax_precision: Option<DType>,
    /// What output 3 holds.
    pub qk_output: QkOutput,
    /// Keys more than this many positions before the query are masked (`-1`: unbounded).
    pub left_window: i64,
    /// Keys more than this many positions after the query are masked (`-1`: unbounded).
    pub right_window: i64,
    /// Opset 25 rejects `q_num_heads`/`kv_num_heads` on 4-D inputs; earlier opsets ignore them.
    pub heads_only_3d: bool,
}

/// The concrete sizes of one `Attention` call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionGeometry {
    /// Whether Q, K and V are 3-D (`[batch, seq, heads × size]`) rather than 4-D.
    pub rank3: bool,
    /// Batch size.
    pub batch: usize,
    /// Query heads.
    pub q_heads: usize,
    /// Key/value heads (divides `q_heads`).
    pub kv_heads: usize,
    /// Query sequence length.
    pub q_len: usize,
    /// Cached key/value length (0 without a cache).
    pub past_len: usize,
    /// New key/value length.
    pub kv_len: usize,
    /// Query and key head size.
    pub head_size: usize,
    /// Value head size.
    pub v_head_size: usize,
}

impl AttentionGeometry {
    /// Keys attended in total: the cache plus the new ones.
    pub fn total_len(&self) -> usize {
        self.past_len + self.kv_len
    }

    /// The shape of output `Y`.
    pub fn y_shape(&self) -> Vec<usize> {
        if self.rank3 {
            vec![self.batch, self.q_len, self.q_heads * self.v_head_size]
        } else {
            vec![self.batch, self.q_heads, self.q_len, self.v_head_size]
        }
    }

    /// The shapes of `present_key` and `present_value`.
    pub fn present_shapes(&self) -> [Vec<usize>; 2] {
        let (b, h, t) = (self.batch, self.kv_heads, self.total_len());
        [vec![b, h, t, self.head_size], vec![b, h, t, self.v_head_size]]
    }

    /// The shape of `qk_matmul_output`.
    pub fn qk_shape(&self) -> Vec<usize> {
        vec![self.batch, self.q_heads, self.q_len, self.total_len()]
    }
}

fn shape_err(msg: String) -> OpError {
    OpError::Shape(format!("Attention: {msg}"))
}

/// Splits the last dim of a 3-D input into `heads` heads.
fn split_heads(name: &str, hidden: usize, heads: usize) -> Result<usize, OpError> {
    if heads == 0 || hidden % heads != 0 {
        return Err(shape_err(format!(
            "{name} hidden size {hidden} is not a multiple of {heads} heads"
        )));
    }
    Ok(hidden / heads)
}

impl Attention {
    /// The heads of 3-D inputs, `(q_num_heads, kv_num_heads)`.
    ///
    /// # Errors
    /// [`OpError::MissingAttribute`] when either is absent.
    pub fn heads_3d(&self) -> Result<(usize, usize), OpError> {
        let q = self.q_num_heads.ok_or_else(|| OpError::MissingAttribute("q_num_heads".into()))?;
        let kv =
            self.kv_num_heads.ok_or_else(|| OpError::MissingAttribute("kv_num_heads".into()))?;
        Ok((q, kv))
    }

    /// Checks concrete input shapes against each other and returns the sizes.
    ///
    /// # Errors
    /// [`OpError::Shape`] or [`OpError::MissingAttribute`] for inconsistent inputs.
    pub fn geometry(
        &self,
        q: &[usize],
        k: &[usize],
        v: &[usize],
        past: Option<(&[usize], &[usize])>,
    ) -> Result<AttentionGeometry, OpError> {
        if q.len() != k.len() || q.len() != v.len() || !(q.len() == 3 || q.len() == 4) {
            return Err(shape_err(format!(
                "Q, K and V must all be 3-D or all 4-D, got {q:?}, {k:?}, {v:?}"
            )));
        }
        let rank3 = q.len() == 3;
        let g = if rank3 {
            let (qh, kvh) = self.heads_3d()?;
            AttentionGeometry {
                rank3,
                batch: q[0],
                q_heads: qh,
                kv_heads: kvh,
                q_len: q[1],
                past_len: 0,
                kv_len: k[1],
                head_size: split_heads("Q", q[2], qh)?,
                v_head_size: split_heads("V", v[2], kvh)?,
            }
        } else {
            AttentionGeometry {
                rank3,
                batch: q[0],
                q_heads: q[1],
                kv_heads: k[1],
                q_len: q[2],
                past_len: 0,
                kv_len: k[2],
                head_size: q[3],
                v_head_size: v[3],
            }
        };
        let (kb, kh, kd) = if rank3 {
            (k[0], g.kv_heads, split_heads("K", k[2], g.kv_heads)?)
        } else {
            (k[0], k[1], k[3])
        };
        let (vb, vh, vs) = if rank3 { (v[0], g.kv_heads, v[1]) } else { (v[0], v[1], v[2]) };
        if kb != g.batch || vb != g.batch || vh != kh || vs != g.kv_len || kd != g.head_size {
            return Err(shape_err(format!("Q {q:?}, K {k:?} and V {v:?} do not fit together")));
        }
        if g.kv_heads == 0 || g.q_heads % g.kv_heads != 0 {
            return Err(shape_err(format!(
                "{} query heads are not a multiple of {} key/value heads",
                g.q_heads, g.kv_heads
            )));
        }
        let Some((pk, pv)) = past else { return Ok(g) };
        let want_k = [g.batch, g.kv_heads, pk.get(2).copied().unwrap_or(0), g.head_size];
        let want_v = [g.batch, g.kv_heads, want_k[2], g.v_head_size];
        if pk != want_k || pv != want_v {
            return Err(shape_err(format!(
                "past_key {pk:?} and past_value {pv:?} do not fit {want_k:?} and {want_v:?}"
            )));
        }
        Ok(AttentionGeometry { past_len: want_k[2], ..g })
    }

    /// Output shapes from possibly symbolic inputs: `[Y, present_key, present_value, qk]`.
    fn symbolic(
        &self,
        q: &Shape,
        k: &Shape,
        v: &Shape,
        past: Option<&Shape>,
    ) -> Result<[Shape; 4], OpError> {
        let d = |s: &Shape, i: usize| s.0.get(i).cloned().unwrap_or(Dim::Unknown);
        let plus = |a: Dim, b: Dim| match (past.map(|p| d(p, 2)), a, b) {
            (None, _, x) => x,
            (Some(Dim::Known(p)), _, Dim::Known(x)) => Dim::Known(p + x),
            _ => Dim::Unknown,
        };
        let div = |a: Dim, n: usize| match a {
            Dim::Known(x) if n > 0 && x % n == 0 => Dim::Known(x / n),
            _ => Dim::Unknown,
        };
        if q.rank() == 3 {
            let (qh, kvh) = self.heads_3d()?;
            let dv = div(d(v, 2), kvh);
            let y_last = dv.known().map_or(Dim::Unknown, |x| Dim::Known(x * qh));
            let total = plus(Dim::Unknown, d(k, 1));
            return Ok([
                Shape(vec![d(q, 0), d(q, 1), y_last]),
                Shape(vec![d(k, 0), Dim::Known(kvh), total.clone(), div(d(k, 2), kvh)]),
                Shape(vec![d(v, 0), Dim::Known(kvh), total.clone(), dv]),
                Shape(vec![d(q, 0), Dim::Known(qh), d(q, 1), total]),
            ]);
        }
        let total = plus(Dim::Unknown, d(k, 2));
        Ok([
            Shape(vec![d(q, 0), d(q, 1), d(q, 2), d(v, 3)]),
            Shape(vec![d(k, 0), d(k, 1), total.clone(), d(k, 3)]),
            Shape(vec![d(v, 0), d(v, 1), total.clone(), d(v, 3)]),
            Shape(vec![d(q, 0), d(q, 1), d(q, 2), total]),
        ])
    }
}

impl Op for Attention {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (q, k, v) = (inputs.get(0)?, inputs.get(1)?, inputs.get(2)?);
        let (t1, t2) = (q.dtype, v.dtype);
        if !is_float_dtype(t1) || !is_float_dtype(t2) {
            return Err(OpError::InputDType {
                index: if is_float_dtype(t1) { 2 } else { 0 },
                dtype: if is_float_dtype(t1) { t2 } else { t1 },
                expected: "a float type".into(),
            });
        }
        expect_dtype(inputs, 1, &[t1])?;
        expect_dtype(inputs, 3, &[t1, DType::Bool])?;
        expect_dtype(inputs, 4, &[t1])?;
        expect_dtype(inputs, 5, &[t2])?;
        expect_dtype(inputs, 6, &[DType::I64])?;
        let (pk, pv) = (inputs.opt(4), inputs.opt(5));
        if pk.is_some() != pv.is_some() {
            return Err(shape_err("past_key and past_value must be given together".into()));
        }
        if pk.is_some() && inputs.opt(6).is_some() {
            return Err(shape_err("nonpad_kv_seqlen cannot be combined with a past cache".into()));
        }
        let dtypes = [t1, t1, t2, t1];
        let (Some(sq), Some(sk), Some(sv)) = (&q.shape, &k.shape, &v.shape) else {
            return Ok(dtypes.iter().map(|&d| Fact::unranked(d)).collect());
        };
        let heads_given = self.q_num_heads.is_some() || self.kv_num_heads.is_some();
        if sq.rank() == 4 && heads_given && self.heads_only_3d {
            return Err(shape_err("q_num_heads and kv_num_heads are for 3-D inputs".into()));
        }
        let concrete = |f: Option<&Fact>| f.map(Fact::dims);
        if let (Some(a), Some(b), Some(c)) = (q.dims(), k.dims(), v.dims()) {
            let past = match (concrete(pk), concrete(pv)) {
                (None, None) => Some(None),
                (Some(Some(x)), Some(Some(y))) => Some(Some((x, y))),
                _ => None,
            };
            if let Some(past) = past {
                let g = self.geometry(
                    &a,
                    &b,
                    &c,
                    past.as_ref().map(|(x, y)| (x.as_slice(), y.as_slice())),
                )?;
                let [pk, pv] = g.present_shapes();
                let shapes = [g.y_shape(), pk, pv, g.qk_shape()];
                return Ok(dtypes.iter().zip(&shapes).map(|(&d, s)| Fact::known(d, s)).collect());
            }
        }
        let shapes = self.symbolic(sq, sk, sv, pk.and_then(|f| f.shape.as_ref()))?;
        Ok(dtypes.into_iter().zip(shapes).map(|(d, s)| Fact::new(d, s)).collect())
    }
}

/// ai.onnx `RotaryEmbedding`: rotates pairs of features (halves, or adjacent
/// pairs when interleaved) by per-position angles given as cos/sin caches.
#[derive(Debug, Clone)]
pub struct RotaryEmbedding {
    /// Pairs are `(x[2i], x[2i+1])` rather than `(x[i], x[i + d/2])`.
    pub interleaved: bool,
    /// Rotated leading features of each head; 0 for the whole head.
    pub rotary_dim: usize,
    /// Heads of a 3-D input (`[batch, seq, heads × size]`).
    pub num_heads: usize,
}

impl Op for RotaryEmbedding {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        if !is_float_dtype(x.dtype) {
            return Err(OpError::InputDType {
                index: 0,
                dtype: x.dtype,
                expected: "a float type".into(),
            });
        }
        expect_dtype(inputs, 1, &[x.dtype])?;
        expect_dtype(inputs, 2, &[x.dtype])?;
        expect_dtype(inputs, 3, &[DType::I64])?;
        match x.rank() {
            Some(3) if self.num_heads == 0 => {
                return Err(OpError::MissingAttribute("num_heads".into()));
            }
            Some(r) if r != 3 && r != 4 => {
                return Err(OpError::Shape(format!("RotaryEmbedding of a rank-{r} input")));
            }
            _ => {}
        }
        Ok(vec![x.with_dtype(x.dtype)])
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// ai.onnx `Swish` (`x · sigmoid(alpha · x)`) and `SwiGLU` (`swish(a) · b`).
#[derive(Debug, Clone)]
pub struct Swish {
    /// The sigmoid's slope.
    pub alpha: f32,
    /// `SwiGLU`: gate a second input of the same shape.
    pub glu: bool,
}

impl Op for Swish {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let a = inputs.get(0)?;
        if !is_float_dtype(a.dtype) {
            return Err(OpError::InputDType {
                index: 0,
                dtype: a.dtype,
                expected: "a float type".into(),
            });
        }
        if self.glu {
            let b = inputs.get(1)?;
            expect_dtype(inputs, 1, &[a.dtype])?;
            if let (Some(x), Some(y)) = (a.dims(), b.dims()) {
                if x != y {
                    return Err(OpError::Shape(format!(
                        "SwiGLU inputs must have one shape, got {x:?} and {y:?}"
                    )));
                }
            }
        }
        Ok(vec![a.with_dtype(a.dtype)])
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

fn bad(name: &str, reason: String) -> OpError {
    OpError::BadAttribute { name: name.into(), reason }
}

/// A non-negative int attribute, `None` when absent.
fn count(n: &crate::graph::Node, name: &str) -> Result<Option<usize>, OpError> {
    n.attrs
        .int(name)?
        .map(|v| usize::try_from(v).map_err(|_| bad(name, format!("{v} is negative"))))
        .transpose()
}

fn window(n: &crate::graph::Node, name: &str) -> Result<i64, OpError> {
    let w = if n.opset >= 25 { n.attrs.int_or(name, -1)? } else { -1 };
    if w < -1 {
        return Err(bad(name, format!("{w} is neither -1 nor non-negative")));
    }
    Ok(w)
}

fn build_attention(n: &crate::graph::Node) -> Result<Attention, OpError> {
    if n.opset < 23 {
        return Err(OpError::UnsupportedOpset { op_type: n.op_type.clone(), opset: n.opset });
    }
    check_inputs(n, 3, if n.opset >= 24 { 7 } else { 6 })?;
    let qk_output = match n.attrs.int_or("qk_matmul_output_mode", 0)? {
        0 | 1 => QkOutput::Product,
        2 => QkOutput::WithBias,
        3 => QkOutput::Softmax,
        m => return Err(bad("qk_matmul_output_mode", format!("{m} is not 0 to 3"))),
    };
    let softmax_precision = match n.attrs.int("softmax_precision")? {
        None => None,
        Some(code) => Some(
            i32::try_from(code)
                .ok()
                .and_then(DType::from_onnx)
                .filter(|d| is_float_dtype(*d))
                .ok_or_else(|| bad("softmax_precision", format!("{code} is not a float type")))?,
        ),
    };
    Ok(Attention {
        is_causal: n.attrs.flag_or("is_causal", false)?,
        q_num_heads: count(n, "q_num_heads")?,
        kv_num_heads: count(n, "kv_num_heads")?,
        scale: n.attrs.float("scale")?,
        softcap: n.attrs.float_or("softcap", 0.0)?,
        softmax_precision,
        qk_output,
        left_window: window(n, "left_window_size")?,
        right_window: window(n, "right_window_size")?,
        heads_only_3d: n.opset >= 25,
    })
}

/// Registers the family.
pub fn register_all(r: &mut OpRegistry) {
    r.register("Attention", |n| Ok(Box::new(build_attention(n)?)));
    r.register("LinearAttention", |n| Ok(Box::new(linear::build(n)?)));
    r.register("RotaryEmbedding", |n| {
        check_inputs(n, 3, 4)?;
        Ok(Box::new(RotaryEmbedding {
            interleaved: n.attrs.flag_or("interleaved", false)?,
            rotary_dim: count(n, "rotary_embedding_dim")?.unwrap_or(0),
            num_heads: count(n, "num_heads")?.unwrap_or(0),
        }))
    });
    r.register("Swish", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(Swish { alpha: n.attrs.float_or("alpha", 1.0)?, glu: false }))
    });
    r.register("SwiGLU", |n| {
        check_inputs(n, 2, 2)?;
        Ok(Box::new(Swish { alpha: n.attrs.float_or("alpha", 1.0)?, glu: true }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain() -> Attention {
        Attention {
            is_causal: false,
            q_num_heads: None,
            kv_num_heads: None,
            scale: None,
            softcap: 0.0,
            softmax_precision: None,
            qk_output: QkOutput::Product,
            left_window: -1,
            right_window: -1,
            heads_only_3d: true,
        }
    }

    #[test]
    fn four_d_geometry_reads_heads_from_the_shapes_and_adds_the_cache() {
        let g = plain()
            .geometry(
                &[2, 9, 4, 8],
                &[2, 3, 6, 8],
                &[2, 3, 6, 10],
                Some((&[2, 3, 12, 8], &[2, 3, 12, 10])),
            )
            .unwrap();
        assert_eq!((g.q_heads, g.kv_heads, g.past_len, g.total_len()), (9, 3, 12, 18));
        assert_eq!(g.y_shape(), vec![2, 9, 4, 10]);
        assert_eq!(g.present_shapes(), [vec![2, 3, 18, 8], vec![2, 3, 18, 10]]);
        assert_eq!(g.qk_shape(), vec![2, 9, 4, 18]);
    }

    #[test]
    fn three_d_geometry_splits_the_hidden_size_into_heads() {
        let op = Attention { q_num_heads: Some(9), kv_num_heads: Some(3), ..plain() };
        let g = op.geometry(&[2, 4, 72], &[2, 6, 24], &[2, 6, 30], None).unwrap();
        assert_eq!((g.head_size, g.v_head_size, g.kv_len), (8, 10, 6));
        assert_eq!(g.y_shape(), vec![2, 4, 90]);
    }

    #[test]
    fn mismatched_heads_and_sizes_are_shape_errors() {
        let op = plain();
        assert!(op.geometry(&[2, 4, 4, 8], &[2, 3, 6, 8], &[2, 3, 6, 8], None).is_err());
        assert!(op.geometry(&[2, 3, 4, 8], &[2, 3, 6, 4], &[2, 3, 6, 8], None).is_err());
        assert!(op.geometry(&[2, 3, 4, 8], &[2, 3, 6, 8], &[2, 3, 5, 8], None).is_err());
        assert!(op.geometry(&[2, 4, 24], &[2, 6, 24], &[2, 6, 24], None).is_err());
    }

    #[test]
    fn symbolic_inputs_keep_their_symbols_in_the_outputs() {
        let sym = Dim::Sym("batch".into());
        let q = Fact::new(DType::F32, Shape(vec![sym.clone(), 3.into(), 4.into(), 8.into()]));
        let kv = Fact::new(DType::F32, Shape(vec![sym.clone(), 3.into(), 6.into(), 8.into()]));
        let facts = [Some(q), Some(kv.clone()), Some(kv)];
        let out = plain().infer(&InferInputs::new(&facts)).unwrap();
        assert_eq!(out[0].shape, Some(Shape(vec![sym.clone(), 3.into(), 4.into(), 8.into()])));
        assert_eq!(out[3].shape, Some(Shape(vec![sym, 3.into(), 4.into(), 6.into()])));
    }
}
