//! Padding masks expanded per query row, as transformers 5 builds them for
//! eager attention:
//!
//! ```text
//! keep = And(T, P)            T: `arange(q) >= 0` as [1, 1, q, 1], always true
//!                             P: the padding mask as [batch, 1, 1, keys]
//! mask = Where(Expand(keep, [batch, 1, q, keys]), 0, finfo.min)
//! ```
//!
//! For an `Attention`, which broadcasts its mask to `[batch, heads, q, keys]`
//! itself, that mask equals `Where(P, 0, finfo.min)`: every query row of it
//! is the same. Fed the small form, a provider's kernel reads one row of
//! mask terms per key tile instead of one per query and key (the CUDA
//! kernel's `attention_fa` against `attention_fam`), and the expanded
//! `[batch, 1, q, keys]` tensors are never computed when nothing else reads
//! them.
//!
//! `T` is proven true from the graph: comparisons `x >= c` (or `x > c`)
//! where every element of `x` is at least (above) `c` because `x` is a
//! `Range` with a constant start and a positive constant step, seen through
//! reshapes and casts; `And` of true values; constants and `ConstantOfShape`
//! of true.

use super::chain::Links;
use crate::graph::{Attribute, DEFAULT_DOMAIN, ValueId};

/// A matched expanded padding mask.
pub(super) struct KeyMask {
    /// The `Where`, `Expand` and `And` nodes that build the expanded mask.
    pub nodes: [usize; 3],
    /// The padding mask `P` and `Where`'s two scalar branches.
    pub pad: ValueId,
    pub then: ValueId,
    pub otherwise: ValueId,
}

/// The expanded padding mask written into `mask`, if it is one.
pub(super) fn find(l: &Links<'_>, mask: ValueId) -> Option<KeyMask> {
    let w = l.writer(mask, "Where")?;
    let (cond, then, otherwise) = (l.node(w).input(0)?, l.node(w).input(1)?, l.node(w).input(2)?);
    if [then, otherwise].iter().any(|&v| l.constant(v).is_none_or(|t| t.numel() != 1)) {
        return None;
    }
    let e = l.writer(cond, "Expand").filter(|_| l.single(cond))?;
    let keep = l.node(e).input(0)?;
    let a = l.writer(keep, "And").filter(|_| l.single(keep))?;
    let (x, y) = (l.node(a).input(0)?, l.node(a).input(1)?);
    let pad = if all_true(l, x, 0) {
        y
    } else if all_true(l, y, 0) {
        x
    } else {
        return None;
    };
    Some(KeyMask { nodes: [w, e, a], pad, then, otherwise })
}

/// Deepest chain of nodes followed when proving a value true or bounded.
const DEPTH: usize = 12;

/// Whether every element of the bool value `v` is provably true.
fn all_true(l: &Links<'_>, v: ValueId, depth: usize) -> bool {
    if depth > DEPTH {
        return false;
    }
    if let Some(t) = l.constant(v) {
        return t.to_f64_vec().is_ok_and(|x| x.iter().all(|&e| e != 0.0));
    }
    let Some(&i) = l.writer.get(&v) else { return false };
    let n = l.node(i);
    if n.domain != DEFAULT_DOMAIN {
        return false;
    }
    let input = |k: usize| n.input(k);
    match n.op_type.as_str() {
        "And" => {
            input(0).is_some_and(|a| all_true(l, a, depth + 1))
                && input(1).is_some_and(|b| all_true(l, b, depth + 1))
        }
        // Only a cast between bools keeps the question the same.
        "Cast" | "Identity" => input(0).is_some_and(|x| {
            let to_bool = n.op_type == "Identity" || n.attrs.int("to").ok().flatten() == Some(9);
            to_bool && all_true(l, x, depth + 1)
        }),
        "ConstantOfShape" => match n.attrs.get("value") {
            Some(Attribute::Tensor(t)) => t.to_f64_vec().is_ok_and(|x| x.iter().all(|&e| e != 0.0)),
            _ => false,
        },
        "GreaterOrEqual" | "Greater" => {
            let (Some(x), Some(c)) = (input(0), input(1)) else { return false };
            let (Some(least), Some(c)) = (least(l, x, depth + 1), scalar(l, c)) else {
                return false;
            };
            if n.op_type == "Greater" { least > c } else { least >= c }
        }
        _ => false,
    }
}

/// A lower bound on every element of `v`: the start of a `Range` with a
/// positive constant step, through reshapes and widening casts.
fn least(l: &Links<'_>, v: ValueId, depth: usize) -> Option<f64> {
    if depth > DEPTH {
        return None;
    }
    let i = *l.writer.get(&v)?;
    let n = l.node(i);
    if n.domain != DEFAULT_DOMAIN {
        return None;
    }
    match n.op_type.as_str() {
        "Range" => {
            let (start, step) = (scalar(l, n.input(0)?)?, scalar(l, n.input(2)?)?);
            (step > 0.0).then_some(start)
        }
        "Unsqueeze" | "Reshape" | "Squeeze" | "Flatten" | "Expand" | "Identity" => {
            least(l, n.input(0)?, depth + 1)
        }
        // Casts to wide signed integers or floats keep the order and the
        // small non-negative values ranges start from.
        "Cast" => {
            let to = n.attrs.int("to").ok().flatten()?;
            // int32, int64, float, double, float16.
            [6, 7, 1, 11, 10].contains(&to).then_some(())?;
            least(l, n.input(0)?, depth + 1)
        }
        _ => None,
    }
}

/// The value of a one-element constant of any numeric type.
fn scalar(l: &Links<'_>, v: ValueId) -> Option<f64> {
    let t = l.constant(v).filter(|t| t.numel() == 1)?;
    t.to_f64_vec().ok().map(|x| x[0])
}

#[cfg(test)]
mod tests {
    use super::super::test_graph::{graph, node};
    use super::*;
    use crate::graph::{Attributes, Graph};
    use crate::tensor::Tensor;

    /// transformers' mask: values 0 = padding mask P `[b, 1, 1, k]` (bool),
    /// 1 = the Range's limit; constants 2 (start), 3 (step), 4 (0, compared
    /// with), 5 (the Expand target), 6 and 7 (Where's branches); the mask is 14.
    fn mask_graph(start: i64, step: i64, op: &str) -> Graph {
        let mut unsq = node("Unsqueeze", &[8, 5], 9);
        unsq.opset = 13;
        let mut cast = node("Cast", &[10], 11);
        cast.attrs = Attributes(vec![("to".into(), Attribute::Int(9))]);
        let nodes = vec![
            node("Range", &[2, 1, 3], 8),
            unsq,
            node(op, &[9, 4], 10),
            cast,
            node("And", &[11, 0], 12),
            node("Expand", &[12, 5], 13),
            node("Where", &[13, 6, 7], 14),
        ];
        graph(
            15,
            nodes,
            &[0, 1],
            &[14],
            vec![
                (2, Tensor::scalar(start)),
                (3, Tensor::scalar(step)),
                (4, Tensor::scalar(0i64)),
                (5, Tensor::from_vec(vec![4], vec![2i64, 1, 8, 8]).unwrap()),
                (6, Tensor::scalar(0f32)),
                (7, Tensor::scalar(-3.4e38f32)),
            ],
        )
    }

    #[test]
    fn a_padding_mask_expanded_with_an_always_true_range_test_is_found() {
        let g = mask_graph(0, 1, "GreaterOrEqual");
        let m = find(&Links::new(&g), ValueId(14)).expect("found");
        assert_eq!(m.pad, ValueId(0));
        assert_eq!((m.then, m.otherwise), (ValueId(6), ValueId(7)));
        assert_eq!(m.nodes, [6, 5, 4]);
        // `Range(1, n, 1) > 0` holds everywhere too.
        assert!(find(&Links::new(&mask_graph(1, 1, "Greater")), ValueId(14)).is_some());
    }

    #[test]
    fn a_range_that_may_fall_below_the_bound_proves_nothing() {
        for (start, step, op) in
            [(0, -1, "GreaterOrEqual"), (-1, 1, "GreaterOrEqual"), (0, 1, "Greater")]
        {
            let g = mask_graph(start, step, op);
            assert!(find(&Links::new(&g), ValueId(14)).is_none(), "{start} {step} {op}");
        }
    }
}
