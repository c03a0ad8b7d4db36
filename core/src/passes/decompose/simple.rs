//! Small decompositions: `Trilu`, `EyeLike` and `OneHot` as constants and
//! comparisons, `Swish`/`SwiGLU` as sigmoids, `LpNormalization` as a reduced
//! norm, `DepthToSpace`/`SpaceToDepth` as reshapes around a transpose, and
//! `LpPool` as an average pool of powers.

use super::builder::{Builder, attrs, cast_to, decline, dims, fact, input, tensor};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::{Attribute, Node};
use crate::ops::Fact;
use crate::ops::attention::Swish;
use crate::ops::scatter::{DepthSpace, EyeLike, OneHot, Trilu};
use crate::ops::spatial::LpPool;
use crate::ops::stats::LpNorm;
use crate::tensor::Tensor;

fn dtype(inputs: &[Option<Fact>], i: usize) -> Result<DType, OpError> {
    Ok(fact(inputs, i)?.dtype)
}

/// `Where(keep, x, 0)` with `keep` comparing the constant `col - row` with `k`.
pub fn trilu(
    op: &Trilu,
    node: &Node,
    inputs: &[Option<Fact>],
    b: &mut Builder,
) -> Result<(), OpError> {
    let x = input(node, 0)?;
    let d = dims(inputs, 0)?;
    let (n, m) = (d[d.len() - 2], d[d.len() - 1]);
    let diff: Vec<i64> = (0..n * m).map(|i| (i % m) as i64 - (i / m) as i64).collect();
    let diff = b.constant(tensor(vec![n, m], diff)?);
    let k = match node.input(1) {
        Some(k) => k,
        None => b.constant(Tensor::scalar(0i64)),
    };
    let keep = b.op0(if op.upper { "GreaterOrEqual" } else { "LessOrEqual" }, &[diff, k]);
    let zero = b.constant(Tensor::zeros(dtype(inputs, 0)?, vec![]));
    let out = b.output(node, 0);
    b.emit("Where", &[Some(keep), Some(x), Some(zero)], attrs(vec![]), vec![Some(out)]);
    Ok(())
}

/// A constant identity-like matrix (in f32), cast to the output dtype.
pub fn eye_like(
    op: &EyeLike,
    node: &Node,
    inputs: &[Option<Fact>],
    b: &mut Builder,
) -> Result<(), OpError> {
    let d = dims(inputs, 0)?;
    if d.len() != 2 {
        return Err(decline("EyeLike of a non-matrix"));
    }
    let (n, m) = (d[0], d[1]);
    let v: Vec<f32> = (0..n * m)
        .map(|i| if (i % m) as i64 - (i / m) as i64 == op.k { 1.0 } else { 0.0 })
        .collect();
    let eye = b.constant(tensor(vec![n, m], v)?);
    let to = op.dtype.unwrap_or(dtype(inputs, 0)?);
    let out = b.output(node, 0);
    b.emit("Cast", &[Some(eye)], cast_to(to), vec![Some(out)]);
    Ok(())
}

/// `Where(index == position, on, off)` with the positions a constant along the new axis.
pub fn one_hot(
    op: &OneHot,
    node: &Node,
    inputs: &[Option<Fact>],
    b: &mut Builder,
) -> Result<(), OpError> {
    let idx = input(node, 0)?;
    let values = input(node, 2)?;
    let rank = inputs
        .first()
        .and_then(Option::as_ref)
        .and_then(Fact::rank)
        .ok_or_else(|| decline("OneHot indices of unknown rank"))?;
    let axis = op.axis(rank)?;
    let mut shape = vec![1; rank + 1];
    let known = inputs.get(1).and_then(Option::as_ref).and_then(|f| f.value.as_ref());
    let (positions, depth) = match known {
        Some(depth) => {
            let d = depth.to_f64_vec().map_err(|e| OpError::Invalid(e.to_string()))?;
            let d = OneHot::depth(&d)?;
            shape[axis] = d;
            let positions = b.constant(tensor(shape, (0..d as i64).collect())?);
            (positions, b.constant(Tensor::scalar(d as i64)))
        }
        None => {
            // The depth arrives at run time: the positions are a Range over it.
            let d = b.cast(input(node, 1)?, DType::I64);
            let d = b.reshape(d, &[]);
            let zero = b.constant(Tensor::scalar(0i64));
            let one = b.constant(Tensor::scalar(1i64));
            let range = b.op0("Range", &[zero, d, one]);
            let mut s: Vec<i64> = vec![1; rank + 1];
            s[axis] = -1;
            (b.reshape(range, &s), d)
        }
    };
    // Negative indices count from the end.
    let i = b.cast(idx, DType::I64);
    let zero = b.constant(Tensor::scalar(0i64));
    let negative = b.op0("Less", &[i, zero]);
    let wrapped = b.op0("Add", &[i, depth]);
    let i = b.op0("Where", &[negative, wrapped, i]);
    let i = b.unsqueeze(i, &[axis as i64]);
    let hot = b.op0("Equal", &[i, positions]);
    let axis0 = || attrs(vec![("axis", Attribute::Int(0))]);
    let off_i = b.constant(Tensor::scalar(0i64));
    let on_i = b.constant(Tensor::scalar(1i64));
    let off = b.op("Gather", &[values, off_i], axis0());
    let on = b.op("Gather", &[values, on_i], axis0());
    let out = b.output(node, 0);
    b.emit("Where", &[Some(hot), Some(on), Some(off)], attrs(vec![]), vec![Some(out)]);
    Ok(())
}

/// `x · sigmoid(alpha · x)`, times the second input for `SwiGLU`.
pub fn swish(
    op: &Swish,
    node: &Node,
    inputs: &[Option<Fact>],
    b: &mut Builder,
) -> Result<(), OpError> {
    let x = input(node, 0)?;
    let scaled = if op.alpha == 1.0 {
        x
    } else {
        let a = b.scalar(dtype(inputs, 0)?, f64::from(op.alpha))?;
        b.op0("Mul", &[x, a])
    };
    let s = b.op0("Sigmoid", &[scaled]);
    let out = b.output(node, 0);
    if op.glu {
        let sw = b.op0("Mul", &[x, s]);
        let gate = input(node, 1)?;
        b.emit("Mul", &[Some(sw), Some(gate)], attrs(vec![]), vec![Some(out)]);
    } else {
        b.emit("Mul", &[Some(x), Some(s)], attrs(vec![]), vec![Some(out)]);
    }
    Ok(())
}

/// `x / ‖x‖ₚ` along the axis, zero where the norm is zero.
pub fn lp_norm(
    op: &LpNorm,
    node: &Node,
    inputs: &[Option<Fact>],
    b: &mut Builder,
) -> Result<(), OpError> {
    let x = input(node, 0)?;
    let axes = b.ints(&[op.axis]);
    let norm = b.op0(if op.p == 1 { "ReduceL1" } else { "ReduceL2" }, &[x, axes]);
    let zero = b.scalar(dtype(inputs, 0)?, 0.0)?;
    let is_zero = b.op0("Equal", &[norm, zero]);
    let q = b.op0("Div", &[x, norm]);
    let out = b.output(node, 0);
    b.emit("Where", &[Some(is_zero), Some(zero), Some(q)], attrs(vec![]), vec![Some(out)]);
    Ok(())
}

/// Blocks of pixels and channels traded through a 6-D transpose.
pub fn depth_space(
    op: &DepthSpace,
    node: &Node,
    inputs: &[Option<Fact>],
    b: &mut Builder,
) -> Result<(), OpError> {
    let x = input(node, 0)?;
    let d = dims(inputs, 0)?;
    let out_dims = op.output_dims(&d)?;
    let [n, c, h, w] = [d[0], d[1], d[2], d[3]].map(|v| v as i64);
    let bs = op.blocksize as i64;
    let (shape, perm): ([i64; 6], [i64; 6]) = match (op.to_depth, op.crd) {
        (true, false) => ([n, c, h / bs, bs, w / bs, bs], [0, 3, 5, 1, 2, 4]),
        (true, true) => ([n, c, h / bs, bs, w / bs, bs], [0, 1, 3, 5, 2, 4]),
        (false, false) => ([n, bs, bs, c / (bs * bs), h, w], [0, 3, 4, 1, 5, 2]),
        (false, true) => ([n, c / (bs * bs), bs, bs, h, w], [0, 1, 4, 2, 5, 3]),
    };
    let r = b.reshape(x, &shape);
    let t = b.transpose(r, &perm);
    let target: Vec<i64> = out_dims.iter().map(|&v| v as i64).collect();
    let target = b.ints(&target);
    let out = b.output(node, 0);
    b.emit("Reshape", &[Some(t), Some(target)], attrs(vec![]), vec![Some(out)]);
    Ok(())
}

/// `(Σ |x|ᵖ)^(1/p)` over each window: an average pool counting the padding,
/// times the window's size.
pub fn lp_pool(
    op: &LpPool,
    node: &Node,
    inputs: &[Option<Fact>],
    b: &mut Builder,
) -> Result<(), OpError> {
    let x = input(node, 0)?;
    let dt = dtype(inputs, 0)?;
    let size: usize = op.window.kernel.as_deref().unwrap_or(&[]).iter().product();
    let p = b.scalar(dt, op.p as f64)?;
    let a = b.op0("Abs", &[x]);
    let powered = b.op0("Pow", &[a, p]);
    let mut pool = node.attrs.clone();
    pool.0.retain(|(k, _)| k != "p");
    pool.0.push(("count_include_pad".into(), Attribute::Int(1)));
    let mean = b.op("AveragePool", &[powered], pool);
    let n = b.scalar(dt, size as f64)?;
    let sum = b.op0("Mul", &[mean, n]);
    let inv = b.scalar(dt, 1.0 / op.p as f64)?;
    let out = b.output(node, 0);
    b.emit("Pow", &[Some(sum), Some(inv)], attrs(vec![]), vec![Some(out)]);
    Ok(())
}
