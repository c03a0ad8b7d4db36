//! Scatters and element-rearranging ops: ScatterElements (and the deprecated
//! Scatter), ScatterND, TensorScatter, Trilu, OneHot, EyeLike, CumSum,
//! CumProd, ReverseSequence, DepthToSpace and SpaceToDepth.

use super::axes::axis_of;
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::Node;
use crate::shape::{Dim, Shape};

/// How a scatter combines an update with the value already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduction {
    /// The update replaces the value.
    None,
    /// `old + update`.
    Add,
    /// `old * update`.
    Mul,
    /// `min(old, update)`.
    Min,
    /// `max(old, update)`.
    Max,
}

impl Reduction {
    fn parse(n: &Node) -> Result<Reduction, OpError> {
        match n.attrs.string_or("reduction", "none".into())?.as_str() {
            "none" => Ok(Reduction::None),
            "add" => Ok(Reduction::Add),
            "mul" => Ok(Reduction::Mul),
            "min" => Ok(Reduction::Min),
            "max" => Ok(Reduction::Max),
            other => Err(OpError::BadAttribute {
                name: "reduction".into(),
                reason: format!("unknown reduction '{other}'"),
            }),
        }
    }
}

fn check_index_dtype(f: &Fact, index: usize) -> Result<(), OpError> {
    if !matches!(f.dtype, DType::I32 | DType::I64) {
        return Err(OpError::InputDType {
            index,
            dtype: f.dtype,
            expected: "int32 or int64".into(),
        });
    }
    Ok(())
}

/// The fact of an output that has input 0's dtype and shape (its value dropped).
fn like_input(inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
    let x = inputs.get(0)?;
    Ok(vec![x.with_dtype(x.dtype)])
}

/// `ScatterElements` (and opset 9–10's `Scatter`): a copy of `data` where
/// `out[c with c[axis] = indices[c]] = updates[c]` for every `c` of `indices`.
#[derive(Debug, Clone)]
pub struct ScatterElements {
    /// The axis the indices address.
    pub axis: i64,
    /// How updates combine with the data.
    pub reduction: Reduction,
}

impl Op for ScatterElements {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, idx, upd) = (inputs.get(0)?, inputs.get(1)?, inputs.get(2)?);
        check_index_dtype(idx, 1)?;
        if upd.dtype != x.dtype {
            return Err(OpError::InputDType {
                index: 2,
                dtype: upd.dtype,
                expected: format!("{} like the data", x.dtype),
            });
        }
        if let (Some(sx), Some(si), Some(su)) = (x.rank(), idx.rank(), upd.rank()) {
            if sx != si || si != su {
                return Err(OpError::Shape(format!(
                    "data, indices and updates of ranks {sx}, {si} and {su} differ"
                )));
            }
            axis_of(self.axis, sx)?;
        }
        like_input(inputs)
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// `ScatterND`: a copy of `data` with the slices addressed by the last axis of
/// `indices` replaced by (or combined with) `updates`.
#[derive(Debug, Clone)]
pub struct ScatterNd {
    /// How updates combine with the data.
    pub reduction: Reduction,
}

impl ScatterNd {
    /// Checks concrete dims: `updates` must be `indices[..-1] ++ data[k..]`
    /// where `k = indices[-1]`. Returns `k`.
    ///
    /// # Errors
    /// [`OpError::Shape`] when the shapes do not fit together.
    pub fn check(data: &[usize], indices: &[usize], updates: &[usize]) -> Result<usize, OpError> {
        let k = indices.last().copied().unwrap_or(0);
        let mut want = indices[..indices.len().saturating_sub(1)].to_vec();
        if indices.is_empty() || k > data.len() {
            return Err(OpError::Shape(format!(
                "ScatterND indices {indices:?} do not fit data {data:?}"
            )));
        }
        want.extend_from_slice(&data[k..]);
        if want != updates {
            return Err(OpError::Shape(format!(
                "ScatterND updates {updates:?} should be {want:?} for data {data:?} and indices {indices:?}"
            )));
        }
        Ok(k)
    }
}

impl Op for ScatterNd {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, idx, upd) = (inputs.get(0)?, inputs.get(1)?, inputs.get(2)?);
        if idx.dtype != DType::I64 {
            return Err(OpError::InputDType {
                index: 1,
                dtype: idx.dtype,
                expected: "int64".into(),
            });
        }
        if let (Some(d), Some(i), Some(u)) = (x.dims(), idx.dims(), upd.dims()) {
            ScatterNd::check(&d, &i, &u)?;
        }
        like_input(inputs)
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// `TensorScatter` (opset 24): writes `update` into a cache along the
/// sequence axis, at a per-batch offset (`write_indices`, default 0).
#[derive(Debug, Clone)]
pub struct TensorScatter {
    /// The sequence axis (default -2).
    pub axis: i64,
    /// Wrap write positions modulo the cache length.
    pub circular: bool,
}

impl Op for TensorScatter {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, upd) = (inputs.get(0)?, inputs.get(1)?);
        if let (Some(d), Some(u)) = (x.dims(), upd.dims()) {
            self.check(&d, &u)?;
        }
        like_input(inputs)
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

impl TensorScatter {
    /// The sequence axis for concrete cache and update dims, after checking
    /// that they agree everywhere else and that the update fits.
    ///
    /// # Errors
    /// [`OpError::Shape`] when they do not.
    pub fn check(&self, cache: &[usize], update: &[usize]) -> Result<usize, OpError> {
        let axis = axis_of(self.axis, cache.len())?;
        let fits = cache.len() == update.len()
            && axis > 0
            && cache.iter().zip(update).enumerate().all(
                |(d, (&c, &u))| {
                    if d == axis { u <= c } else { u == c }
                },
            );
        if !fits {
            return Err(OpError::Shape(format!(
                "TensorScatter update {update:?} does not fit cache {cache:?} on axis {axis}"
            )));
        }
        Ok(axis)
    }
}

/// `Trilu`: keeps the upper (or lower) triangle of the last two dims,
/// relative to diagonal `k` (optional input 1).
#[derive(Debug, Clone)]
pub struct Trilu {
    /// Keep the upper triangle (default) instead of the lower.
    pub upper: bool,
}

impl Op for Trilu {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        if let Some(r) = inputs.get(0)?.rank().filter(|&r| r < 2) {
            return Err(OpError::Shape(format!("Trilu needs rank 2 or more, got {r}")));
        }
        like_input(inputs)
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// `OneHot(indices, depth, values)`: a new axis of `depth` entries, `values[1]`
/// where the index points and `values[0]` elsewhere.
#[derive(Debug, Clone)]
pub struct OneHot {
    /// Where the new axis goes, in `[-(r + 1), r]` for indices of rank `r`.
    pub axis: i64,
}

impl OneHot {
    /// The new axis for indices of rank `rank`.
    ///
    /// # Errors
    /// [`OpError::Shape`] when out of range.
    pub fn axis(&self, rank: usize) -> Result<usize, OpError> {
        axis_of(self.axis, rank + 1)
    }

    /// The depth from the value of input 1 (any numeric scalar).
    ///
    /// # Errors
    /// [`OpError::Shape`] when it is not a single positive number.
    pub fn depth(values: &[f64]) -> Result<usize, OpError> {
        match values {
            [d] if *d >= 1.0 && d.is_finite() => Ok(*d as usize),
            _ => Err(OpError::Shape(format!("OneHot depth {values:?} is not a positive scalar"))),
        }
    }
}

impl Op for OneHot {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (idx, depth, values) = (inputs.get(0)?, inputs.get(1)?, inputs.get(2)?);
        let Some(s) = &idx.shape else { return Ok(vec![Fact::unranked(values.dtype)]) };
        let axis = self.axis(s.rank())?;
        let d = match depth.floats() {
            Some(v) => Dim::Known(OneHot::depth(&v)?),
            None => Dim::Unknown,
        };
        let mut out = s.0.clone();
        out.insert(axis, d);
        Ok(vec![Fact::new(values.dtype, Shape(out))])
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![1]
    }
}

/// `EyeLike`: ones on diagonal `k` of a matrix shaped like the input.
#[derive(Debug, Clone)]
pub struct EyeLike {
    /// Output dtype (default: the input's).
    pub dtype: Option<DType>,
    /// The diagonal: 0 main, positive above, negative below.
    pub k: i64,
}

impl Op for EyeLike {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        if let Some(r) = x.rank().filter(|&r| r != 2) {
            return Err(OpError::Shape(format!("EyeLike needs a matrix, got rank {r}")));
        }
        Ok(vec![x.with_dtype(self.dtype.unwrap_or(x.dtype))])
    }
}

/// `CumSum` and `CumProd` along the axis in input 1.
#[derive(Debug, Clone)]
pub struct Cumulative {
    /// Product instead of sum.
    pub product: bool,
    /// Leave the current element out of its own result.
    pub exclusive: bool,
    /// Accumulate from the end.
    pub reverse: bool,
}

impl Op for Cumulative {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        check_index_dtype(inputs.get(1)?, 1)?;
        like_input(inputs)
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![1]
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// `ReverseSequence`: reverses the first `sequence_lens[b]` steps of each batch entry.
#[derive(Debug, Clone)]
pub struct ReverseSequence {
    /// The batch axis (0 or 1, default 1).
    pub batch_axis: usize,
    /// The time axis (0 or 1, default 0).
    pub time_axis: usize,
}

impl Op for ReverseSequence {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        if let Some(r) = inputs.get(0)?.rank().filter(|&r| r < 2) {
            return Err(OpError::Shape(format!("ReverseSequence needs rank 2 or more, got {r}")));
        }
        check_index_dtype(inputs.get(1)?, 1)?;
        like_input(inputs)
    }
}

/// `DepthToSpace` and `SpaceToDepth` on NCHW tensors.
#[derive(Debug, Clone)]
pub struct DepthSpace {
    /// SpaceToDepth instead of DepthToSpace.
    pub to_depth: bool,
    /// The block edge.
    pub blocksize: usize,
    /// Column-row-depth order instead of depth-column-row.
    pub crd: bool,
}

impl DepthSpace {
    /// Output dims for concrete NCHW input dims.
    ///
    /// # Errors
    /// [`OpError::Shape`] when the input is not 4-D or does not divide into blocks.
    pub fn output_dims(&self, d: &[usize]) -> Result<Vec<usize>, OpError> {
        let b = self.blocksize;
        let bad = || OpError::Shape(format!("{d:?} does not divide into {b}×{b} blocks"));
        let [n, c, h, w] = *d else { return Err(bad()) };
        if self.to_depth {
            if h % b != 0 || w % b != 0 {
                return Err(bad());
            }
            Ok(vec![n, c * b * b, h / b, w / b])
        } else {
            if c % (b * b) != 0 {
                return Err(bad());
            }
            Ok(vec![n, c / (b * b), h * b, w * b])
        }
    }

    /// The 6-D view of the input and the permutation that turns it into the
    /// output, for concrete NCHW input dims (checked by [`Self::output_dims`]).
    pub fn plan(&self, d: &[usize]) -> ([usize; 6], [usize; 6]) {
        let (b, [n, c, h, w]) = (self.blocksize, [d[0], d[1], d[2], d[3]]);
        match (self.to_depth, self.crd) {
            (true, false) => ([n, c, h / b, b, w / b, b], [0, 3, 5, 1, 2, 4]),
            (true, true) => ([n, c, h / b, b, w / b, b], [0, 1, 3, 5, 2, 4]),
            (false, false) => ([n, b, b, c / (b * b), h, w], [0, 3, 4, 1, 5, 2]),
            (false, true) => ([n, c / (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]),
        }
    }
}

impl Op for DepthSpace {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        if let Some(d) = x.dims() {
            return Ok(vec![Fact::known(x.dtype, &self.output_dims(&d)?)]);
        }
        match x.rank() {
            Some(4) | None => Ok(vec![Fact::ranked(x.dtype, 4)]),
            Some(r) => Err(OpError::Shape(format!("expected a 4-D input, got rank {r}"))),
        }
    }
}

fn small_axis(n: &Node, name: &str, default: i64) -> Result<usize, OpError> {
    match n.attrs.int_or(name, default)? {
        a @ (0 | 1) => Ok(a as usize),
        a => Err(OpError::BadAttribute { name: name.into(), reason: format!("{a} is not 0 or 1") }),
    }
}

fn depth_space(n: &Node, to_depth: bool) -> Result<Box<dyn Op>, OpError> {
    check_inputs(n, 1, 1)?;
    let b = n.attrs.req_int("blocksize")?;
    let blocksize = usize::try_from(b).ok().filter(|&b| b > 0).ok_or_else(|| {
        OpError::BadAttribute { name: "blocksize".into(), reason: format!("{b} is not positive") }
    })?;
    let crd = match n.attrs.string_or("mode", "DCR".into())?.as_str() {
        "DCR" => false,
        "CRD" => true,
        m => {
            return Err(OpError::BadAttribute {
                name: "mode".into(),
                reason: format!("unknown mode '{m}'"),
            });
        }
    };
    Ok(Box::new(DepthSpace { to_depth, blocksize, crd }))
}

/// Registers the family.
pub fn register_all(r: &mut OpRegistry) {
    r.register("ScatterElements", |n| {
        check_inputs(n, 3, 3)?;
        let (axis, reduction) = (n.attrs.int_or("axis", 0)?, Reduction::parse(n)?);
        Ok(Box::new(ScatterElements { axis, reduction }))
    });
    r.register("Scatter", |n| {
        check_inputs(n, 3, 3)?;
        let axis = n.attrs.int_or("axis", 0)?;
        Ok(Box::new(ScatterElements { axis, reduction: Reduction::None }))
    });
    r.register("ScatterND", |n| {
        check_inputs(n, 3, 3)?;
        Ok(Box::new(ScatterNd { reduction: Reduction::parse(n)? }))
    });
    r.register("TensorScatter", |n| {
        check_inputs(n, 2, 3)?;
        let circular = match n.attrs.string_or("mode", "linear".into())?.as_str() {
            "linear" => false,
            "circular" => true,
            m => {
                return Err(OpError::BadAttribute {
                    name: "mode".into(),
                    reason: format!("unknown mode '{m}'"),
                });
            }
        };
        Ok(Box::new(TensorScatter { axis: n.attrs.int_or("axis", -2)?, circular }))
    });
    r.register("Trilu", |n| {
        check_inputs(n, 1, 2)?;
        Ok(Box::new(Trilu { upper: n.attrs.flag_or("upper", true)? }))
    });
    r.register("OneHot", |n| {
        check_inputs(n, 3, 3)?;
        Ok(Box::new(OneHot { axis: n.attrs.int_or("axis", -1)? }))
    });
    r.register("EyeLike", |n| {
        check_inputs(n, 1, 1)?;
        let dtype = match n.attrs.int("dtype")? {
            None => None,
            Some(code) => {
                Some(DType::from_onnx(code as i32).ok_or_else(|| OpError::BadAttribute {
                    name: "dtype".into(),
                    reason: format!("{code} is not a data type"),
                })?)
            }
        };
        Ok(Box::new(EyeLike { dtype, k: n.attrs.int_or("k", 0)? }))
    });
    for (name, product) in [("CumSum", false), ("CumProd", true)] {
        r.register(name, move |n| {
            check_inputs(n, 2, 2)?;
            Ok(Box::new(Cumulative {
                product,
                exclusive: n.attrs.flag_or("exclusive", false)?,
                reverse: n.attrs.flag_or("reverse", false)?,
            }))
        });
    }
    r.register("ReverseSequence", |n| {
        check_inputs(n, 2, 2)?;
        let batch_axis = small_axis(n, "batch_axis", 1)?;
        let time_axis = small_axis(n, "time_axis", 0)?;
        if batch_axis == time_axis {
            return Err(OpError::BadAttribute {
                name: "time_axis".into(),
                reason: "equals batch_axis".into(),
            });
        }
        Ok(Box::new(ReverseSequence { batch_axis, time_axis }))
    });
    r.register("DepthToSpace", |n| depth_space(n, false));
    r.register("SpaceToDepth", |n| depth_space(n, true));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_nd_updates_must_be_index_dims_then_the_unindexed_data_dims() {
        assert_eq!(ScatterNd::check(&[4, 4, 4], &[2, 1], &[2, 4, 4]).unwrap(), 1);
        assert_eq!(ScatterNd::check(&[2, 2], &[2, 2], &[2]).unwrap(), 2);
        assert!(ScatterNd::check(&[4, 4], &[2, 1], &[2, 3]).is_err());
        assert!(ScatterNd::check(&[4], &[2, 2], &[2]).is_err());
    }

    #[test]
    fn tensor_scatter_accepts_an_update_no_longer_than_the_cache() {
        let t = TensorScatter { axis: -2, circular: false };
        assert_eq!(t.check(&[2, 1, 4, 5], &[2, 1, 2, 5]).unwrap(), 2);
        assert!(t.check(&[2, 1, 4, 5], &[2, 1, 5, 5]).is_err());
        assert!(t.check(&[2, 1, 4, 5], &[2, 2, 2, 5]).is_err());
        assert!(TensorScatter { axis: 0, circular: true }.check(&[4, 5], &[2, 5]).is_err());
    }

    #[test]
    fn depth_and_space_blocks_trade_channels_for_pixels() {
        let d2s = DepthSpace { to_depth: false, blocksize: 2, crd: false };
        assert_eq!(d2s.output_dims(&[1, 8, 2, 3]).unwrap(), vec![1, 2, 4, 6]);
        assert!(d2s.output_dims(&[1, 6, 2, 3]).is_err());
        let s2d = DepthSpace { to_depth: true, blocksize: 2, crd: true };
        assert_eq!(s2d.output_dims(&[1, 2, 4, 6]).unwrap(), vec![1, 8, 2, 3]);
        assert!(s2d.output_dims(&[1, 2, 3, 6]).is_err());
    }

    #[test]
    fn one_hot_depth_must_be_a_positive_scalar() {
        assert_eq!(OneHot::depth(&[10.0]).unwrap(), 10);
        assert!(OneHot::depth(&[0.0]).is_err());
        assert!(OneHot::depth(&[2.0, 3.0]).is_err());
        assert_eq!(OneHot { axis: -1 }.axis(2).unwrap(), 2);
        assert_eq!(OneHot { axis: -3 }.axis(2).unwrap(), 0);
    }
}
