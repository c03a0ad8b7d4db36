//! Matrix products: MatMul (numpy semantics) and Gemm.

use super::{Fact, InferInputs, Op, OpRegistry, broadcast_shapes, check_inputs};
use crate::error::OpError;
use crate::shape::{Dim, Shape};

/// `MatMul` with numpy semantics: batch dims broadcast, 1-D operands promoted then squeezed.
#[derive(Debug, Clone)]
pub struct MatMul;

fn check_inner(k1: &Dim, k2: &Dim) -> Result<(), OpError> {
    match (k1, k2) {
        (Dim::Known(a), Dim::Known(b)) if a != b => {
            Err(OpError::Shape(format!("inner dimensions differ: {a} vs {b}")))
        }
        _ => Ok(()),
    }
}

impl Op for MatMul {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (a, b) = (inputs.get(0)?, inputs.get(1)?);
        if a.dtype != b.dtype {
            return Err(OpError::InputDType {
                index: 1,
                dtype: b.dtype,
                expected: a.dtype.to_string(),
            });
        }
        let (Some(sa), Some(sb)) = (&a.shape, &b.shape) else {
            return Ok(vec![Fact::unranked(a.dtype)]);
        };
        if sa.rank() == 0 || sb.rank() == 0 {
            return Err(OpError::Shape("MatMul operands must have rank >= 1".into()));
        }
        let mut da = sa.0.clone();
        let mut db = sb.0.clone();
        if da.len() == 1 {
            da.insert(0, Dim::Known(1));
        }
        if db.len() == 1 {
            db.push(Dim::Known(1));
        }
        check_inner(&da[da.len() - 1], &db[db.len() - 2])?;
        let batch_a = Shape(da[..da.len() - 2].to_vec());
        let batch_b = Shape(db[..db.len() - 2].to_vec());
        let mut out = broadcast_shapes(&[&batch_a, &batch_b])?.0;
        if sa.rank() > 1 {
            out.push(da[da.len() - 2].clone());
        }
        if sb.rank() > 1 {
            out.push(db[db.len() - 1].clone());
        }
        Ok(vec![Fact::new(a.dtype, Shape(out))])
    }
}

/// `Gemm`: `alpha * op(A) @ op(B) + beta * C`.
#[derive(Debug, Clone)]
pub struct Gemm {
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of C.
    pub beta: f32,
    /// Transpose A first.
    pub trans_a: bool,
    /// Transpose B first.
    pub trans_b: bool,
}

impl Op for Gemm {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (a, b) = (inputs.get(0)?, inputs.get(1)?);
        let (Some(sa), Some(sb)) = (&a.shape, &b.shape) else {
            return Ok(vec![Fact::ranked(a.dtype, 2)]);
        };
        if sa.rank() != 2 || sb.rank() != 2 {
            return Err(OpError::Shape(format!("Gemm needs 2-D A and B, got {sa} and {sb}")));
        }
        let (m, ka) = if self.trans_a { (&sa.0[1], &sa.0[0]) } else { (&sa.0[0], &sa.0[1]) };
        let (kb, n) = if self.trans_b { (&sb.0[1], &sb.0[0]) } else { (&sb.0[0], &sb.0[1]) };
        check_inner(ka, kb)?;
        let out = Shape(vec![m.clone(), n.clone()]);
        if let Some(Some(sc)) = inputs.opt(2).map(|c| c.shape.as_ref()) {
            broadcast_shapes(&[&out, sc])
                .map_err(|e| OpError::Shape(format!("C does not broadcast to the output: {e}")))?;
        }
        Ok(vec![Fact::new(a.dtype, out)])
    }
}

/// Registers MatMul and Gemm.
pub fn register_all(r: &mut OpRegistry) {
    r.register("MatMul", |n| {
        check_inputs(n, 2, 2)?;
        Ok(Box::new(MatMul))
    });
    r.register("Gemm", |n| {
        check_inputs(n, 2, 3)?;
        let a = &n.attrs;
        Ok(Box::new(Gemm {
            alpha: a.float_or("alpha", 1.0)?,
            beta: a.float_or("beta", 1.0)?,
            trans_a: a.flag_or("transA", false)?,
            trans_b: a.flag_or("transB", false)?,
        }))
    });
}
