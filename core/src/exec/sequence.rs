//! Sequence ops in the executor: they move tensor handles, never element data.

use crate::dtype::DType;
use crate::error::{Error, OpError};
use crate::graph::Node;
use crate::ops::sequence::SequenceKind;

use super::program::CompiledGraph;
use super::state::{Exec, Frame, Slot, Val};

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
            Val::Tensor(_) => Err(op_err(OpError::Invalid("expected a sequence".into()))),
        };
        let as_tensor = |val: Val| match val {
            Val::Tensor(s) => Ok(s),
            Val::Seq(..) => Err(op_err(OpError::Invalid("expected a tensor".into()))),
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
                let key = self.alloc(0, 8, 8, "a sequence length")?;
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
