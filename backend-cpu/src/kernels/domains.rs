//! The training optimizers (Adagrad, Adam, Momentum; computed in f64), the
//! `ai.onnx.ml` Binarizer, ArrayFeatureExtractor and TreeEnsemble, and
//! TfIdfVectorizer.

use onyx_core::dtype::DType;
use onyx_core::ep::EpError;
use onyx_core::ops::domains::{
    ArrayFeatureExtractor, Binarizer, ML_DOMAIN, Optimizer, Rule, TRAINING_DOMAIN, TfIdfVectorizer,
    TreeEnsemble,
};

use super::dispatch::{AsF64, by_width, floats, numeric};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// One element's update: `(x, g, states) -> (x', states')`, states in output order.
fn update(rule: Rule, r: f64, t: i64, x: f64, g: f64, states: &[f64]) -> (f64, [f64; 2]) {
    match rule {
        Rule::Adagrad { decay_factor, epsilon, norm_coefficient } => {
            let rate = r / (1.0 + t as f64 * decay_factor as f64);
            let g = norm_coefficient as f64 * x + g;
            let h = states[0] + g * g;
            (x - rate * g / (h.sqrt() + epsilon as f64), [h, 0.0])
        }
        Rule::Adam { alpha, beta, epsilon, norm_coefficient, norm_coefficient_post } => {
            let (alpha, beta) = (alpha as f64, beta as f64);
            let g = norm_coefficient as f64 * x + g;
            let v = alpha * states[0] + (1.0 - alpha) * g;
            let h = beta * states[1] + (1.0 - beta) * g * g;
            let rate = if t > 0 {
                r * (1.0 - beta.powi(t as i32)).sqrt() / (1.0 - alpha.powi(t as i32))
            } else {
                r
            };
            let x = x - rate * v / (h.sqrt() + epsilon as f64);
            ((1.0 - norm_coefficient_post as f64) * x, [v, h])
        }
        Rule::Momentum { alpha, beta, norm_coefficient, nesterov } => {
            let g = norm_coefficient as f64 * x + g;
            let beta = if t > 0 { beta as f64 } else { 1.0 };
            let v = alpha as f64 * states[0] + beta * g;
            let step = if nesterov { g + alpha as f64 * v } else { v };
            (x - r * step, [v, 0.0])
        }
    }
}

fn optimize<T: AsF64 + bytemuck::Pod>(io: &KernelIo, o: &Optimizer) -> Result<(), EpError> {
    let n = o.tensors(io.inputs.len()).map_err(|e| EpError::Kernel(e.to_string()))?;
    let r = io.floats(0)?.first().copied().unwrap_or(0.0);
    let t = io.ints(1)?.first().copied().unwrap_or(0);
    let states = o.input_groups() - 2;
    for i in 0..n {
        let x = io.input::<T>(2 + i)?;
        let g = io.input::<T>(2 + n + i)?;
        let s: Vec<&[T]> =
            (0..states).map(|j| io.input::<T>(2 + (2 + j) * n + i)).collect::<Result<_, _>>()?;
        if g.len() != x.len() || s.iter().any(|v| v.len() != x.len()) {
            return Err(EpError::Kernel(format!("optimizer tensors of group {i} differ in size")));
        }
        let mut new_x = vec![T::from_f64(0.0); x.len()];
        let mut new_s = vec![vec![T::from_f64(0.0); x.len()]; states];
        for e in 0..x.len() {
            let old: Vec<f64> = s.iter().map(|v| v[e].to_f64()).collect();
            let (nx, ns) = update(o.rule, r, t, x[e].to_f64(), g[e].to_f64(), &old);
            new_x[e] = T::from_f64(nx);
            for (j, v) in new_s.iter_mut().enumerate() {
                v[e] = T::from_f64(ns[j]);
            }
        }
        if io.has_output(i) {
            io.output::<T>(i)?.copy_from_slice(&new_x);
        }
        for (j, v) in new_s.iter().enumerate() {
            if io.has_output((1 + j) * n + i) {
                io.output::<T>((1 + j) * n + i)?.copy_from_slice(v);
            }
        }
    }
    Ok(())
}

struct OptimizerKernel {
    dtype: DType,
    op: Optimizer,
}

impl CpuKernel for OptimizerKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        floats!(self.dtype, T => optimize::<T>(io, &self.op),
            else Err(unsupported_dtype("optimizer", self.dtype)))
    }
}

struct BinarizerKernel {
    dtype: DType,
    threshold: f64,
}

impl CpuKernel for BinarizerKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        numeric!(self.dtype, T => {
            let x = io.input::<T>(0)?;
            let out = io.output::<T>(0)?;
            out.iter_mut().zip(x).for_each(|(o, v)| {
                *o = T::from_f64(if v.to_f64() > self.threshold { 1.0 } else { 0.0 });
            });
            Ok(())
        }, else Err(unsupported_dtype("Binarizer", self.dtype)))
    }
}

fn extract<T: bytemuck::Pod>(io: &KernelIo) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let features = dims.last().copied().unwrap_or(0);
    let index: Vec<usize> = io
        .ints(1)?
        .into_iter()
        .map(|i| {
            usize::try_from(i).ok().filter(|&i| i < features).ok_or_else(|| {
                EpError::Kernel(format!("feature index {i} is outside {features} features"))
            })
        })
        .collect::<Result<_, _>>()?;
    let x = io.input::<T>(0)?;
    let out = io.output::<T>(0)?;
    if features == 0 || index.is_empty() {
        return Ok(());
    }
    for (row, dst) in x.chunks(features).zip(out.chunks_mut(index.len())) {
        for (d, &i) in dst.iter_mut().zip(&index) {
            *d = row[i];
        }
    }
    Ok(())
}

struct ExtractKernel {
    dtype: DType,
}

impl CpuKernel for ExtractKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        by_width!(self.dtype, T => extract::<T>(io),
            else Err(unsupported_dtype("ArrayFeatureExtractor", self.dtype)))
    }
}

struct TfIdfKernel {
    op: TfIdfVectorizer,
}

impl CpuKernel for TfIdfKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let dims = io.in_view(0)?.shape.clone();
        let items = io.ints(0)?;
        let width = if dims.len() == 2 { dims[1] } else { items.len() };
        let cols = self.op.columns();
        let out = io.output::<f32>(0)?;
        if cols == 0 {
            return Ok(());
        }
        if width == 0 {
            let empty = self.op.row(&[]);
            out.chunks_mut(cols).for_each(|row| row.copy_from_slice(&empty));
            return Ok(());
        }
        for (row, dst) in items.chunks(width).zip(out.chunks_mut(cols)) {
            dst.copy_from_slice(&self.op.row(row));
        }
        Ok(())
    }
}

/// `erf⁻¹(y)`: Giles' single-precision approximation refined by Newton steps on `erf`.
fn erfinv(y: f64) -> f64 {
    if !(-1.0..=1.0).contains(&y) {
        return f64::NAN;
    }
    if y.abs() == 1.0 {
        return y * f64::INFINITY;
    }
    let w = -((1.0 - y) * (1.0 + y)).ln();
    let mut x = if w < 5.0 {
        let w = w - 2.5;
        y * (1.501_409_4 + w * (0.246_640_73 + w * (-0.004_177_681_6 + w * -0.001_253_725)))
    } else {
        let w = w.sqrt() - 3.0;
        y * (2.832_976_8 + w * (1.001_674_1 + w * (0.009_438_870_5 + w * -0.007_622_461_3)))
    };
    for _ in 0..4 {
        let slope = 2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp();
        if slope == 0.0 {
            break;
        }
        x -= (libm::erf(x) - y) / slope;
    }
    x
}

/// TreeEnsemble's `post_transform` over one sample's outputs.
fn post_transform(kind: i64, out: &mut [f64]) {
    match kind {
        1 | 3 => {
            // Softmax; SOFTMAX_ZERO leaves zeros out (and at zero).
            let live = |v: f64| kind == 1 || v != 0.0;
            let peak = out.iter().copied().filter(|&v| live(v)).fold(f64::NEG_INFINITY, f64::max);
            out.iter_mut().for_each(|v| *v = if live(*v) { (*v - peak).exp() } else { 0.0 });
            let sum: f64 = out.iter().sum();
            if sum > 0.0 {
                out.iter_mut().for_each(|v| *v /= sum);
            }
        }
        2 => out.iter_mut().for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
        4 => out.iter_mut().for_each(|v| *v = std::f64::consts::SQRT_2 * erfinv(2.0 * *v - 1.0)),
        _ => {}
    }
}

fn tree_ensemble<T: AsF64 + bytemuck::Pod>(
    io: &KernelIo,
    te: &TreeEnsemble,
    finite_max: f64,
) -> Result<(), EpError> {
    let features = io.in_view(0)?.shape.get(1).copied().unwrap_or(0);
    let x: Vec<f64> = io.input::<T>(0)?.iter().map(|v| v.to_f64()).collect();
    let out = io.output::<T>(0)?;
    if te.targets == 0 {
        return Ok(());
    }
    let rows = x.len().checked_div(features).unwrap_or(0);
    for (r, dst) in out.chunks_mut(te.targets).enumerate().take(rows) {
        let mut y = te
            .aggregate(&x[r * features..][..features], finite_max)
            .map_err(|e| EpError::Kernel(e.to_string()))?;
        post_transform(te.post_transform, &mut y);
        dst.iter_mut().zip(&y).for_each(|(o, &v)| *o = T::from_f64(v));
    }
    Ok(())
}

struct TreeEnsembleKernel {
    dtype: DType,
    op: TreeEnsemble,
}

impl CpuKernel for TreeEnsembleKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        match self.dtype {
            DType::F32 => tree_ensemble::<f32>(io, &self.op, f32::MAX as f64),
            DType::F64 => tree_ensemble::<f64>(io, &self.op, f64::MAX),
            DType::F16 => tree_ensemble::<half::f16>(io, &self.op, half::f16::MAX.to_f64()),
            d => Err(unsupported_dtype("TreeEnsemble", d)),
        }
    }
}

/// Registers the family.
pub(crate) fn register_all(r: &mut KernelRegistry) {
    for name in ["Adagrad", "Adam", "Momentum"] {
        r.register_in(TRAINING_DOMAIN, name, |s| {
            let op = s.op_as::<Optimizer>()?.clone();
            Ok(Box::new(OptimizerKernel { dtype: s.input_dtype(2)?, op }))
        });
    }
    r.register("TfIdfVectorizer", |s| {
        Ok(Box::new(TfIdfKernel { op: s.op_as::<TfIdfVectorizer>()?.clone() }))
    });
    r.register_in(ML_DOMAIN, "TreeEnsemble", |s| {
        Ok(Box::new(TreeEnsembleKernel {
            dtype: s.input_dtype(0)?,
            op: s.op_as::<TreeEnsemble>()?.clone(),
        }))
    });
    r.register_in(ML_DOMAIN, "Binarizer", |s| {
        let threshold = s.op_as::<Binarizer>()?.threshold as f64;
        Ok(Box::new(BinarizerKernel { dtype: s.input_dtype(0)?, threshold }))
    });
    r.register_in(ML_DOMAIN, "ArrayFeatureExtractor", |s| {
        s.op_as::<ArrayFeatureExtractor>()?;
        Ok(Box::new(ExtractKernel { dtype: s.input_dtype(0)? }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erfinv_inverts_erf() {
        for x in [-2.5, -0.7, 0.0, 0.3, 1.9] {
            assert!((erfinv(libm::erf(x)) - x).abs() < 1e-9, "x = {x}");
        }
    }

    #[test]
    fn softmax_zero_keeps_zeros_out() {
        let mut v = [0.0, 1.0, 1.0];
        post_transform(3, &mut v);
        assert_eq!(v, [0.0, 0.5, 0.5]);
    }

    #[test]
    fn momentum_uses_the_full_gradient_on_the_first_step() {
        let rule = Rule::Momentum { alpha: 0.9, beta: 0.1, norm_coefficient: 0.0, nesterov: false };
        let (x, [v, _]) = update(rule, 0.5, 0, 1.0, 2.0, &[0.0]);
        assert_eq!((x, v), (0.0, 2.0));
        let (_, [v, _]) = update(rule, 0.5, 1, 1.0, 2.0, &[1.0]);
        assert!((v - 1.1).abs() < 1e-6, "the coefficients are f32 attributes");
    }
}
