//! ai.onnx `Attention` as reshapes, two `MatMul`s and a `Softmax`, for inputs
//! whose shapes are known at compile time: the causal and window terms become
//! one constant bias, and rows the bias masks entirely get zero probabilities,
//! as the reference writes them.

use super::builder::{Builder, attrs, decline, tensor};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::{Attribute, Node, ValueId};
use crate::ops::Fact;
use crate::ops::attention::{Attention, AttentionGeometry, QkOutput};
use crate::tensor::Tensor;

/// A constant `[rows, cols]` tensor of `dtype` from f32 values.
fn float_matrix(dtype: DType, rows: usize, cols: usize, v: &[f32]) -> Result<Tensor, OpError> {
    let shape = vec![rows, cols];
    match dtype {
        DType::F32 => tensor(shape, v.to_vec()),
        DType::F64 => tensor(shape, v.iter().map(|&x| f64::from(x)).collect()),
        DType::F16 => tensor(shape, v.iter().map(|&x| half::f16::from_f32(x)).collect()),
        DType::BF16 => tensor(shape, v.iter().map(|&x| half::bf16::from_f32(x)).collect()),
        d => Err(decline(&format!("Attention in {d}"))),
    }
}

/// The causal and sliding-window terms: `0` where query `i` may see key `j`, `-inf` elsewhere.
fn position_bias(op: &Attention, g: &AttentionGeometry) -> Option<Vec<f32>> {
    if !op.is_causal && op.left_window < 0 && op.right_window < 0 {
        return None;
    }
    let (sq, t) = (g.q_len, g.total_len());
    let mut bias = vec![0f32; sq * t];
    for i in 0..sq {
        let p = (i + g.past_len) as i64;
        for j in 0..t {
            let j64 = j as i64;
            let hidden = (op.is_causal && j64 > p)
                || (op.left_window >= 0 && j64 < p - op.left_window)
                || (op.right_window >= 0 && j64 > p + op.right_window);
            if hidden {
                bias[i * t + j] = f32::NEG_INFINITY;
            }
        }
    }
    Some(bias)
}

/// The padding, causal and window terms under opset 24's `nonpad_kv_seqlen`
/// (`n[b]` valid keys per batch; query `i` sits at position `n[b] - q_len + i`),
/// as a `[batch, 1, q_len, total]` bias computed from the input.
fn padded_positions(
    b: &mut Builder,
    op: &Attention,
    g: &AttentionGeometry,
    nonpad: ValueId,
    dtype: DType,
) -> Result<ValueId, OpError> {
    let (sq, t) = (g.q_len, g.total_len());
    let j = b.constant(tensor(vec![1, 1, 1, t], (0..t as i64).collect())?);
    let i = b.constant(tensor(vec![1, 1, sq, 1], (0..sq as i64).collect())?);
    let n = b.reshape(nonpad, &[g.batch as i64, 1, 1, 1]);
    let mut hidden = b.op0("GreaterOrEqual", &[j, n]);
    let q_len = b.constant(Tensor::scalar(sq as i64));
    let start = b.op0("Sub", &[n, q_len]);
    let p = b.op0("Add", &[i, start]);
    let mut hide = |b: &mut Builder, cmp: &str, offset: i64| {
        let bound = if offset == 0 {
            p
        } else {
            let o = b.constant(Tensor::scalar(offset));
            b.op0("Add", &[p, o])
        };
        let h = b.op0(cmp, &[j, bound]);
        hidden = b.op0("Or", &[hidden, h]);
    };
    if op.is_causal {
        hide(b, "Greater", 0);
    }
    if op.left_window >= 0 {
        hide(b, "Less", -op.left_window);
    }
    if op.right_window >= 0 {
        hide(b, "Greater", op.right_window);
    }
    let ninf = b.scalar(dtype, f64::NEG_INFINITY)?;
    let zero = b.scalar(dtype, 0.0)?;
    Ok(b.op0("Where", &[hidden, ninf, zero]))
}

/// `[batch, heads, seq, size]` from a 3-D `[batch, seq, heads × size]` input.
fn heads_first(
    b: &mut Builder,
    x: ValueId,
    g: &AttentionGeometry,
    heads: usize,
    len: usize,
) -> ValueId {
    let r = b.reshape(x, &[g.batch as i64, len as i64, heads as i64, -1]);
    b.transpose(r, &[0, 2, 1, 3])
}

/// Repeats each key/value head for the query heads it serves (grouped-query attention).
fn repeat_heads(b: &mut Builder, x: ValueId, g: &AttentionGeometry, size: usize) -> ValueId {
    if g.q_heads == g.kv_heads {
        return x;
    }
    let (bt, kvh, t) = (g.batch as i64, g.kv_heads as i64, g.total_len() as i64);
    let group = (g.q_heads / g.kv_heads) as i64;
    let u = b.unsqueeze(x, &[2]);
    let shape = b.ints(&[bt, kvh, group, t, size as i64]);
    let e = b.op0("Expand", &[u, shape]);
    b.reshape(e, &[bt, g.q_heads as i64, t, size as i64])
}

/// Keys or values with the cache prepended, written to the `present` output when requested.
fn with_cache(
    b: &mut Builder,
    node: &Node,
    new: ValueId,
    (past, present): (usize, usize),
) -> ValueId {
    match (node.input(past), node.outputs.get(present).copied().flatten()) {
        (Some(p), _) => {
            let out = b.output(node, present);
            let axis = attrs(vec![("axis", Attribute::Int(2))]);
            b.emit("Concat", &[Some(p), Some(new)], axis, vec![Some(out)]);
            out
        }
        (None, Some(out)) => {
            b.emit("Identity", &[Some(new)], attrs(vec![]), vec![Some(out)]);
            out
        }
        (None, None) => new,
    }
}

/// Emits `op` for `node` when every input shape is known.
///
/// # Errors
/// [`OpError`] (a decline) for unknown shapes or dtypes
/// without constants; shape errors from the geometry.
pub fn decompose(
    op: &Attention,
    node: &Node,
    inputs: &[Option<Fact>],
    b: &mut Builder,
) -> Result<(), OpError> {
    let dims = |i: usize| inputs.get(i).and_then(Option::as_ref).and_then(Fact::dims);
    let (Some(qd), Some(kd), Some(vd)) = (dims(0), dims(1), dims(2)) else {
        return Err(decline("Attention with unknown shapes"));
    };
    let past = match (node.input(4), node.input(5)) {
        (Some(_), Some(_)) => match (dims(4), dims(5)) {
            (Some(pk), Some(pv)) => Some((pk, pv)),
            _ => return Err(decline("Attention with an unknown cache shape")),
        },
        _ => None,
    };
    let g = op.geometry(&qd, &kd, &vd, past.as_ref().map(|(k, v)| (k.as_slice(), v.as_slice())))?;
    let dtype = inputs[0].as_ref().map_or(DType::F32, |f| f.dtype);
    let input = |i: usize| node.input(i).ok_or(OpError::MissingInput(i));
    let (q, k, v) = (input(0)?, input(1)?, input(2)?);
    let (q, k, v) = if g.rank3 {
        (
            heads_first(b, q, &g, g.q_heads, g.q_len),
            heads_first(b, k, &g, g.kv_heads, g.kv_len),
            heads_first(b, v, &g, g.kv_heads, g.kv_len),
        )
    } else {
        (q, k, v)
    };
    let k = with_cache(b, node, k, (4, 1));
    let v = with_cache(b, node, v, (5, 2));
    let k = repeat_heads(b, k, &g, g.head_size);
    let v = repeat_heads(b, v, &g, g.v_head_size);

    let scale = op.scale.map_or(1.0 / (g.head_size as f64).sqrt(), f64::from);
    let s = b.scalar(dtype, scale)?;
    let qs = b.op0("Mul", &[q, s]);
    let kt = b.transpose(k, &[0, 1, 3, 2]);
    let mut scores = b.op0("MatMul", &[qs, kt]);
    if op.softcap > 0.0 {
        let cap = b.scalar(dtype, f64::from(op.softcap))?;
        let d = b.op0("Div", &[scores, cap]);
        let t = b.op0("Tanh", &[d]);
        scores = b.op0("Mul", &[t, cap]);
    }
    let qk_out = node.outputs.get(3).copied().flatten();
    if let (Some(out), QkOutput::Product) = (qk_out, op.qk_output) {
        b.emit("Identity", &[Some(scores)], attrs(vec![]), vec![Some(out)]);
    }

    // The additive bias: the mask (booleans as 0 / -inf, padded with -inf to
    // every key) plus the causal and window terms.
    let total = g.total_len();
    let mask = match node.input(3) {
        None => None,
        Some(m) => {
            let mf = inputs.get(3).and_then(Option::as_ref);
            let Some(md) = mf.and_then(Fact::dims) else {
                return Err(decline("Attention with an unknown mask shape"));
            };
            let m = if mf.is_some_and(|f| f.dtype == DType::Bool) {
                let zero = b.scalar(dtype, 0.0)?;
                let ninf = b.scalar(dtype, f64::NEG_INFINITY)?;
                b.op0("Where", &[m, zero, ninf])
            } else {
                m
            };
            let last = md.last().copied().unwrap_or(total);
            let m = if last < total {
                let mut pads = vec![0i64; 2 * md.len()];
                pads[2 * md.len() - 1] = (total - last) as i64;
                let pads = b.ints(&pads);
                let ninf = b.scalar(dtype, f64::NEG_INFINITY)?;
                b.op0("Pad", &[m, pads, ninf])
            } else {
                m
            };
            Some(m)
        }
    };
    let positions = match (node.input(6), position_bias(op, &g)) {
        (Some(nonpad), _) => Some(padded_positions(b, op, &g, nonpad, dtype)?),
        (None, Some(p)) => Some(b.constant(float_matrix(dtype, g.q_len, total, &p)?)),
        (None, None) => None,
    };
    let bias = match (mask, positions) {
        (Some(m), Some(p)) => Some(b.op0("Add", &[m, p])),
        (m, p) => m.or(p),
    };
    let biased = match bias {
        Some(bias) => b.op0("Add", &[scores, bias]),
        None => scores,
    };
    if let (Some(out), QkOutput::WithBias) = (qk_out, op.qk_output) {
        b.emit("Identity", &[Some(biased)], attrs(vec![]), vec![Some(out)]);
    }

    let last_axis = || attrs(vec![("axis", Attribute::Int(-1))]);
    // A double-precision softmax runs in f32 unless the inputs are double:
    // GPU backends have no f64 kernels, and f32 meets the suite's tolerances.
    let precision = op
        .softmax_precision
        .map(|p| if p == DType::F64 && dtype != DType::F64 { DType::F32 } else { p });
    let mut probs = match precision.filter(|&p| p != dtype) {
        Some(p) => {
            let wide = b.cast(biased, p);
            let sm = b.op("Softmax", &[wide], last_axis());
            b.cast(sm, dtype)
        }
        None => b.op("Softmax", &[biased], last_axis()),
    };
    if let Some(bias) = bias {
        // Rows whose every key is masked get zeros, not NaN.
        let axes = b.ints(&[-1]);
        let row_max = b.op0("ReduceMax", &[bias, axes]);
        let ninf = b.scalar(dtype, f64::NEG_INFINITY)?;
        let dead = b.op0("Equal", &[row_max, ninf]);
        let zero = b.scalar(dtype, 0.0)?;
        probs = b.op0("Where", &[dead, zero, probs]);
    }
    if let (Some(out), QkOutput::Softmax) = (qk_out, op.qk_output) {
        b.emit("Identity", &[Some(probs)], attrs(vec![]), vec![Some(out)]);
    }

    let y = b.output(node, 0);
    if g.rank3 {
        let y4 = b.op0("MatMul", &[probs, v]);
        let yt = b.transpose(y4, &[0, 2, 1, 3]);
        let shape = b.ints(&[g.batch as i64, g.q_len as i64, (g.q_heads * g.v_head_size) as i64]);
        b.emit("Reshape", &[Some(yt), Some(shape)], attrs(vec![]), vec![Some(y)]);
    } else {
        b.emit("MatMul", &[Some(probs), Some(v)], attrs(vec![]), vec![Some(y)]);
    }
    Ok(())
}
