//! Selections whose output size depends on values: TopK (on `K`), Compress
//! (on the condition), NonZero and Unique (on the data). Those values are
//! value inputs, so the executor infers concrete shapes at run time.

use std::cmp::Ordering;

use super::axes::{axis_of, value_ints};
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::shape::{Dim, Shape};
use crate::tensor::Tensor;

/// `TopK`: the `k` largest (or smallest) entries along an axis, with their indices.
#[derive(Debug, Clone)]
pub struct TopK {
    /// The axis.
    pub axis: i64,
    /// Largest (default) or smallest.
    pub largest: bool,
    /// `k` from the attribute (opset 1); later opsets pass it as input 1.
    pub k_attr: Option<i64>,
}

impl TopK {
    /// `k` from the attribute or input 1's value, checked against an axis of `len`.
    ///
    /// # Errors
    /// [`OpError::Shape`] when `k` is not a single count within the axis.
    pub fn k(&self, k_input: Option<&[i64]>, len: Option<usize>) -> Result<Option<usize>, OpError> {
        let k = match (self.k_attr, k_input) {
            (Some(k), _) => k,
            (None, Some([k])) => *k,
            (None, Some(v)) => {
                return Err(OpError::Shape(format!("TopK K {v:?} is not one value")));
            }
            (None, None) => return Ok(None),
        };
        match (usize::try_from(k), len) {
            (Ok(k), Some(n)) if k <= n => Ok(Some(k)),
            (Ok(k), None) => Ok(Some(k)),
            _ => Err(OpError::Shape(format!("TopK k = {k} for an axis of {len:?}"))),
        }
    }
}

impl Op for TopK {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let Some(s) = &x.shape else {
            return Ok(vec![Fact::unranked(x.dtype), Fact::unranked(DType::I64)]);
        };
        let axis = axis_of(self.axis, s.rank())?;
        let k_input = match inputs.opt(1) {
            Some(f) if self.k_attr.is_none() => value_ints(f, 1)?,
            _ => None,
        };
        let k = self.k(k_input.as_deref(), s.0[axis].known())?;
        let mut dims = s.0.clone();
        dims[axis] = k.map_or(Dim::Unknown, Dim::Known);
        let out = Shape(dims);
        Ok(vec![Fact::new(x.dtype, out.clone()), Fact::new(DType::I64, out)])
    }

    fn value_inputs(&self) -> Vec<usize> {
        if self.k_attr.is_some() { vec![] } else { vec![1] }
    }
}

/// `Compress`: the slices along `axis` (or the flattened elements) where the
/// condition is true.
#[derive(Debug, Clone)]
pub struct Compress {
    /// The axis; `None` flattens the input first.
    pub axis: Option<i64>,
}

impl Compress {
    /// The kept positions for a condition over an axis of `len`.
    ///
    /// # Errors
    /// [`OpError::Shape`] when a true entry lies beyond the axis.
    pub fn kept(condition: &[i64], len: usize) -> Result<Vec<usize>, OpError> {
        let kept: Vec<usize> = (0..condition.len()).filter(|&i| condition[i] != 0).collect();
        if kept.last().is_some_and(|&i| i >= len) {
            return Err(OpError::Shape(format!(
                "Compress condition of {} entries selects beyond an axis of {len}",
                condition.len()
            )));
        }
        Ok(kept)
    }
}

impl Op for Compress {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, cond) = (inputs.get(0)?, inputs.get(1)?);
        if cond.dtype != DType::Bool {
            return Err(OpError::InputDType {
                index: 1,
                dtype: cond.dtype,
                expected: "bool".into(),
            });
        }
        let Some(s) = &x.shape else {
            let rank = if self.axis.is_none() { Some(1) } else { None };
            return Ok(vec![rank.map_or(Fact::unranked(x.dtype), |r| Fact::ranked(x.dtype, r))]);
        };
        let (mut dims, axis) = match self.axis {
            None => (vec![s.numel().map_or(Dim::Unknown, Dim::Known)], 0),
            Some(a) => (s.0.clone(), axis_of(a, s.rank())?),
        };
        dims[axis] = match (value_ints(cond, 1)?, dims[axis].known()) {
            (Some(c), Some(len)) => Dim::Known(Compress::kept(&c, len)?.len()),
            _ => Dim::Unknown,
        };
        Ok(vec![Fact::new(x.dtype, Shape(dims))])
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![1]
    }
}

/// `NonZero`: the coordinates of the non-zero elements, as `[rank, count]` int64.
#[derive(Debug, Clone)]
pub struct NonZero;

impl NonZero {
    /// The flat positions of the non-zero elements of a host tensor.
    ///
    /// # Errors
    /// [`OpError::Unsupported`] for dtypes without numeric values (strings).
    pub fn positions(t: &Tensor) -> Result<Vec<usize>, OpError> {
        let nonzero: Vec<bool> = if t.dtype().is_float() {
            t.to_f64_vec()?.into_iter().map(|v| v != 0.0).collect()
        } else {
            t.to_i64_vec()
                .map_err(|_| OpError::Unsupported(format!("NonZero on {}", t.dtype())))?
                .into_iter()
                .map(|v| v != 0)
                .collect()
        };
        Ok((0..nonzero.len()).filter(|&i| nonzero[i]).collect())
    }
}

impl Op for NonZero {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let rank = x.rank().map_or(Dim::Unknown, Dim::Known);
        let count = match &x.value {
            Some(t) => Dim::Known(NonZero::positions(t)?.len()),
            None => Dim::Unknown,
        };
        Ok(vec![Fact::new(DType::I64, Shape(vec![rank, count]))])
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![0]
    }
}

/// `Unique`: the distinct elements (or slices along `axis`), with the index of
/// each one's first occurrence, the inverse map and the counts.
#[derive(Debug, Clone)]
pub struct Unique {
    /// Compare slices along this axis; `None` flattens the input.
    pub axis: Option<i64>,
    /// Ascending order (default) instead of first-occurrence order.
    pub sorted: bool,
    /// How many outputs the node has (1 to 4).
    pub outputs: usize,
}

/// The distinct slices of a tensor, as [`Unique::groups`] finds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueGroups {
    /// For each distinct slice, in output order: where it first occurs.
    pub first: Vec<usize>,
    /// For each input slice: the output slice it equals.
    pub inverse: Vec<usize>,
    /// For each distinct slice: its number of occurrences.
    pub counts: Vec<usize>,
    /// `(outer, n, inner)`: the input as `n` slices of `outer × inner` elements.
    pub layout: (usize, usize, usize),
}

/// Orders floats as numpy sorts them: NaNs last and equal to each other.
fn float_order(a: &f64, b: &f64) -> Ordering {
    a.partial_cmp(b).unwrap_or_else(|| a.is_nan().cmp(&b.is_nan()))
}

/// Groups the `n` slices of `keys` (laid out `outer × n × inner`) that compare equal.
fn group<K>(
    keys: &[K],
    (outer, n, inner): (usize, usize, usize),
    cmp: impl Fn(&K, &K) -> Ordering,
    sorted: bool,
) -> UniqueGroups {
    let slice_cmp = |a: usize, b: usize| {
        for o in 0..outer {
            for i in 0..inner {
                let ord = cmp(&keys[(o * n + a) * inner + i], &keys[(o * n + b) * inner + i]);
                if ord != Ordering::Equal {
                    return ord;
                }
            }
        }
        Ordering::Equal
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| slice_cmp(a, b));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for &i in &order {
        match groups.last_mut() {
            Some(g) if slice_cmp(g[0], i) == Ordering::Equal => g.push(i),
            _ => groups.push(vec![i]),
        }
    }
    if !sorted {
        groups.sort_by_key(|g| g[0]);
    }
    let mut inverse = vec![0; n];
    for (j, g) in groups.iter().enumerate() {
        for &i in g {
            inverse[i] = j;
        }
    }
    UniqueGroups {
        first: groups.iter().map(|g| g[0]).collect(),
        counts: groups.iter().map(Vec::len).collect(),
        inverse,
        layout: (outer, n, inner),
    }
}

impl Unique {
    /// The distinct slices of a host tensor.
    ///
    /// # Errors
    /// [`OpError::Shape`] for a bad axis; [`OpError::Unsupported`] for strings.
    pub fn groups(&self, t: &Tensor) -> Result<UniqueGroups, OpError> {
        let dims = t.shape();
        let layout = match self.axis {
            None => (1, t.numel(), 1),
            Some(a) => {
                let axis = axis_of(a, dims.len())?;
                (dims[..axis].iter().product(), dims[axis], dims[axis + 1..].iter().product())
            }
        };
        Ok(match t.dtype() {
            d if d.is_float() => group(&t.to_f64_vec()?, layout, float_order, self.sorted),
            DType::U64 => {
                let keys: Vec<u64> = t.to_i64_vec()?.into_iter().map(|v| v as u64).collect();
                group(&keys, layout, Ord::cmp, self.sorted)
            }
            d => {
                let keys =
                    t.to_i64_vec().map_err(|_| OpError::Unsupported(format!("Unique on {d}")))?;
                group(&keys, layout, Ord::cmp, self.sorted)
            }
        })
    }

    /// The output facts for a tensor of `dims` with `u` distinct slices.
    fn facts(&self, dtype: DType, dims: &Shape, u: Dim) -> Result<Vec<Fact>, OpError> {
        let (y, n) = match self.axis {
            None => (Shape(vec![u.clone()]), dims.numel().map_or(Dim::Unknown, Dim::Known)),
            Some(a) => {
                let axis = axis_of(a, dims.rank())?;
                let mut y = dims.clone();
                y.0[axis] = u.clone();
                (y, dims.0[axis].clone())
            }
        };
        let all = [
            Fact::new(dtype, y),
            Fact::new(DType::I64, Shape(vec![u.clone()])),
            Fact::new(DType::I64, Shape(vec![n])),
            Fact::new(DType::I64, Shape(vec![u])),
        ];
        Ok(all[..self.outputs.min(4)].to_vec())
    }
}

impl Op for Unique {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let Some(s) = &x.shape else {
            let mut out = vec![Fact::unranked(x.dtype)];
            out.extend(std::iter::repeat_n(Fact::ranked(DType::I64, 1), self.outputs.max(1) - 1));
            return Ok(out);
        };
        let u = match &x.value {
            Some(t) => Dim::Known(self.groups(t)?.first.len()),
            None => Dim::Unknown,
        };
        self.facts(x.dtype, s, u)
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![0]
    }
}

/// Registers the family.
pub fn register_all(r: &mut OpRegistry) {
    r.register("TopK", |n| {
        let k_attr = if n.opset < 10 { Some(n.attrs.req_int("k")?) } else { None };
        check_inputs(n, if k_attr.is_some() { 1 } else { 2 }, 2)?;
        Ok(Box::new(TopK {
            axis: n.attrs.int_or("axis", -1)?,
            largest: n.attrs.flag_or("largest", true)?,
            k_attr,
        }))
    });
    r.register("Compress", |n| {
        check_inputs(n, 2, 2)?;
        Ok(Box::new(Compress { axis: n.attrs.int("axis")? }))
    });
    r.register("NonZero", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(NonZero))
    });
    r.register("Unique", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(Unique {
            axis: n.attrs.int("axis")?,
            sorted: n.attrs.flag_or("sorted", true)?,
            outputs: n.outputs.len(),
        }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_groups_follow_the_spec_examples() {
        let x = Tensor::from_vec(vec![6], vec![2f32, 1., 1., 3., 4., 3.]).unwrap();
        let u = Unique { axis: None, sorted: false, outputs: 4 };
        let g = u.groups(&x).unwrap();
        assert_eq!(g.first, vec![0, 1, 3, 4]);
        assert_eq!(g.inverse, vec![0, 1, 1, 2, 3, 2]);
        assert_eq!(g.counts, vec![1, 2, 2, 1]);
        let x = Tensor::from_vec(vec![3, 3], vec![1i64, 0, 0, 1, 0, 0, 2, 3, 4]).unwrap();
        let g = Unique { axis: Some(0), sorted: true, outputs: 4 }.groups(&x).unwrap();
        assert_eq!((g.first, g.inverse, g.counts), (vec![0, 2], vec![0, 0, 1], vec![2, 1]));
    }

    #[test]
    fn unique_sorts_slices_along_an_inner_axis_lexicographically() {
        let x = Tensor::from_vec(
            vec![2, 4, 2],
            vec![1f32, 1., 0., 1., 2., 1., 0., 1., 1., 1., 0., 1., 2., 1., 0., 1.],
        )
        .unwrap();
        let g = Unique { axis: Some(1), sorted: true, outputs: 4 }.groups(&x).unwrap();
        assert_eq!(g.first, vec![1, 0, 2]);
        assert_eq!(g.inverse, vec![1, 0, 2, 0]);
        assert_eq!(g.counts, vec![2, 1, 1]);
    }

    #[test]
    fn unique_orders_unsigned_values_above_the_signed_range() {
        let x = Tensor::from_vec(vec![3], vec![u64::MAX, 1, u64::MAX]).unwrap();
        let g = Unique { axis: None, sorted: true, outputs: 1 }.groups(&x).unwrap();
        assert_eq!(g.first, vec![1, 0]);
    }

    #[test]
    fn compress_rejects_a_true_entry_beyond_the_axis() {
        assert_eq!(Compress::kept(&[0, 1, 1], 3).unwrap(), vec![1, 2]);
        assert_eq!(Compress::kept(&[0, 1, 0, 0], 3).unwrap(), vec![1]);
        assert!(Compress::kept(&[0, 1, 0, 1], 3).is_err());
    }

    #[test]
    fn top_k_needs_k_within_the_axis() {
        let t = TopK { axis: -1, largest: true, k_attr: None };
        assert_eq!(t.k(Some(&[3]), Some(4)).unwrap(), Some(3));
        assert!(t.k(Some(&[5]), Some(4)).is_err());
        assert!(t.k(Some(&[-1]), Some(4)).is_err());
        assert_eq!(t.k(None, Some(4)).unwrap(), None);
    }
}
