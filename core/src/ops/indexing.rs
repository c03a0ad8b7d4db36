//! Element-wise indexing: GatherElements and GatherND.

use super::axes::axis_of;
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::shape::{Dim, Shape};

fn check_indices(f: &Fact) -> Result<(), OpError> {
    if !matches!(f.dtype, DType::I32 | DType::I64) {
        return Err(OpError::InputDType {
            index: 1,
            dtype: f.dtype,
            expected: "int32 or int64".into(),
        });
    }
    Ok(())
}

/// `GatherElements`: `out[c] = data[c with c[axis] = indices[c]]`; the output
/// has the indices' shape.
#[derive(Debug, Clone)]
pub struct GatherElements {
    /// The axis.
    pub axis: i64,
}

impl Op for GatherElements {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, idx) = (inputs.get(0)?, inputs.get(1)?);
        check_indices(idx)?;
        let (Some(sx), Some(si)) = (&x.shape, &idx.shape) else {
            return Ok(vec![Fact::unranked(x.dtype)]);
        };
        if sx.rank() != si.rank() {
            return Err(OpError::Shape(format!(
                "indices of rank {} for data of rank {}",
                si.rank(),
                sx.rank()
            )));
        }
        axis_of(self.axis, sx.rank())?;
        Ok(vec![Fact::new(x.dtype, si.clone())])
    }
}

/// `GatherND`: slices of `data` addressed by the last axis of `indices`, after
/// `batch_dims` leading dims shared by both.
#[derive(Debug, Clone)]
pub struct GatherNd {
    /// Leading dims that index data and indices alike.
    pub batch_dims: usize,
}

impl GatherNd {
    /// Output dims for concrete data and indices dims.
    ///
    /// # Errors
    /// [`OpError::Shape`] when the index tuples do not fit the data.
    pub fn output_dims(&self, data: &[usize], indices: &[usize]) -> Result<Vec<usize>, OpError> {
        let (b, q) = (self.batch_dims, indices.len());
        let rk = indices.last().copied().unwrap_or(0);
        if q == 0 || b >= q || b + rk > data.len() || data[..b] != indices[..b] {
            return Err(OpError::Shape(format!(
                "GatherND indices {indices:?} (batch_dims {b}) do not fit data {data:?}"
            )));
        }
        let mut out = indices[..q - 1].to_vec();
        out.extend_from_slice(&data[b + rk..]);
        Ok(out)
    }
}

impl Op for GatherNd {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, idx) = (inputs.get(0)?, inputs.get(1)?);
        check_indices(idx)?;
        let (Some(sx), Some(si)) = (&x.shape, &idx.shape) else {
            return Ok(vec![Fact::unranked(x.dtype)]);
        };
        let (b, q) = (self.batch_dims, si.rank());
        let Some(Dim::Known(rk)) = si.0.last().cloned() else {
            return Ok(vec![Fact::unranked(x.dtype)]);
        };
        if q == 0 || b >= q || b + rk > sx.rank() {
            return Err(OpError::Shape(format!(
                "GatherND indices of rank {q} with tuples of {rk} (batch_dims {b}) do not fit data of rank {}",
                sx.rank()
            )));
        }
        let mut out = si.0[..q - 1].to_vec();
        out.extend(sx.0[b + rk..].iter().cloned());
        Ok(vec![Fact::new(x.dtype, Shape(out))])
    }
}

/// Registers the indexing ops.
pub fn register_all(r: &mut OpRegistry) {
    r.register("GatherElements", |n| {
        check_inputs(n, 2, 2)?;
        Ok(Box::new(GatherElements { axis: n.attrs.int_or("axis", 0)? }))
    });
    r.register("GatherND", |n| {
        check_inputs(n, 2, 2)?;
        let b = n.attrs.int_or("batch_dims", 0)?;
        let batch_dims = usize::try_from(b).map_err(|_| OpError::BadAttribute {
            name: "batch_dims".into(),
            reason: format!("negative value {b}"),
        })?;
        Ok(Box::new(GatherNd { batch_dims }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_nd_keeps_index_dims_and_the_unindexed_data_dims() {
        let g = GatherNd { batch_dims: 0 };
        assert_eq!(g.output_dims(&[2, 3, 4], &[5, 2]).unwrap(), vec![5, 4]);
        assert_eq!(g.output_dims(&[2, 3], &[2, 2]).unwrap(), vec![2]);
        let g = GatherNd { batch_dims: 1 };
        assert_eq!(g.output_dims(&[2, 3, 4], &[2, 1]).unwrap(), vec![2, 4]);
        assert!(g.output_dims(&[2, 3], &[3, 1]).is_err(), "batch dims must agree");
        assert!(GatherNd { batch_dims: 0 }.output_dims(&[2, 3], &[1, 3]).is_err());
    }
}
