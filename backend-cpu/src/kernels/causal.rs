//! `CausalConvWithState` on the CPU: per (batch, channel) row, the past state
//! and the input form one padded line; each output is a `k`-tap dot product
//! over it (in f64), and the present state is the line's last `k - 1` values.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::causal::CausalConvWithState;
use rayon::prelude::*;

use crate::par::Loop;

use super::dispatch::{AsF64, floats};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

fn causal_conv<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    silu: bool,
) -> Result<(), EpError> {
    let xs = io.in_view(0)?.shape.clone();
    let ws = io.in_view(1)?.shape.clone();
    let [b, c, l] = xs[..] else {
        return Err(EpError::Kernel(format!("input {xs:?} is not [batch, channels, length]")));
    };
    if ws.len() != 3 || ws[0] != c || ws[1] != 1 || ws[2] == 0 {
        return Err(EpError::Kernel(format!("weight {ws:?} is not [{c}, 1, k]")));
    }
    let k = ws[2];
    let s = k - 1;
    let x: Vec<f64> = io.input::<T>(0)?.iter().map(|v| v.to_f64()).collect();
    let w: Vec<f64> = io.input::<T>(1)?.iter().map(|v| v.to_f64()).collect();
    let bias: Vec<f64> = if io.present(2) {
        let v: Vec<f64> = io.input::<T>(2)?.iter().map(|v| v.to_f64()).collect();
        if v.len() != c {
            return Err(EpError::Kernel(format!("bias has {} values for {c} channels", v.len())));
        }
        v
    } else {
        vec![0.0; c]
    };
    let past: Vec<f64> = if io.present(3) {
        let ps = &io.in_view(3)?.shape;
        if ps[..] != [b, c, s] {
            return Err(EpError::Kernel(format!("past_state {ps:?} is not [{b}, {c}, {s}]")));
        }
        io.input::<T>(3)?.iter().map(|v| v.to_f64()).collect()
    } else {
        vec![0.0; b * c * s]
    };
    // Each (batch, channel) row: its padded line, then outputs and new state.
    let rows: Vec<(Vec<T>, Vec<T>)> = (0..b * c).into_par_iter().map_collect(|row| {
        let ch = row % c;
        let mut line = Vec::with_capacity(s + l);
        line.extend_from_slice(&past[row * s..(row + 1) * s]);
        line.extend_from_slice(&x[row * l..(row + 1) * l]);
        let taps = &w[ch * k..(ch + 1) * k];
        let out = (0..l)
            .map(|t| {
                let y =
                    bias[ch] + taps.iter().zip(&line[t..t + k]).map(|(a, b)| a * b).sum::<f64>();
                T::from_f64(if silu { y / (1.0 + (-y).exp()) } else { y })
            })
            .collect();
        let state = line[line.len() - s..].iter().map(|&v| T::from_f64(v)).collect();
        (out, state)
    });
    let out = io.output::<T>(0)?;
    for (row, (o, _)) in rows.iter().enumerate() {
        out[row * l..(row + 1) * l].copy_from_slice(o);
    }
    if io.has_output(1) {
        let state = io.output::<T>(1)?;
        for (row, (_, st)) in rows.iter().enumerate() {
            state[row * s..(row + 1) * s].copy_from_slice(st);
        }
    }
    Ok(())
}

struct CausalConvKernel {
    dtype: DType,
    silu: bool,
}

impl CpuKernel for CausalConvKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        floats!(self.dtype, T => causal_conv::<T>(io, self.silu),
            else Err(unsupported_dtype("CausalConvWithState", self.dtype)))
    }
}

/// Registers the kernel.
pub(crate) fn register_all(r: &mut KernelRegistry) {
    r.register("CausalConvWithState", |s: &KernelSpec<'_>| {
        let dtype = s.input_dtype(0)?;
        Ok(Box::new(CausalConvKernel { dtype, silu: s.op_as::<CausalConvWithState>()?.silu }))
    });
}
