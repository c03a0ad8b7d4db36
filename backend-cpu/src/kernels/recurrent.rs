//! RNN, GRU and LSTM: the input projection of every step at once and each
//! step's recurrent projection through `gemm`, the gates elementwise. f32
//! models compute in f32 straight from their tensors (sigmoid and tanh
//! through `fastmath`); the other float types are widened to f64.

use std::borrow::Cow;

use onyx_core::dtype::DType;
use onyx_core::ep::EpError;
use onyx_core::ops::recurrent::{Activation, Cell, Recurrent};

use super::dispatch::{AsF64, floats};
use super::fastmath;
use super::matmul::{GemmType, Mat, gemm_into};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// The element type a cell computes in: f32 (for f32 models) or f64.
pub(crate) trait Real:
    GemmType + AsF64 + bytemuck::Pod + num_traits::Float + std::iter::Sum
{
    /// An activation function.
    fn act(a: Activation, x: Self) -> Self;
}

impl Real for f32 {
    #[inline(always)]
    fn act(a: Activation, x: f32) -> f32 {
        match a {
            Activation::Sigmoid => fastmath::sigmoid(x),
            Activation::Tanh => fastmath::tanh(x),
            other => other.apply(x as f64) as f32,
        }
    }
}

impl Real for f64 {
    fn act(a: Activation, x: f64) -> f64 {
        a.apply(x)
    }
}

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

/// Input `i` as `F`s: borrowed when its elements already are `F`s (`T == F`),
/// else widened; `None` when absent.
fn read<'a, T: AsF64 + bytemuck::Pod, F: Real>(
    io: &'a KernelIo,
    i: usize,
    len: usize,
) -> Result<Option<Cow<'a, [F]>>, EpError> {
    if io.input_view(i).is_none() {
        return Ok(None);
    }
    let raw = io.input::<T>(i)?;
    let v: Cow<'a, [F]> = match bytemuck::try_cast_slice::<T, F>(raw) {
        Ok(same) if std::any::TypeId::of::<T>() == std::any::TypeId::of::<F>() => {
            Cow::Borrowed(same)
        }
        _ => Cow::Owned(raw.iter().map(|x| F::from_f64(x.to_f64())).collect()),
    };
    if v.len() != len {
        return Err(EpError::Kernel(format!("input {i} has {} elements, expected {len}", v.len())));
    }
    Ok(Some(v))
}

/// The state of one direction, per batch row.
struct State<F> {
    h: Vec<F>,
    c: Vec<F>,
}

/// One step of one batch row: the new hidden (and cell) state from `x` (input
/// projection + its bias), `hr` (recurrent projection H R^T) and `rb` (recurrent bias).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn step<F: Real>(
    cell: Cell,
    acts: &[Activation],
    clip: Option<f64>,
    x: &[F],
    hr: &[F],
    rb: &[F],
    recurrent_weights: &[F],
    peephole: Option<&[F]>,
    h_prev: &[F],
    c_prev: &[F],
    h_next: &mut [F],
    c_next: &mut [F],
) {
    let n = h_prev.len();
    let clip_at = clip.map(F::from_f64);
    let clip = |v: F| clip_at.map_or(v, |c| v.max(-c).min(c));
    let one = F::one();
    let r = |k: usize| hr[k] + rb[k];
    match cell {
        Cell::Rnn => {
            for j in 0..n {
                h_next[j] = F::act(acts[0], clip(x[j] + r(j)));
            }
        }
        Cell::Gru { linear_before_reset } => {
            let (f, g) = (acts[0], acts[1]);
            let reset: Vec<F> = (0..n).map(|j| F::act(f, clip(x[n + j] + r(n + j)))).collect();
            for j in 0..n {
                let z = F::act(f, clip(x[j] + r(j)));
                // Without linear_before_reset the reset gate applies to H before
                // the product with R_h: (reset ⊙ H) R_h^T, computed here.
                let rec = if linear_before_reset {
                    reset[j] * r(2 * n + j)
                } else {
                    let row = &recurrent_weights[(2 * n + j) * n..(2 * n + j + 1) * n];
                    row.iter().zip(h_prev).zip(&reset).map(|((&w, &h), &g)| w * h * g).sum::<F>()
                        + rb[2 * n + j]
                };
                let cand = F::act(g, clip(x[2 * n + j] + rec));
                h_next[j] = (one - z) * cand + z * h_prev[j];
            }
        }
        Cell::Lstm { input_forget } => {
            let (f, g, h) = (acts[0], acts[1], acts[2]);
            let p = |k: usize, j: usize| peephole.map_or(F::zero(), |p| p[k * n + j]);
            for j in 0..n {
                let pre = |k: usize| x[k * n + j] + r(k * n + j);
                let i = F::act(f, clip(pre(0) + p(0, j) * c_prev[j]));
                let fg = if input_forget {
                    one - i
                } else {
                    F::act(f, clip(pre(2) + p(2, j) * c_prev[j]))
                };
                let cand = F::act(g, clip(pre(3)));
                let c = fg * c_prev[j] + i * cand;
                let o = F::act(f, clip(pre(1) + p(1, j) * c));
                c_next[j] = c;
                h_next[j] = o * F::act(h, c);
            }
        }
    }
}

fn recurrent<T: AsF64 + bytemuck::Pod>(io: &KernelIo, r: &Recurrent) -> Result<(), EpError> {
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        run::<T, f32>(io, r)
    } else {
        run::<T, f64>(io, r)
    }
}

/// The inputs of a recurrent layer in ONNX's layouts: X, W
/// `[dirs, gates·hidden, input]`, R `[dirs, gates·hidden, hidden]`, both
/// biases `[dirs, 2·gates·hidden]`, the sequence lengths and the optional
/// initial states and peepholes; borrowed where the tensors already hold `F`s.
pub(crate) struct Layer<'a, F: Clone> {
    pub x: Cow<'a, [F]>,
    pub w: Cow<'a, [F]>,
    pub r: Cow<'a, [F]>,
    pub bias: Cow<'a, [F]>,
    pub lens: Vec<usize>,
    pub h0: Option<Cow<'a, [F]>>,
    pub c0: Option<Cow<'a, [F]>>,
    pub peep: Option<Cow<'a, [F]>>,
}

/// The outputs of a recurrent layer: Y, Y_h and Y_c.
pub(crate) type LayerOutputs<F> = [Vec<F>; 3];

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

/// The cell over `T` tensors, computed in `F`.
fn run<T: AsF64 + bytemuck::Pod, F: Real>(io: &KernelIo, r: &Recurrent) -> Result<(), EpError> {
    let xs = io.in_view(0)?.shape.clone();
    let (seq, batch) = if r.batch_major { (xs[1], xs[0]) } else { (xs[0], xs[1]) };
    let d = Dims { batch, input: xs[2], hidden: r.hidden, dirs: r.directions() };
    let (h, gh) = (d.hidden, r.cell.gates() * d.hidden);
    let lstm = matches!(r.cell, Cell::Lstm { .. });
    let need = |i: usize, len: usize| {
        read::<T, F>(io, i, len)?.ok_or_else(|| EpError::Kernel(format!("input {i} is required")))
    };
    let layer = Layer {
        x: need(0, seq * batch * d.input)?,
        w: need(1, d.dirs * gh * d.input)?,
        r: need(2, d.dirs * gh * h)?,
        bias: read::<T, F>(io, 3, d.dirs * 2 * gh)?
            .unwrap_or_else(|| Cow::Owned(vec![F::zero(); d.dirs * 2 * gh])),
        lens: sequence_lens(io, 4, seq, batch)?,
        h0: read::<T, F>(io, 5, d.dirs * batch * h)?,
        c0: if lstm { read::<T, F>(io, 6, d.dirs * batch * h)? } else { None },
        peep: if lstm { read::<T, F>(io, 7, d.dirs * 3 * h)? } else { None },
    };
    let outputs = run_layer(r, &xs, &layer);
    for (o, v) in outputs.iter().enumerate() {
        if io.has_output(o) {
            let out = io.output::<T>(o)?;
            match bytemuck::try_cast_slice_mut::<T, F>(out) {
                Ok(same) if std::any::TypeId::of::<T>() == std::any::TypeId::of::<F>() => {
                    same.iter_mut().zip(v.iter()).for_each(|(d, s)| *d = *s);
                }
                _ => out
                    .iter_mut()
                    .zip(v.iter())
                    .for_each(|(d, s)| *d = T::from_f64(AsF64::to_f64(*s))),
            }
        }
    }
    Ok(())
}

/// Runs every direction of a layer over X of shape `xs`; the sizes of `l`'s
/// vectors must fit it (the callers read them with those sizes).
pub(crate) fn run_layer<F: Real>(r: &Recurrent, xs: &[usize], l: &Layer<'_, F>) -> LayerOutputs<F> {
    let (seq, batch) = if r.batch_major { (xs[1], xs[0]) } else { (xs[0], xs[1]) };
    let d = Dims { batch, input: xs[2], hidden: r.hidden, dirs: r.directions() };
    let (h, gh) = (d.hidden, r.cell.gates() * d.hidden);
    let (x, w, rw, bias, lens, h0, c0, peep) =
        (&l.x, &l.w, &l.r, &l.bias, &l.lens, &l.h0, &l.c0, &l.peep);
    let acts_per_dir = r.cell.activations();

    let zero = F::zero();
    let mut y = vec![zero; seq * d.dirs * batch * h];
    let mut yh = vec![zero; d.dirs * batch * h];
    let mut yc = vec![zero; d.dirs * batch * h];
    // Per-step scratch, allocated once.
    let mut xw = vec![zero; seq * batch * gh];
    let mut hr = vec![zero; batch * gh];
    let mut hs = vec![zero; batch * h];
    let mut xg = vec![zero; gh];
    let (mut hn, mut cn) = (vec![zero; h], vec![zero; h]);
    for dir in 0..d.dirs {
        // Input projection of every step: [rows of X, gh].
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
                F::one(),
            );
        }
        let (wb, rb) = bias[dir * 2 * gh..(dir + 1) * 2 * gh].split_at(gh);
        let acts = &r.activations[dir * acts_per_dir..(dir + 1) * acts_per_dir];
        let rdir = &rw[dir * gh * h..(dir + 1) * gh * h];
        let pdir = peep.as_ref().map(|p| &p[dir * 3 * h..(dir + 1) * 3 * h]);
        let init = |v: &Option<Cow<[F]>>, b: usize| -> Vec<F> {
            let at = d.at(r.batch_major, dir, d.dirs, b) * h;
            v.as_ref().map_or(vec![zero; h], |v| v[at..at + h].to_vec())
        };
        let mut state: Vec<State<F>> =
            (0..batch).map(|b| State { h: init(h0, b), c: init(c0, b) }).collect();
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
                    F::one(),
                );
            }
            for (b, st) in state.iter_mut().enumerate() {
                if s >= lens[b] {
                    continue;
                }
                let t = if r.reversed(dir) { lens[b] - 1 - s } else { s };
                let row = d.at(r.batch_major, t, seq, b);
                xg.iter_mut()
                    .zip(&xw[row * gh..(row + 1) * gh])
                    .zip(wb)
                    .for_each(|((g, &a), &c)| *g = a + c);
                let hg = &hr[b * gh..(b + 1) * gh];
                fastmath::vectorized(|| {
                    step(
                        r.cell, acts, r.clip, &xg, hg, rb, rdir, pdir, &st.h, &st.c, &mut hn,
                        &mut cn,
                    )
                });
                let at = if r.batch_major {
                    ((b * seq + t) * d.dirs + dir) * h
                } else {
                    ((t * d.dirs + dir) * batch + b) * h
                };
                y[at..at + h].copy_from_slice(&hn);
                st.h.copy_from_slice(&hn);
                st.c.copy_from_slice(&cn);
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
                op: s.op_as::<Recurrent>()?.clone(),
                dtype: s.input_dtype(0)?,
            }))
        });
    }
}
