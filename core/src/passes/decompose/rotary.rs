//! ai.onnx `RotaryEmbedding` as slices, products with the gathered cos/sin
//! caches, and a concatenation, in the `[batch, seq, heads, size]` layout.

use super::builder::{Builder, attrs, dims, input};
use crate::error::OpError;
use crate::graph::{Attribute, Node, ValueId};
use crate::ops::Fact;
use crate::ops::attention::RotaryEmbedding;

/// `x[..., start..end:step]` along the last axis.
fn slice_last(b: &mut Builder, x: ValueId, start: usize, end: usize, step: i64) -> ValueId {
    let (s, e, a, st) =
        (b.ints(&[start as i64]), b.ints(&[end as i64]), b.ints(&[-1]), b.ints(&[step]));
    b.op0("Slice", &[x, s, e, a, st])
}

/// Emits `op` for `node` when the input's shape is known.
///
/// # Errors
/// [`OpError`] (a decline) for an unknown input shape; shape errors for a
/// rotary size that does not fit the heads.
pub fn decompose(
    op: &RotaryEmbedding,
    node: &Node,
    inputs: &[Option<Fact>],
    b: &mut Builder,
) -> Result<(), OpError> {
    let (x, cos, sin) = (input(node, 0)?, input(node, 1)?, input(node, 2)?);
    let dims = dims(inputs, 0)?;
    let rank3 = dims.len() == 3;
    let size = if rank3 {
        if op.num_heads == 0 || dims[2] % op.num_heads != 0 {
            return Err(OpError::Shape(format!(
                "{dims:?} does not split into {} heads",
                op.num_heads
            )));
        }
        dims[2] / op.num_heads
    } else {
        dims[3]
    };
    let rot = if op.rotary_dim == 0 { size } else { op.rotary_dim };
    if rot > size || rot % 2 != 0 {
        return Err(OpError::Shape(format!("rotary size {rot} for heads of {size}")));
    }
    // [batch, seq, heads, size]
    let xs = if rank3 {
        b.reshape(x, &[0, 0, op.num_heads as i64, size as i64])
    } else {
        b.transpose(x, &[0, 2, 1, 3])
    };
    let gather = |b: &mut Builder, cache: ValueId| match node.input(3) {
        Some(pos) => b.op("Gather", &[cache, pos], attrs(vec![("axis", Attribute::Int(0))])),
        None => cache,
    };
    let (c, s) = (gather(b, cos), gather(b, sin));
    let (c, s) = (b.unsqueeze(c, &[2]), b.unsqueeze(s, &[2]));
    let half = rot / 2;
    let (x1, x2) = if op.interleaved {
        (slice_last(b, xs, 0, rot, 2), slice_last(b, xs, 1, rot, 2))
    } else {
        (slice_last(b, xs, 0, half, 1), slice_last(b, xs, half, rot, 1))
    };
    let (c1, s2) = (b.op0("Mul", &[c, x1]), b.op0("Mul", &[s, x2]));
    let real = b.op0("Sub", &[c1, s2]);
    let (s1, c2) = (b.op0("Mul", &[s, x1]), b.op0("Mul", &[c, x2]));
    let imag = b.op0("Add", &[s1, c2]);
    let last = || attrs(vec![("axis", Attribute::Int(-1))]);
    let rotated = if op.interleaved {
        let (r, i) = (b.unsqueeze(real, &[-1]), b.unsqueeze(imag, &[-1]));
        let pairs = b.op("Concat", &[r, i], last());
        b.reshape(pairs, &[0, 0, 0, rot as i64])
    } else {
        b.op("Concat", &[real, imag], last())
    };
    let all = if rot < size {
        let pass = slice_last(b, xs, rot, size, 1);
        b.op("Concat", &[rotated, pass], last())
    } else {
        rotated
    };
    let out = b.output(node, 0);
    if rank3 {
        let shape = b.ints(&[0, 0, -1]);
        b.emit("Reshape", &[Some(all), Some(shape)], attrs(vec![]), vec![Some(out)]);
    } else {
        let perm = attrs(vec![("perm", Attribute::Ints(vec![0, 2, 1, 3]))]);
        b.emit("Transpose", &[Some(all)], perm, vec![Some(out)]);
    }
    Ok(())
}
