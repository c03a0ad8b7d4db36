//! Attention: transformers' eager attention, as `torch.onnx.export` writes it,
//!
//! ```text
//! Q = Transpose(…)                      [batch, heads, seq, size]
//! Kᵀ = Transpose(K', perm 0,2,3,1)      K' is [batch, seq, heads, size]
//! s = MatMul(Q, Kᵀ) / c   (or · c)
//! p = Softmax(s + mask, axis -1)
//! y = MatMul(p, V)                      V = Transpose(…), 4-D
//! ```
//!
//! becomes one ai.onnx `Attention` (opset 23) over 4-D heads, with `scale`
//! set from the constant (1 when there is none) and the mask as `attn_mask`.
//! K' reaches it through one `Transpose(perm 0,2,1,3)` (or directly, when
//! Kᵀ was `Transpose(K, perm 0,1,3,2)`). Each tensor is proven 4-D by the
//! 4-long permutation that writes it; the fused op checks the rest of its
//! geometry (heads, sizes, the mask's broadcast) when the graph is inferred.
//!
//! The score matrix (`batch × heads × seq²`, the largest activation of an
//! encoder) and the three elementwise passes over it are gone: a provider's
//! `Attention` kernel keeps the scores on chip.
//!
//! **The row form.** Where Q, K and V are the head transposes of reshapes to
//! `[batch, seq, heads, size]` whose head counts are constants in the
//! reshape targets, and the output goes through the inverse transpose, the
//! fused op takes the 3-D form instead (`[batch, seq, heads × size]`, with
//! `q_num_heads`/`kv_num_heads`): views of the reshapes in, a view of its
//! output out. The four transposes of the layer, copies on every device, go.
//!
//! **Masks.** A padding mask that transformers expanded to a row per query
//! (see [`key_mask`]) is replaced by its `[batch, 1, 1, keys]` form, which
//! `Attention` broadcasts itself; the expanded one is dropped when only
//! fused chains read it.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use super::chain::{Links, op_node};
use super::key_mask::{self, KeyMask};
use super::rewrite::Rewrite;
use crate::graph::{Attribute, DEFAULT_DOMAIN, Graph, Node, ValueId};
use crate::tensor::Tensor;

/// Where the fused op's K (`[batch, heads, keys, size]`) comes from.
enum Keys {
    /// Already in head order: the input of `Transpose(perm 0,1,3,2)`.
    Heads(ValueId),
    /// In row order (`[batch, keys, heads, size]`): needs `Transpose(perm 0,2,1,3)`.
    Rows(ValueId),
}

/// A matched chain.
struct Found {
    /// Nodes replaced, the second MatMul last.
    chain: Vec<usize>,
    q: ValueId,
    k: Keys,
    v: ValueId,
    mask: Option<ValueId>,
    scale: f64,
}

/// The permutation of the Transpose node writing `v`.
fn perm_of(l: &Links<'_>, v: ValueId) -> Option<(usize, Vec<i64>)> {
    let t = l.writer(v, "Transpose")?;
    let perm = l.node(t).attrs.ints("perm").ok()??;
    Some((t, perm))
}

/// Whether `v` is written by a Transpose with a 4-long permutation (so it is 4-D).
fn four_d(l: &Links<'_>, v: ValueId) -> bool {
    perm_of(l, v).is_some_and(|(_, p)| p.len() == 4)
}

/// `MatMul(Q, Kᵀ)`, scaled by a constant or not, written to `x`: the nodes,
/// Q, K and the scale.
fn scores(l: &Links<'_>, x: ValueId) -> Option<(Vec<usize>, ValueId, Keys, f64)> {
    if !l.single(x) {
        return None;
    }
    let mut nodes = Vec::new();
    let (s, scale) = if let Some(d) = l.writer(x, "Div") {
        nodes.push(d);
        let n = l.node(d);
        let c = l.scalar(n.input(1)?)?;
        (n.input(0)?, 1.0 / c)
    } else if let Some(m) = l.writer(x, "Mul") {
        nodes.push(m);
        let n = l.node(m);
        let (a, b) = (n.input(0)?, n.input(1)?);
        match l.scalar(b) {
            Some(c) => (a, c),
            None => (b, l.scalar(a)?),
        }
    } else {
        (x, 1.0)
    };
    if !scale.is_finite() || (s != x && !l.single(s)) {
        return None;
    }
    let mm = l.writer(s, "MatMul")?;
    nodes.insert(0, mm);
    let (q, kt) = (l.node(mm).input(0)?, l.node(mm).input(1)?);
    if !four_d(l, q) {
        return None;
    }
    let (t, perm) = perm_of(l, kt)?;
    let source = l.node(t).input(0)?;
    let k = match perm.as_slice() {
        [0, 2, 3, 1] => Keys::Rows(source),
        [0, 1, 3, 2] => Keys::Heads(source),
        _ => return None,
    };
    if l.single(kt) {
        nodes.insert(0, t);
    }
    Some((nodes, q, k, scale))
}

/// `x` when it is `Transpose(source, perm)` with exactly `perm`: the node and the source.
fn transposed_from(l: &Links<'_>, x: ValueId, perm: &[i64]) -> Option<(usize, ValueId)> {
    let (t, p) = perm_of(l, x)?;
    (p == perm).then_some(())?;
    Some((t, l.node(t).input(0)?))
}

/// The head count of the 4-D value `v` (its dim 2) when the Reshape writing
/// it states it: a constant target, or a Concat whose trailing pieces are
/// constants covering its last two entries (the exporters' `x.size()[:-1] +
/// (heads, size)` and `view(b, -1, heads, size)`), or `-1` there with the
/// width of the projection reshaped known (`view(*shape, -1, size)`). `v`
/// is known to be 4-D, so dim 2 is the target's second-to-last entry however
/// many leading entries the other pieces hold.
fn reshaped_heads(l: &Links<'_>, v: ValueId) -> Option<i64> {
    let r = l.writer(v, "Reshape")?;
    let target = l.node(r).input(1)?;
    let mut tail: Vec<i64> = Vec::new();
    if let Some(t) = l.constant(target) {
        tail = t.to_i64_vec().ok()?;
    } else {
        let c = l.writer(target, "Concat")?;
        for &u in l.node(c).inputs.iter().rev() {
            let Some(t) = l.constant(u?) else { break };
            let mut piece = t.to_i64_vec().ok()?;
            piece.append(&mut tail);
            tail = piece;
        }
    }
    let (heads, size) = (*tail.iter().rev().nth(1)?, *tail.last()?);
    if heads > 0 {
        return Some(heads);
    }
    // `view(…, -1, size)`: the heads are the projection's width over the size.
    let width = projected_width(l, l.node(r).input(0)?)?;
    (heads == -1 && size > 0 && width % size == 0).then_some(width / size)
}

/// The width of `x = MatMul(…, W)` or `x = MatMul(…, W) + bias`, from the
/// constant 2-D weight W.
fn projected_width(l: &Links<'_>, x: ValueId) -> Option<i64> {
    let m = match l.writer(x, "Add") {
        Some(a) => {
            let n = l.node(a);
            let (u, w) = (n.input(0)?, n.input(1)?);
            l.writer(u, "MatMul").or_else(|| l.writer(w, "MatMul"))?
        }
        None => l.writer(x, "MatMul")?,
    };
    let w = l.constant(l.node(m).input(1)?)?;
    match w.shape() {
        [_, n] => i64::try_from(*n).ok(),
        _ => None,
    }
}

/// The row form of a chain (see the module docs).
struct Rows {
    /// The `[batch, seq, heads, size]` reshapes of Q, K and V.
    q: ValueId,
    k: ValueId,
    v: ValueId,
    heads: i64,
    kv_heads: i64,
    /// The transposes replaced besides the chain's (Q's and V's when read
    /// only by the chain, and the output's).
    more: Vec<usize>,
    /// The output transpose's result, `[batch, seq, heads, v_size]`.
    out: ValueId,
}

fn rows(l: &Links<'_>, f: &Found, k_rows: ValueId) -> Option<Rows> {
    const HEADS: [i64; 4] = [0, 2, 1, 3];
    let (tq, q) = transposed_from(l, f.q, &HEADS)?;
    let (tv, v) = transposed_from(l, f.v, &HEADS)?;
    let heads = reshaped_heads(l, q)?;
    let kv_heads = reshaped_heads(l, k_rows)?;
    if reshaped_heads(l, v)? != kv_heads {
        return None;
    }
    let y = l.out0(*f.chain.last()?)?;
    let to = l.next(y, "Transpose")?;
    let out = l.out0(to)?;
    transposed_from(l, out, &HEADS)?;
    let mut more = vec![to];
    more.extend([(f.q, tq), (f.v, tv)].into_iter().filter(|&(x, _)| l.single(x)).map(|(_, t)| t));
    Some(Rows { q, k: k_rows, v, heads, kv_heads, more, out })
}

/// The chain ending in the Softmax node `i`, if it is one.
fn find(l: &Links<'_>, i: usize) -> Option<Found> {
    let sm = l.node(i);
    let last_axis = match sm.attrs.int("axis") {
        Ok(Some(-1)) => true,
        Ok(None) => sm.opset >= 13,
        _ => false,
    };
    if !last_axis {
        return None;
    }
    let x = sm.input(0)?;
    let p = l.out0(i)?;
    let mm2 = l.next(p, "MatMul")?;
    let v = l.node(mm2).input(1)?;
    if l.node(mm2).input(0) != Some(p) || !four_d(l, v) {
        return None;
    }
    // `s + mask` in either order, or the scores alone.
    let masked = l.writer(x, "Add").filter(|_| l.single(x)).and_then(|a| {
        let (u, w) = (l.node(a).input(0)?, l.node(a).input(1)?);
        if let Some(found) = scores(l, u) {
            Some((a, found, w))
        } else {
            scores(l, w).map(|found| (a, found, u))
        }
    });
    let (mut chain, q, k, scale, mask) = match masked {
        Some((add, (mut nodes, q, k, scale), mask)) => {
            nodes.push(add);
            (nodes, q, k, scale, Some(mask))
        }
        None => {
            let (nodes, q, k, scale) = scores(l, x)?;
            (nodes, q, k, scale, None)
        }
    };
    chain.extend([i, mm2]);
    Some(Found { chain, q, k, v, mask, scale })
}

/// The row form's nodes: Q, K and V reshaped to 3-D (views), the 3-D
/// `Attention`, and its output reshaped to the output transpose's
/// `[batch, seq, heads, v_size]`.
fn row_nodes(graph: &Graph, rw: &mut Rewrite, f: &Found, r: &Rows, name: &str) -> Vec<Node> {
    let flat = rw.constant(
        graph,
        format!("{name}/flat"),
        Tensor::from_vec(vec![3], vec![0i64, 0, -1]).expect("3 dims"),
    );
    let split = rw.constant(
        graph,
        format!("{name}/split"),
        Tensor::from_vec(vec![4], vec![0i64, 0, r.heads, -1]).expect("4 dims"),
    );
    let mut nodes = Vec::new();
    let mut inputs = Vec::new();
    for (x, tag) in [(r.q, "Q"), (r.k, "K"), (r.v, "V")] {
        let v = rw.value(graph, format!("{name}/{tag}"));
        nodes.push(op_node(&format!("{name}/{tag}"), "Reshape", 14, &[x, flat], v, vec![]));
        inputs.push(v);
    }
    inputs.extend(f.mask);
    let y = rw.value(graph, format!("{name}/Y"));
    nodes.push(op_node(
        name,
        "Attention",
        23,
        &inputs,
        y,
        vec![
            ("scale", Attribute::Float(f.scale as f32)),
            ("q_num_heads", Attribute::Int(r.heads)),
            ("kv_num_heads", Attribute::Int(r.kv_heads)),
        ],
    ));
    nodes.push(op_node(&format!("{name}/heads"), "Reshape", 14, &[y, split], r.out, vec![]));
    nodes
}

/// Padding masks expanded per query row ([`key_mask`]) that fused chains
/// read in their small form: per expanded mask, its match, the small mask
/// once made, and how many fused chains read it.
#[derive(Default)]
struct SmallMasks(HashMap<ValueId, (KeyMask, Option<ValueId>, usize)>);

impl SmallMasks {
    /// The mask a chain's `Attention` reads for `mask`: its small form, made
    /// by a `Where` pushed onto `nodes` the first time, or `mask` itself.
    fn take(
        &mut self,
        l: &Links<'_>,
        rw: &mut Rewrite,
        mask: ValueId,
        nodes: &mut Vec<Node>,
    ) -> ValueId {
        let (m, small, uses) = match self.0.entry(mask) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => match key_mask::find(l, mask) {
                Some(m) => e.insert((m, None, 0)),
                None => return mask,
            },
        };
        *uses += 1;
        *small.get_or_insert_with(|| {
            let name = format!("{}/keys", l.graph.values[mask.index()].name);
            let v = rw.value(l.graph, name.clone());
            nodes.push(op_node(&name, "Where", 16, &[m.pad, m.then, m.otherwise], v, vec![]));
            v
        })
    }

    /// Drops the expanded masks that only fused chains read.
    fn drop_unread(self, l: &Links<'_>, rw: &mut Rewrite) {
        for (mask, (m, _, uses)) in self.0 {
            if l.readers.get(&mask) == Some(&uses) {
                rw.unread.extend(m.nodes);
            }
        }
    }
}

/// The graph with every attention chain fused, or `None` when it has none.
pub(super) fn fuse(graph: &Graph) -> Rewrite {
    let l = Links::new(graph);
    let mut rw = Rewrite::default();
    let mut small = SmallMasks::default();
    for (i, n) in graph.nodes.iter().enumerate() {
        if n.op_type != "Softmax" || n.domain != DEFAULT_DOMAIN {
            continue;
        }
        let Some(mut f) = find(&l, i) else { continue };
        if f.chain.iter().any(|&c| rw.taken(c)) {
            continue;
        }
        let last = l.node(*f.chain.last().unwrap_or(&i));
        let Some(out) = last.outputs.first().copied().flatten() else { continue };
        let name = format!("{}/Attention", last.name);
        let mut mask_nodes = Vec::new();
        f.mask = f.mask.map(|m| small.take(&l, &mut rw, m, &mut mask_nodes));
        let row_form = match f.k {
            Keys::Rows(k) => rows(&l, &f, k).filter(|r| !r.more.iter().any(|&t| rw.taken(t))),
            Keys::Heads(_) => None,
        };
        if let Some(r) = row_form {
            let mut nodes = mask_nodes;
            nodes.extend(row_nodes(graph, &mut rw, &f, &r, &name));
            let mut chain = f.chain.clone();
            chain.extend(&r.more);
            rw.replace(&chain, nodes);
            continue;
        }
        let mut nodes = mask_nodes;
        let k = match f.k {
            Keys::Heads(k) => k,
            Keys::Rows(rows) => {
                let k = rw.value(graph, format!("{name}/K"));
                nodes.push(op_node(
                    &format!("{name}/K"),
                    "Transpose",
                    13,
                    &[rows],
                    k,
                    vec![("perm", Attribute::Ints(vec![0, 2, 1, 3]))],
                ));
                k
            }
        };
        let mut inputs = vec![f.q, k, f.v];
        inputs.extend(f.mask);
        nodes.push(op_node(
            &name,
            "Attention",
            23,
            &inputs,
            out,
            vec![("scale", Attribute::Float(f.scale as f32))],
        ));
        rw.replace(&f.chain, nodes);
    }
    small.drop_unread(&l, &mut rw);
    rw
}

#[cfg(test)]
mod tests {
    use super::super::test_graph::{graph, node};
    use super::*;

    /// The pass's proposals, applied without the fact check.
    fn fuse(g: &Graph) -> Option<Graph> {
        super::fuse(g).unchecked(g)
    }

    use crate::graph::Attributes;

    fn transpose(input: u32, out: u32, perm: &[i64]) -> Node {
        let mut n = node("Transpose", &[input], out);
        n.attrs = Attributes(vec![("perm".into(), Attribute::Ints(perm.to_vec()))]);
        n
    }

    /// Inputs q'=0, k'=1, v'=2 (row order), mask=3, √d=4; output y=13.
    fn chain(k_perm: &[i64], extra_reader: bool) -> Graph {
        let mut nodes = vec![
            transpose(0, 5, &[0, 2, 1, 3]),
            transpose(1, 6, k_perm),
            transpose(2, 7, &[0, 2, 1, 3]),
            node("MatMul", &[5, 6], 8),
            node("Div", &[8, 4], 9),
            node("Add", &[3, 9], 10),
            node("Softmax", &[10], 11),
            node("MatMul", &[11, 7], 13),
        ];
        nodes[6].attrs = Attributes(vec![("axis".into(), Attribute::Int(-1))]);
        if extra_reader {
            nodes.push(node("Neg", &[9], 14));
        }
        graph(15, nodes, &[0, 1, 2, 3], &[13], vec![(4, Tensor::scalar(8f32))])
    }

    #[test]
    fn transformers_eager_attention_becomes_one_attention_op() {
        let g = fuse(&chain(&[0, 2, 3, 1], false)).expect("fused");
        let ops: Vec<&str> = g.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, ["Transpose", "Transpose", "Transpose", "Attention"]);
        let a = &g.nodes[3];
        assert_eq!(a.opset, 23);
        let k = g.nodes[2].outputs[0];
        assert_eq!(g.nodes[2].inputs, vec![Some(ValueId(1))]);
        assert_eq!(g.nodes[2].attrs.ints("perm").unwrap(), Some(vec![0, 2, 1, 3]));
        assert_eq!(a.inputs, vec![Some(ValueId(5)), k, Some(ValueId(7)), Some(ValueId(3))]);
        assert_eq!(a.outputs, vec![Some(ValueId(13))]);
        assert_eq!(a.attrs.float("scale").unwrap(), Some(0.125));
        assert_eq!(g.values.len(), 16);
    }

    #[test]
    fn keys_already_in_head_order_need_no_transpose() {
        let g = fuse(&chain(&[0, 1, 3, 2], false)).expect("fused");
        let a = g.nodes.iter().find(|n| n.op_type == "Attention").expect("attention");
        assert_eq!(a.input(1), Some(ValueId(1)));
        assert_eq!(g.nodes.len(), 3);
    }

    /// [`chain`] with its mask (3) built as transformers 5 expands a padding
    /// mask: `Where(Expand(And(Range(0, n, 1) >= 0, pad), shape), 0, min)`,
    /// with the padding mask `pad` = 20 and n = 21 inputs.
    fn chain_with_expanded_mask(extra_reader: bool) -> Graph {
        let mut g = chain(&[0, 2, 3, 1], false);
        let mask_nodes = vec![
            node("Range", &[22, 21, 23], 24),
            node("GreaterOrEqual", &[24, 25], 26),
            node("And", &[26, 20], 27),
            node("Expand", &[27, 28], 29),
            node("Where", &[29, 30, 31], 3),
        ];
        let mut nodes = mask_nodes;
        nodes.append(&mut g.nodes);
        if extra_reader {
            nodes.push(node("Neg", &[3], 32));
        }
        let consts = [
            (22, Tensor::scalar(0i64)),
            (23, Tensor::scalar(1i64)),
            (25, Tensor::scalar(0i64)),
            (28, Tensor::from_vec(vec![4], vec![2i64, 1, 8, 8]).unwrap()),
            (30, Tensor::scalar(0f32)),
            (31, Tensor::scalar(-3.4e38f32)),
            (4, Tensor::scalar(8f32)),
        ];
        let outputs: &[u32] = if extra_reader { &[13, 32] } else { &[13] };
        graph(33, nodes, &[0, 1, 2, 20, 21], outputs, consts.into_iter().collect())
    }

    #[test]
    fn a_padding_mask_expanded_per_query_row_reaches_attention_in_its_small_form() {
        let g = fuse(&chain_with_expanded_mask(false)).expect("fused");
        let ops: Vec<&str> = g.nodes.iter().map(|n| n.op_type.as_str()).collect();
        // The expanded mask's And, Expand and Where are gone; the always-true
        // Range test stays, unread.
        assert_eq!(
            ops,
            [
                "Range",
                "GreaterOrEqual",
                "Transpose",
                "Transpose",
                "Where",
                "Transpose",
                "Attention"
            ]
        );
        let w = &g.nodes[4];
        assert_eq!(w.inputs, vec![Some(ValueId(20)), Some(ValueId(30)), Some(ValueId(31))]);
        assert_eq!(g.nodes[6].input(3), w.outputs[0]);

        // Read elsewhere too, the expanded mask stays for that reader.
        let g = fuse(&chain_with_expanded_mask(true)).expect("fused");
        let ops: Vec<&str> = g.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert!(ops.contains(&"Expand") && ops.contains(&"Neg"), "{ops:?}");
        let a = g.nodes.iter().find(|n| n.op_type == "Attention").expect("attention");
        assert_ne!(a.input(3), Some(ValueId(3)));
    }

    #[test]
    fn scores_read_elsewhere_or_other_key_layouts_are_left_alone() {
        assert!(fuse(&chain(&[0, 2, 3, 1], true)).is_none());
        assert!(fuse(&chain(&[0, 3, 2, 1], false)).is_none());
    }

    /// q, k, v `[b, s, 64]` = 0, 1, 2, mask = 3, √d = 4, the target
    /// `[0, 0, 4, 16]` = 5 and `[0, 0, 64]` = 18; output 19.
    fn row_chain(heads_known: bool) -> Graph {
        let mut nodes = vec![
            node("Reshape", &[0, 5], 6),
            node("Reshape", &[1, 5], 7),
            node("Reshape", &[2, 5], 8),
            transpose(6, 9, &[0, 2, 1, 3]),
            transpose(7, 10, &[0, 2, 3, 1]),
            transpose(8, 11, &[0, 2, 1, 3]),
            node("MatMul", &[9, 10], 12),
            node("Div", &[12, 4], 13),
            node("Add", &[13, 3], 14),
            node("Softmax", &[14], 15),
            node("MatMul", &[15, 11], 16),
            transpose(16, 17, &[0, 2, 1, 3]),
            node("Reshape", &[17, 18], 19),
        ];
        nodes[9].attrs = Attributes(vec![("axis".into(), Attribute::Int(-1))]);
        let heads = if heads_known { 4 } else { -1 };
        let consts = vec![
            (4, Tensor::scalar(4f32)),
            (5, Tensor::from_vec(vec![4], vec![0i64, 0, heads, 16]).unwrap()),
            (18, Tensor::from_vec(vec![3], vec![0i64, 0, 64]).unwrap()),
        ];
        graph(20, nodes, &[0, 1, 2, 3], &[19], consts)
    }

    #[test]
    fn reshaped_heads_take_the_row_form_without_transposes() {
        let g = fuse(&row_chain(true)).expect("fused");
        let ops: Vec<&str> = g.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert!(!ops.contains(&"Transpose") && !ops.contains(&"Softmax"), "{ops:?}");
        let a = g.nodes.iter().find(|n| n.op_type == "Attention").expect("attention");
        assert_eq!(a.attrs.int("q_num_heads").unwrap(), Some(4));
        assert_eq!(a.attrs.int("kv_num_heads").unwrap(), Some(4));
        assert_eq!(a.attrs.float("scale").unwrap(), Some(0.25));
        // The output reaches the original transpose's value through a reshape.
        let back =
            g.nodes.iter().find(|n| n.outputs == vec![Some(ValueId(17))]).expect("writer of 17");
        assert_eq!(back.op_type, "Reshape");
        assert_eq!(
            g.initializers[&back.inputs[1].unwrap()].to_i64_vec().unwrap(),
            vec![0, 0, 4, -1]
        );
    }

    #[test]
    fn heads_the_graph_does_not_state_keep_the_four_dimensional_form() {
        let g = fuse(&row_chain(false)).expect("fused");
        let a = g.nodes.iter().find(|n| n.op_type == "Attention").expect("attention");
        assert_eq!(a.attrs.int("q_num_heads").unwrap(), None);
        assert!(g.nodes.iter().any(|n| n.op_type == "Transpose"));
    }

    #[test]
    fn heads_from_the_trailing_constants_of_a_concatenated_target_take_the_row_form() {
        // The target is Concat(x.size()[:-1], [4], [16]): 20 is not a constant.
        let mut g = row_chain(true);
        g.initializers.remove(&ValueId(5));
        g.initializers.insert(ValueId(21), Tensor::from_vec(vec![1], vec![4i64]).unwrap());
        g.initializers.insert(ValueId(22), Tensor::from_vec(vec![1], vec![16i64]).unwrap());
        g.nodes.push(node("Concat", &[20, 21, 22], 5));
        g.values.extend(
            (20..23).map(|i| crate::graph::ValueInfo { name: format!("v{i}"), declared: None }),
        );
        g.inputs.push(ValueId(20));
        let g = fuse(&g).expect("fused");
        let a = g.nodes.iter().find(|n| n.op_type == "Attention").expect("attention");
        assert_eq!(a.attrs.int("q_num_heads").unwrap(), Some(4));
    }

    #[test]
    fn heads_left_to_minus_one_come_from_the_projection_width() {
        // q, k, v = MatMul(x_i, W[8, 64]) feed reshapes to [0, 0, -1, 16].
        let mut g = row_chain(true);
        g.initializers
            .insert(ValueId(5), Tensor::from_vec(vec![4], vec![0i64, 0, -1, 16]).unwrap());
        g.initializers.insert(ValueId(21), Tensor::from_vec(vec![8, 64], vec![0f32; 512]).unwrap());
        for (x, out) in [(20, 0), (22, 1), (23, 2)] {
            g.nodes.push(node("MatMul", &[x, 21], out));
        }
        g.values.extend(
            (20..24).map(|i| crate::graph::ValueInfo { name: format!("v{i}"), declared: None }),
        );
        g.inputs = vec![ValueId(20), ValueId(22), ValueId(23), ValueId(3)];
        let g = fuse(&g).expect("fused");
        let a = g.nodes.iter().find(|n| n.op_type == "Attention").expect("attention");
        assert_eq!(a.attrs.int("q_num_heads").unwrap(), Some(4));
        assert_eq!(a.attrs.int("kv_num_heads").unwrap(), Some(4));
    }
}
