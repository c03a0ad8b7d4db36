//! Moving tensors between the host and providers inside a run, and steps that
//! compute on the host ([`Op::eval_host`](crate::ops::Op::eval_host): string
//! tensors, host-only ops).

use super::Error;
use crate::error::OpError;
use crate::graph::Node;
use crate::tensor::Tensor;

use super::program::{CompiledGraph, Step};
use super::state::{Exec, Frame};
use super::value::{Slot, Val};

impl Exec<'_> {
    /// Reads a device tensor back to the host.
    pub(super) async fn read_slot(&mut self, slot: &Slot, what: &str) -> Result<Tensor, Error> {
        let numel: usize = slot.shape.iter().product();
        let len = slot.dtype.byte_size(numel).ok_or_else(|| {
            Error::Internal("string tensors cannot be read back from a device".into())
        })?;
        let (buffer, p) = (self.bufs[slot.key].buffer, self.bufs[slot.key].provider);
        let bytes = self.providers[p]
            .download(buffer, len)
            .await
            .map_err(|e| self.provider_err(p, format!("reading {what} back"), e))?;
        Tensor::from_bytes(slot.dtype, slot.shape.clone(), bytes.into())
            .map_err(|e| Error::Internal(e.to_string()))
    }

    /// Puts a host tensor in a new buffer on provider `p` (no references yet).
    pub(super) fn upload_tensor(
        &mut self,
        p: usize,
        t: &Tensor,
        what: &str,
    ) -> Result<Slot, Error> {
        let bytes = t.bytes().map_err(|e| Error::Internal(e.to_string()))?;
        let key =
            self.alloc(p, bytes.len() as u64, t.dtype().align() as u32, &|| what.to_string())?;
        let buffer = self.bufs[key].buffer;
        self.providers[p]
            .upload(buffer, bytes)
            .map_err(|e| self.provider_err(p, format!("uploading {what}"), e))?;
        Ok(Slot { key, dtype: t.dtype(), shape: t.shape().to_vec() })
    }

    /// Runs a host step: inputs read back, outputs kept on the host when no
    /// device can hold them (strings), uploaded to the step's provider otherwise.
    pub(super) async fn on_host(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        node: &Node,
        step: &Step,
    ) -> Result<(), Error> {
        let op_err = |source: OpError| Error::Op { node: node.desc(), source };
        let mut ins = Vec::with_capacity(node.inputs.len());
        for input in &node.inputs {
            ins.push(match input {
                Some(v) => Some(self.host_value(cg, frame, *v).await?),
                None => None,
            });
        }
        let outs = step.op.eval_host(&ins).map_err(op_err)?;
        for (o, t) in node.outputs.iter().zip(outs) {
            let Some(v) = *o else { continue };
            let val = if t.dtype().byte_size(t.numel()).is_none() {
                Val::Host(t)
            } else {
                let slot = self.upload_tensor(step.provider, &t, &node.desc().to_string())?;
                frame.trace.allocated[v.index()] = Some(self.bufs[slot.key].buffer.size);
                Val::Tensor(slot)
            };
            self.hold(&val, cg.plan.guard(v).is_some());
            frame.vals[v.index()] = Some(val);
        }
        Ok(())
    }
}
