//! `LinearAttention`: the token recurrence in f32 as the reference runs it,
//! one task per `(batch, key/value head)` state.

use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::attention::{LinearAttention, LinearGeometry};
use rayon::prelude::*;

use crate::par::Loop;

use super::super::dispatch::{AsF64, floats};
use super::super::nn::is_float;
use super::super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};
use super::{kernel_err, store};

/// Input `i` as f32.
fn f32s(io: &KernelIo, i: usize) -> Result<Vec<f32>, EpError> {
    let dtype = io.in_view(i)?.dtype;
    floats!(dtype, T => Ok(io.input::<T>(i)?.iter().map(|v| v.to_f64() as f32).collect()),
        else Err(unsupported_dtype("LinearAttention", dtype)))
}

/// A `[batch, seq, n]` gate input (decay or beta) and its last dim, which must be one of `allowed`.
fn gate(
    io: &KernelIo,
    i: usize,
    g: &LinearGeometry,
    allowed: &[usize],
) -> Result<(Vec<f32>, usize), EpError> {
    let shape = &io.in_view(i)?.shape;
    match shape[..] {
        [b, t, n] if b == g.batch && t == g.len && allowed.contains(&n) => Ok((f32s(io, i)?, n)),
        _ => Err(kernel_err(format!(
            "LinearAttention: input {i} of shape {shape:?}, expected [{}, {}, one of {allowed:?}]",
            g.batch, g.len
        ))),
    }
}

/// Everything one state's task reads.
struct Inputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    past: Option<Vec<f32>>,
    /// Decay and its last dim (`kv_heads` for one value per head, else per key feature).
    decay: Option<(Vec<f32>, usize)>,
    /// Beta and its last dim (`kv_heads`, or 1 shared by all heads).
    beta: Option<(Vec<f32>, usize)>,
}

struct LinearKernel {
    op: LinearAttention,
}

impl LinearKernel {
    /// Runs the recurrence of state `bk` (batch `bk / kv_heads`): its final
    /// state `[dk, dv]` and its query heads' outputs `[group, len, dv]`.
    fn state(&self, x: &Inputs, g: &LinearGeometry, bk: usize) -> (Vec<f32>, Vec<f32>) {
        let (hq, hkv, dk, dv) = (self.op.q_heads, self.op.kv_heads, g.dk, g.dv);
        let (b, kh) = (bk / hkv, bk % hkv);
        let group = hq / hkv;
        let scale = self.op.scale_for(dk);
        let mut s = x
            .past
            .as_ref()
            .map_or_else(|| vec![0f32; dk * dv], |p| p[bk * dk * dv..(bk + 1) * dk * dv].to_vec());
        let mut out = vec![0f32; group * g.len * dv];
        let mut vt = vec![0f32; dv];
        for t in 0..g.len {
            let row = b * g.len + t;
            let kt = &x.k[(row * hkv + kh) * dk..][..dk];
            vt.copy_from_slice(&x.v[(row * hkv + kh) * dv..][..dv]);
            if let Some((decay, n)) = &x.decay {
                for d in 0..dk {
                    let gd = if *n == hkv {
                        decay[row * hkv + kh]
                    } else {
                        decay[(row * hkv + kh) * dk + d]
                    };
                    let e = gd.exp();
                    s[d * dv..(d + 1) * dv].iter_mut().for_each(|v| *v *= e);
                }
            }
            if let Some((beta, n)) = &x.beta {
                let bt = if *n == 1 { beta[row] } else { beta[row * hkv + kh] };
                for (m, v) in vt.iter_mut().enumerate() {
                    let retrieved: f32 = (0..dk).map(|d| s[d * dv + m] * kt[d]).sum();
                    *v = bt * (*v - retrieved);
                }
            }
            for (d, &kd) in kt.iter().enumerate() {
                s[d * dv..(d + 1) * dv].iter_mut().zip(&vt).for_each(|(sv, &v)| *sv += kd * v);
            }
            for gi in 0..group {
                let qt = &x.q[(row * hq + kh * group + gi) * dk..][..dk];
                for m in 0..dv {
                    let dot: f32 = (0..dk).map(|d| qt[d] * s[d * dv + m]).sum();
                    out[(gi * g.len + t) * dv + m] = scale * dot;
                }
            }
        }
        (s, out)
    }
}

impl CpuKernel for LinearKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let shape = |i: usize| io.in_view(i).map(|v| v.shape.clone());
        let g = self.op.geometry(&shape(0)?, &shape(1)?, &shape(2)?).map_err(kernel_err)?;
        let (hq, hkv) = (self.op.q_heads, self.op.kv_heads);
        let states = g.batch * hkv * g.dk * g.dv;
        let past = if io.present(3) { Some(f32s(io, 3)?) } else { None };
        if past
            .as_ref()
            .is_some_and(|p| p.len() != states || shape(3).ok().map(|s| s.len()) != Some(4))
        {
            return Err(kernel_err(format!(
                "LinearAttention: past_state must be [{}, {hkv}, {}, {}]",
                g.batch, g.dk, g.dv
            )));
        }
        let x = Inputs {
            q: f32s(io, 0)?,
            k: f32s(io, 1)?,
            v: f32s(io, 2)?,
            past,
            decay: self.op.gated.then(|| gate(io, 4, &g, &[hkv, hkv * g.dk])).transpose()?,
            beta: self.op.delta.then(|| gate(io, 5, &g, &[hkv, 1])).transpose()?,
        };
        let results: Vec<(Vec<f32>, Vec<f32>)> =
            (0..g.batch * hkv).into_par_iter().map_collect(|bk| self.state(&x, &g, bk));
        let (group, dv) = (hq / hkv, g.dv);
        let mut y = vec![0f32; g.batch * g.len * hq * dv];
        for (bk, (_, out)) in results.iter().enumerate() {
            let (b, kh) = (bk / hkv, bk % hkv);
            for gi in 0..group {
                for t in 0..g.len {
                    let start = ((b * g.len + t) * hq + kh * group + gi) * dv;
                    y[start..start + dv].copy_from_slice(&out[(gi * g.len + t) * dv..][..dv]);
                }
            }
        }
        store(io, 0, &y, "LinearAttention")?;
        if io.has_output(1) {
            let present: Vec<f32> = results.into_iter().flat_map(|(s, _)| s).collect();
            store(io, 1, &present, "LinearAttention")?;
        }
        Ok(())
    }
}

fn build(s: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let dtype = s.input_dtype(0)?;
    if !is_float(dtype) {
        return Err(unsupported_dtype("LinearAttention", dtype));
    }
    Ok(Box::new(LinearKernel { op: s.op_as::<LinearAttention>()?.clone() }))
}

/// Registers `LinearAttention`.
pub(super) fn register_all(r: &mut KernelRegistry) {
    r.register("LinearAttention", build);
}
