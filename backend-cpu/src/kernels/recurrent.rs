//! RNN, GRU and LSTM in f64: the input projection of every step at once and
//! each step's recurrent projection through `gemm`, the gates elementwise.

use onyx_core::dtype::DType;
use onyx_core::ep::EpError;
use onyx_core::ops::recurrent::{Activation, Cell, Recurrent};

use super::dispatch::{AsF64, floats};
use super::matmul::{Mat, gemm_into};
use super::{CpuKernel, KernelIo, KernelRegistry, in_dtype, op, unsupported_dtype};

/// The problem sizes of one launch.
struct Dims {
    batch: usize,
    input: usize,
    hidden: usize,
    dirs: usize,
}

impl Dims {
    /// The row of (step or direction `a` of `a_len`, batch `b`) in an
    /// `[a, batch]` layout, or `[batch, a]` when batch-major.
    fn at(&self, batch_major: bool, a: usize, a_len: usize, b: usize) -> usize {
        if batch_major { b * a_len + a } else { a * self.batch + b }
    }
}

fn read<T: AsF64 + bytemuck::Pod>(
    io: &KernelIo,
    i: usize,
    len: usize,
) -> Result<Option<Vec<f64>>, EpError> {
    if io.input_view(i).is_none() {
        return Ok(None);
    }
    let v: Vec<f64> = io.input::<T>(i)?.iter().map(|x| x.to_f64()).collect();
    if v.len() != len {
        return Err(EpError::Kernel(format!("input {i} has {} elements, expected {len}", v.len())));
    }
    Ok(Some(v))
}

/// The state of one direction, per batch row.
struct State {
    h: Vec<f64>,
    c: Vec<f64>,
}

/// One step of one batch row: the new hidden (and cell) state from `x` (input
/// projection + its bias), `hr` (recurrent projection H R^T) and `rb` (recurrent bias).
#[allow(clippy::too_many_arguments)]
fn step(
    cell: Cell,
    acts: &[Activation],
    clip: Option<f64>,
    x: &[f64],
    hr: &[f64],
    rb: &[f64],
    recurrent_weights: &[f64],
    peephole: Option<&[f64]>,
    h_prev: &[f64],
    c_prev: &[f64],
    h_next: &mut [f64],
    c_next: &mut [f64],
) {
    let n = h_prev.len();
    let clip = |v: f64| clip.map_or(v, |c| v.clamp(-c, c));
    let r = |k: usize| hr[k] + rb[k];
    match cell {
        Cell::Rnn => {
            for j in 0..n {
                h_next[j] = acts[0].apply(clip(x[j] + r(j)));
            }
        }
        Cell::Gru { linear_before_reset } => {
            let (f, g) = (acts[0], acts[1]);
            let reset: Vec<f64> = (0..n).map(|j| f.apply(clip(x[n + j] + r(n + j)))).collect();
            for j in 0..n {
                let z = f.apply(clip(x[j] + r(j)));
                // Without linear_before_reset the reset gate applies to H before
                // the product with R_h: (reset ⊙ H) R_h^T, computed here.
                let rec = if linear_before_reset {
                    reset[j] * r(2 * n + j)
                } else {
                    let row = &recurrent_weights[(2 * n + j) * n..(2 * n + j + 1) * n];
                    row.iter().zip(h_prev).zip(&reset).map(|((w, h), g)| w * h * g).sum::<f64>()
                        + rb[2 * n + j]
                };
                let cand = g.apply(clip(x[2 * n + j] + rec));
                h_next[j] = (1.0 - z) * cand + z * h_prev[j];
            }
        }
        Cell::Lstm { input_forget } => {
            let (f, g, h) = (acts[0], acts[1], acts[2]);
            let p = |k: usize, j: usize| peephole.map_or(0.0, |p| p[k * n + j]);
            for j in 0..n {
                let pre = |k: usize| x[k * n + j] + r(k * n + j);
                let i = f.apply(clip(pre(0) + p(0, j) * c_prev[j]));
                let fg = if input_forget {
                    1.0 - i
                } else {
                    f.apply(clip(pre(2) + p(2, j) * c_prev[j]))
                };
                let cand = g.apply(clip(pre(3)));
                let c = fg * c_prev[j] + i * cand;
                let o = f.apply(clip(pre(1) + p(1, j) * c));
                c_next[j] = c;
                h_next[j] = o * h.apply(c);
            }
        }
    }
}

/// The inputs of a recurrent layer in f64, in ONNX's layouts: X, W
/// `[dirs, gates·hidden, input]`, R `[dirs, gates·hidden, hidden]`, both
/// biases `[dirs, 2·gates·hidden]`, the sequence lengths and the optional
/// initial states and peepholes.
pub(crate) struct Layer {
    pub x: Vec<f64>,
    pub w: Vec<f64>,
    pub r: Vec<f64>,
    pub bias: Vec<f64>,
    pub lens: Vec<usize>,
    pub h0: Option<Vec<f64>>,
    pub c0: Option<Vec<f64>>,
    pub peep: Option<Vec<f64>>,
}

/// The outputs of a recurrent layer: Y, Y_h and Y_c.
pub(crate) type LayerOutputs = [Vec<f64>; 3];

fn recurrent<T: AsF64 + bytemuck::Pod>(io: &KernelIo, r: &Recurrent) -> Result<(), EpError> {
    let xs = io.in_view(0)?.shape.clone();
    let (seq, batch) = if r.batch_major { (xs[1], xs[0]) } else { (xs[0], xs[1]) };
    let d = Dims { batch, input: xs[2], hidden: r.hidden, dirs: r.directions() };
    let (h, gh) = (d.hidden, r.cell.gates() * d.hidden);
    let lstm = matches!(r.cell, Cell::Lstm { .. });
    let need = |i: usize, len: usize| -> Result<Vec<f64>, EpError> {
        read::<T>(io, i, len)?.ok_or_else(|| EpError::Kernel(format!("input {i} is required")))
    };
    let layer = Layer {
        x: need(0, seq * batch * d.input)?,
        w: need(1, d.dirs * gh * d.input)?,
        r: need(2, d.dirs * gh * h)?,
        bias: read::<T>(io, 3, d.dirs * 2 * gh)?.unwrap_or_else(|| vec![0.0; d.dirs * 2 * gh]),
        lens: sequence_lens(io, 4, seq, batch)?,
        h0: read::<T>(io, 5, d.dirs * batch * h)?,
        c0: if lstm { read::<T>(io, 6, d.dirs * batch * h)? } else { None },
        peep: if lstm { read::<T>(io, 7, d.dirs * 3 * h)? } else { None },
    };
    let outputs = run_layer(r, &xs, &layer);
    for (o, v) in outputs.iter().enumerate() {
        if io.has_output(o) {
            io.output::<T>(o)?.iter_mut().zip(v.iter()).for_each(|(d, s)| *d = T::from_f64(*s));
        }
    }
    Ok(())
}

/// Input `i`'s sequence lengths (clamped to `seq`), or `seq` for every batch row.
///
/// # Errors
/// [`EpError::Kernel`] when their count is not the batch.
pub(crate) fn sequence_lens(
    io: &KernelIo,
    i: usize,
    seq: usize,
    batch: usize,
) -> Result<Vec<usize>, EpError> {
    let lens: Vec<usize> = match io.input_view(i) {
        Some(_) => io.ints(i)?.into_iter().map(|l| l.clamp(0, seq as i64) as usize).collect(),
        None => vec![seq; batch],
    };
    if lens.len() != batch {
        return Err(EpError::Kernel(format!(
            "{} sequence lengths for a batch of {batch}",
            lens.len()
        )));
    }
    Ok(lens)
}

/// Runs every direction of a layer over X of shape `xs`; the sizes of `l`'s
/// vectors must fit it (the callers read them with those sizes).
pub(crate) fn run_layer(r: &Recurrent, xs: &[usize], l: &Layer) -> LayerOutputs {
    let (seq, batch) = if r.batch_major { (xs[1], xs[0]) } else { (xs[0], xs[1]) };
    let d = Dims { batch, input: xs[2], hidden: r.hidden, dirs: r.directions() };
    let (h, gh) = (d.hidden, r.cell.gates() * d.hidden);
    let (x, w, rw, bias, lens, h0, c0, peep) =
        (&l.x, &l.w, &l.r, &l.bias, &l.lens, &l.h0, &l.c0, &l.peep);
    let acts_per_dir = r.cell.activations();

    let mut y = vec![0.0; seq * d.dirs * batch * h];
    let mut yh = vec![0.0; d.dirs * batch * h];
    let mut yc = vec![0.0; d.dirs * batch * h];
    for dir in 0..d.dirs {
        // Input projection of every step: [rows of X, gh].
        let mut xw = vec![0.0; seq * batch * gh];
        // SAFETY: X is [seq * batch, input] and W's direction block [gh, input]
        // read transposed; xw is a fresh [seq * batch, gh] buffer.
        unsafe {
            gemm_into(
                (seq * batch, gh, d.input),
                &mut xw,
                0,
                x,
                Mat::row_major(0, d.input, false),
                w,
                Mat::row_major(dir * gh * d.input, d.input, true),
                false,
                1.0,
            );
        }
        let (wb, rb) = bias[dir * 2 * gh..(dir + 1) * 2 * gh].split_at(gh);
        let acts = &r.activations[dir * acts_per_dir..(dir + 1) * acts_per_dir];
        let rdir = &rw[dir * gh * h..(dir + 1) * gh * h];
        let pdir = peep.as_ref().map(|p| &p[dir * 3 * h..(dir + 1) * 3 * h]);
        let init = |v: &Option<Vec<f64>>, b: usize| -> Vec<f64> {
            let at = d.at(r.batch_major, dir, d.dirs, b) * h;
            v.as_ref().map_or(vec![0.0; h], |v| v[at..at + h].to_vec())
        };
        let mut state: Vec<State> =
            (0..batch).map(|b| State { h: init(h0, b), c: init(c0, b) }).collect();
        let mut hr = vec![0.0; batch * gh];
        let mut hs = vec![0.0; batch * h];
        for s in 0..seq {
            for (b, st) in state.iter().enumerate() {
                hs[b * h..(b + 1) * h].copy_from_slice(&st.h);
            }
            // SAFETY: hs is [batch, h] and R's direction block [gh, h] read
            // transposed; hr is a separate [batch, gh] buffer.
            unsafe {
                gemm_into(
                    (batch, gh, h),
                    &mut hr,
                    0,
                    &hs,
                    Mat::row_major(0, h, false),
                    rdir,
                    Mat::row_major(0, h, true),
                    false,
                    1.0,
                );
            }
            for (b, st) in state.iter_mut().enumerate() {
                if s >= lens[b] {
                    continue;
                }
                let t = if r.reversed(dir) { lens[b] - 1 - s } else { s };
                let row = d.at(r.batch_major, t, seq, b);
                let xg: Vec<f64> =
                    xw[row * gh..(row + 1) * gh].iter().zip(wb).map(|(a, c)| a + c).collect();
                let hg = &hr[b * gh..(b + 1) * gh];
                let (mut hn, mut cn) = (vec![0.0; h], vec![0.0; h]);
                step(r.cell, acts, r.clip, &xg, hg, rb, rdir, pdir, &st.h, &st.c, &mut hn, &mut cn);
                let at = if r.batch_major {
                    ((b * seq + t) * d.dirs + dir) * h
                } else {
                    ((t * d.dirs + dir) * batch + b) * h
                };
                y[at..at + h].copy_from_slice(&hn);
                st.h = hn;
                st.c = cn;
            }
        }
        for (b, st) in state.iter().enumerate() {
            let at = d.at(r.batch_major, dir, d.dirs, b) * h;
            yh[at..at + h].copy_from_slice(&st.h);
            yc[at..at + h].copy_from_slice(&st.c);
        }
    }
    [y, yh, yc]
}

struct RecurrentKernel {
    op: Recurrent,
    dtype: DType,
}

impl CpuKernel for RecurrentKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        floats!(self.dtype, T => recurrent::<T>(io, &self.op),
            else Err(unsupported_dtype("recurrent cell", self.dtype)))
    }
}

/// Registers RNN, GRU and LSTM.
pub fn register_all(r: &mut KernelRegistry) {
    for name in ["RNN", "GRU", "LSTM"] {
        r.register(name, |s| {
            Ok(Box::new(RecurrentKernel {
                op: op::<Recurrent>(s)?.clone(),
                dtype: in_dtype(s, 0)?,
            }))
        });
    }
}
