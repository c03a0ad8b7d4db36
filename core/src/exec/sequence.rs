//! Sequence ops in the executor: they move tensor handles, never element data.

use super::Error;
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::Node;
use crate::ops::looping::norm_axis;
use crate::ops::sequence::SequenceKind;

use super::program::CompiledGraph;
use super::slices::narrow;
use super::state::{Exec, Frame};
use super::value::{Slot, Val};

impl Exec<'_> {
    pub(super) async fn sequence(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        node: &Node,
        kind: SequenceKind,
    ) -> Result<(), Error> {
        let desc = node.desc();
        let op_err = |source: OpError| Error::Op { node: desc.clone(), source };
        let input = |i: usize| -> Result<Val, Error> {
            let v = node.input(i).ok_or_else(|| op_err(OpError::MissingInput(i)))?;
            frame.vals[v.index()]
                .clone()
                .ok_or_else(|| Error::Internal(format!("{desc}: input {i} is not live")))
        };
        let as_seq = |val: Val| match val {
            Val::Seq(d, items) => Ok((d, items)),
            Val::Tensor(_) | Val::Empty(..) | Val::Host(_) => {
                Err(op_err(OpError::Invalid("expected a sequence".into())))
            }
        };
        let as_tensor = |val: Val| match val {
            Val::Tensor(s) => Ok(s),
            Val::Seq(..) | Val::Empty(..) | Val::Host(_) => {
                Err(op_err(OpError::Invalid("expected a tensor".into())))
            }
        };
        let position = |len: usize, p: i64, allow_end: bool| -> Result<usize, Error> {
            let limit = if allow_end { len + 1 } else { len } as i64;
            let q = if p < 0 { p + len as i64 } else { p };
            if (0..limit).contains(&q) {
                Ok(q as usize)
            } else {
                Err(op_err(OpError::Shape(format!(
                    "position {p} is out of range for {len} elements"
                ))))
            }
        };
        let Some(out) = node.outputs.first().copied().flatten() else { return Ok(()) };
        let result = match kind {
            SequenceKind::Construct => {
                let mut items = Vec::new();
                for i in 0..node.inputs.len() {
                    items.push(as_tensor(input(i)?)?);
                }
                let dtype = items.first().map(|s| s.dtype).unwrap_or(DType::F32);
                Val::Seq(dtype, items)
            }
            SequenceKind::Empty(dtype) => Val::Seq(dtype, vec![]),
            SequenceKind::At => {
                let (_, items) = as_seq(input(0)?)?;
                let p = self.scalar_input(cg, frame, node, 1).await?;
                Val::Tensor(items[position(items.len(), p, false)?].clone())
            }
            SequenceKind::Length => {
                let (_, items) = as_seq(input(0)?)?;
                let key = self.alloc(0, 8, 8, &|| "a sequence length".into())?;
                let buffer = self.bufs[key].buffer;
                self.providers[0]
                    .upload(buffer, &(items.len() as i64).to_le_bytes())
                    .map_err(|e| self.provider_err(0, "writing a sequence length".into(), e))?;
                frame.trace.allocated[out.index()] = Some(8);
                Val::Tensor(Slot { key, dtype: DType::I64, shape: vec![] })
            }
            SequenceKind::Insert => {
                let (d, mut items) = as_seq(input(0)?)?;
                let t = as_tensor(input(1)?)?;
                let at = match node.input(2) {
                    Some(_) => {
                        position(items.len(), self.scalar_input(cg, frame, node, 2).await?, true)?
                    }
                    None => items.len(),
                };
                items.insert(at, t);
                Val::Seq(d, items)
            }
            SequenceKind::Erase => {
                let (d, mut items) = as_seq(input(0)?)?;
                let at = match node.input(1) {
                    Some(_) => {
                        position(items.len(), self.scalar_input(cg, frame, node, 1).await?, false)?
                    }
                    None if items.is_empty() => {
                        return Err(op_err(OpError::Shape(
                            "cannot erase from an empty sequence".into(),
                        )));
                    }
                    None => items.len() - 1,
                };
                items.remove(at);
                Val::Seq(d, items)
            }
            SequenceKind::Optional { dtype, sequence } => match node.input(0) {
                Some(_) => input(0)?,
                None => Val::Empty(dtype, sequence),
            },
            SequenceKind::HasElement => {
                let has = match node.input(0) {
                    Some(_) => !matches!(input(0)?, Val::Empty(..)),
                    None => false,
                };
                let slot = self.upload_tensor(
                    0,
                    &crate::tensor::Tensor::from_bools(vec![], &[has])
                        .map_err(|e| op_err(e.into()))?,
                    "an optional's presence",
                )?;
                frame.trace.allocated[out.index()] = Some(self.bufs[slot.key].buffer.size);
                Val::Tensor(slot)
            }
            SequenceKind::GetElement => match input(0)? {
                Val::Empty(..) => {
                    return Err(op_err(OpError::Invalid("the optional holds nothing".into())));
                }
                v => v,
            },
            SequenceKind::Split { axis, keepdims } => {
                let x = node.input(0).ok_or_else(|| op_err(OpError::MissingInput(0)))?;
                let x = self.host_value(cg, frame, x).await?;
                let rank = x.shape().len();
                let a = norm_axis(axis, rank).ok_or_else(|| {
                    op_err(OpError::Shape(format!("axis {axis} is out of range for rank {rank}")))
                })?;
                let dim = x.shape()[a];
                let sizes: Vec<usize> = match node.input(1) {
                    None => vec![1; dim],
                    Some(v) => {
                        let t = self.host_value(cg, frame, v).await?;
                        let s = t.to_i64_vec().map_err(|e| op_err(e.into()))?;
                        split_sizes(dim, &s, t.shape().is_empty()).map_err(op_err)?
                    }
                };
                let squeeze = node.input(1).is_none() && !keepdims;
                let mut items = Vec::with_capacity(sizes.len());
                let mut start = 0;
                for len in sizes {
                    let mut part = narrow(&x, a, start, len)?;
                    start += len;
                    if squeeze {
                        let mut shape = part.shape().to_vec();
                        shape.remove(a);
                        part = part.reshaped(shape).map_err(|e| op_err(e.into()))?;
                    }
                    items.push(self.upload_tensor(0, &part, "a sequence element")?);
                }
                let bytes = items.iter().map(|s| self.bufs[s.key].buffer.size).sum();
                frame.trace.allocated[out.index()] = Some(bytes);
                Val::Seq(x.dtype(), items)
            }
        };
        // Elements of sequences are guarded: the sequence may hand them out later.
        let guard = cg.plan.guard(out).is_some() || matches!(result, Val::Seq(..));
        self.hold(&result, guard);
        frame.vals[out.index()] = Some(result);
        Ok(())
    }

    async fn scalar_input(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        node: &Node,
        i: usize,
    ) -> Result<i64, Error> {
        let v = node
            .input(i)
            .ok_or_else(|| Error::Op { node: node.desc(), source: OpError::MissingInput(i) })?;
        let t = self.host_value(cg, frame, v).await?;
        match t
            .to_i64_vec()
            .map_err(|e| Error::Op { node: node.desc(), source: e.into() })?
            .as_slice()
        {
            [p] => Ok(*p),
            _ => Err(Error::Op {
                node: node.desc(),
                source: OpError::Shape(format!("input {i} must be a scalar")),
            }),
        }
    }
}

/// Piece sizes for `SplitToSequence`: a scalar `split` gives equal pieces
/// (the last one shorter), a list gives the sizes, which must add up to `dim`.
fn split_sizes(dim: usize, split: &[i64], scalar: bool) -> Result<Vec<usize>, OpError> {
    if scalar {
        let n = split.first().copied().unwrap_or(0);
        if n <= 0 {
            return Err(OpError::Shape(format!("split {n} must be positive")));
        }
        let n = n as usize;
        return Ok((0..dim.div_ceil(n)).map(|i| n.min(dim - i * n)).collect());
    }
    if split.iter().any(|&s| s < 0) || split.iter().sum::<i64>() != dim as i64 {
        return Err(OpError::Shape(format!("split {split:?} does not add up to {dim}")));
    }
    Ok(split.iter().map(|&s| s as usize).collect())
}
