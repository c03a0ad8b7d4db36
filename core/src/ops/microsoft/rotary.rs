//! `com.microsoft` `RotaryEmbedding`: inputs `input` (`[batch, seq, heads ×
//! size]` or `[batch, heads, seq, size]`), `position_ids` (int64: one offset,
//! `[1]` or 0-d, or `[batch, seq]`), `cos_cache` and `sin_cache`
//! (`[max_positions, rotary_dim / 2]`).

use super::common::{float_input, same_dtype};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::MICROSOFT_DOMAIN;
use crate::ops::{Fact, InferInputs, Op, OpRegistry, check_inputs};

/// onnxruntime's `RotaryEmbedding`: the leading `rotary_dim` features of each
/// head are rotated pairwise by the angle of the token's position (halves, or
/// adjacent pairs when interleaved); the rest pass through.
#[derive(Debug, Clone, PartialEq)]
pub struct ContribRotary {
    /// Pairs are `(x[2i], x[2i+1])` rather than `(x[i], x[i + rotary_dim/2])`.
    pub interleaved: bool,
    /// Rotated features per head; 0 for the whole head.
    pub rotary_dim: usize,
    /// Heads of a 3-D input; 0 to derive them from the caches' width.
    pub num_heads: usize,
}

/// The sizes of one `RotaryEmbedding` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RopeGeometry {
    /// Batch size.
    pub batch: usize,
    /// Tokens per batch entry.
    pub seq: usize,
    /// Heads.
    pub heads: usize,
    /// Features per head.
    pub head_size: usize,
    /// Rotated features per head (even, at most `head_size`).
    pub rotary_dim: usize,
    /// `[batch, seq, heads × size]` rather than `[batch, heads, seq, size]`.
    pub rank3: bool,
    /// Rows of the caches (the largest position plus one).
    pub max_positions: usize,
}

fn shape_err(msg: String) -> OpError {
    OpError::Shape(format!("RotaryEmbedding: {msg}"))
}

impl ContribRotary {
    /// The sizes, from the input and cache shapes.
    ///
    /// # Errors
    /// [`OpError::Shape`] when they do not fit together.
    pub fn geometry(&self, x: &[usize], cache: &[usize]) -> Result<RopeGeometry, OpError> {
        let &[max_positions, half] = cache else {
            return Err(shape_err(format!("caches must be 2-D, got {cache:?}")));
        };
        let (batch, seq, heads, head_size, rank3) = match *x {
            [b, s, hidden] => {
                let head_size = match (self.num_heads, self.rotary_dim) {
                    (0, 0) => 2 * half,
                    (0, _) => {
                        return Err(shape_err("rotary_embedding_dim needs num_heads".into()));
                    }
                    (n, _) if hidden % n == 0 => hidden / n,
                    (n, _) => {
                        return Err(shape_err(format!("hidden size {hidden} for {n} heads")));
                    }
                };
                if head_size == 0 || hidden % head_size != 0 {
                    return Err(shape_err(format!(
                        "hidden size {hidden} for heads of {head_size}"
                    )));
                }
                (b, s, hidden / head_size, head_size, true)
            }
            [b, n, s, h] => (b, s, n, h, false),
            _ => return Err(shape_err(format!("input {x:?} is neither 3-D nor 4-D"))),
        };
        let rotary_dim = if self.rotary_dim == 0 { head_size } else { self.rotary_dim };
        if rotary_dim > head_size || rotary_dim % 2 != 0 || rotary_dim / 2 != half {
            return Err(shape_err(format!(
                "rotary dim {rotary_dim}, heads of {head_size} and caches {cache:?} do not fit"
            )));
        }
        Ok(RopeGeometry { batch, seq, heads, head_size, rotary_dim, rank3, max_positions })
    }
}

impl Op for ContribRotary {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = float_input(inputs, 0)?;
        same_dtype(inputs, 1, DType::I64)?;
        same_dtype(inputs, 2, x.dtype)?;
        same_dtype(inputs, 3, x.dtype)?;
        if let (Some(dx), Some(dc)) = (x.dims(), inputs.get(2)?.dims()) {
            self.geometry(&dx, &dc)?;
        }
        Ok(vec![x.with_dtype(x.dtype)])
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// Registers `RotaryEmbedding` in `com.microsoft`.
pub fn register_all(r: &mut OpRegistry) {
    r.register_in(MICROSOFT_DOMAIN, "RotaryEmbedding", |n| {
        check_inputs(n, 4, 4)?;
        if n.attrs.flag_or("is_packed_batching", false)? {
            return Err(OpError::Unsupported("RotaryEmbedding with is_packed_batching".into()));
        }
        Ok(Box::new(ContribRotary {
            interleaved: n.attrs.flag_or("interleaved", false)?,
            rotary_dim: super::common::count_or(n, "rotary_embedding_dim", 0)?,
            num_heads: super::common::count_or(n, "num_heads", 0)?,
        }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(rotary_dim: usize, num_heads: usize) -> ContribRotary {
        ContribRotary { interleaved: false, rotary_dim, num_heads }
    }

    #[test]
    fn without_num_heads_the_head_size_is_twice_the_cache_width() {
        let g = op(0, 0).geometry(&[2, 3, 16], &[16, 4]).unwrap();
        assert_eq!((g.heads, g.head_size, g.rotary_dim, g.rank3), (2, 8, 8, true));
    }

    #[test]
    fn partial_rotation_needs_num_heads_and_a_matching_cache() {
        assert!(op(4, 0).geometry(&[2, 3, 16], &[16, 2]).is_err());
        let g = op(4, 2).geometry(&[2, 3, 16], &[16, 2]).unwrap();
        assert_eq!((g.head_size, g.rotary_dim), (8, 4));
        assert!(op(4, 2).geometry(&[2, 3, 16], &[16, 4]).is_err());
        let g = op(0, 0).geometry(&[2, 2, 3, 8], &[16, 4]).unwrap();
        assert_eq!((g.heads, g.seq, g.rank3), (2, 3, false));
    }
}
