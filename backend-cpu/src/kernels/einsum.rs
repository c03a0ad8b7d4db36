//! Det (LU with partial pivoting, in f64) and Einsum: diagonals and lone
//! labels are reduced per operand, then operands
//! are contracted left to right as batched matrix products (through `gemm`
//! for floats). Halves compute in f32, f32 and f64 natively, integers in
//! wrapping i64 (truncated back, which matches wrapping in the narrow type).

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::einsum::{Det, Einsum, EinsumPlan};
use onyx_core::shape::strides;
use rayon::prelude::*;

use crate::par::Loop;

use super::arrange::permute;
use super::conv::unravel;
use super::dispatch::{AsF64, floats, ints};
use super::matmul::{Mat, gemm_into};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// The arithmetic the contraction needs.
trait Num: Copy + Send + Sync + 'static {
    const ZERO: Self;
    fn add(self, b: Self) -> Self;
    /// `out[b] = a[b] @ b[b]` for `batch` row-major `m × k` and `k × n` matrices.
    fn batched_matmul(
        batch: usize,
        dims: (usize, usize, usize),
        a: &[Self],
        b: &[Self],
        out: &mut [Self],
    );
}

macro_rules! float_num {
    ($($t:ty),*) => { $(impl Num for $t {
        const ZERO: Self = 0.0;
        fn add(self, b: Self) -> Self { self + b }
        fn batched_matmul(
            batch: usize,
            (m, k, n): (usize, usize, usize),
            a: &[Self],
            b: &[Self],
            out: &mut [Self],
        ) {
            for i in 0..batch {
                // SAFETY: `a`, `b` and `out` hold `batch` matrices of m×k, k×n and m×n
                // elements; the offsets address matrix `i` of each, and `out` is distinct.
                unsafe {
                    gemm_into(
                        (m, n, k),
                        out,
                        i * m * n,
                        a,
                        Mat::row_major(i * m * k, k, false),
                        b,
                        Mat::row_major(i * k * n, n, false),
                        false,
                        1.0,
                    )
                };
            }
        }
    })* };
}
float_num!(f32, f64);

impl Num for i64 {
    const ZERO: Self = 0;
    fn add(self, b: Self) -> Self {
        self.wrapping_add(b)
    }
    fn batched_matmul(
        _batch: usize,
        (m, k, n): (usize, usize, usize),
        a: &[Self],
        b: &[Self],
        out: &mut [Self],
    ) {
        out.par_chunks_mut(n).enumerate().each(|(row, dst)| {
            let (bi, i) = (row / m, row % m);
            let a_row = &a[(bi * m + i) * k..][..k];
            let b_mat = &b[bi * k * n..][..k * n];
            for (p, &av) in a_row.iter().enumerate() {
                for (d, &bv) in dst.iter_mut().zip(&b_mat[p * n..][..n]) {
                    *d = d.wrapping_add(av.wrapping_mul(bv));
                }
            }
        });
    }
}

/// One operand: row-major data whose axes carry labels.
struct Operand<W> {
    data: Vec<W>,
    labels: Vec<usize>,
    dims: Vec<usize>,
}

impl<W: Num> Operand<W> {
    /// Drops size-1 axes whose label is larger elsewhere (broadcasting).
    fn squeeze_broadcast(mut self, sizes: &[usize]) -> Self {
        let keep: Vec<bool> =
            self.labels.iter().zip(&self.dims).map(|(&l, &n)| n == sizes[l]).collect();
        self.labels = self.labels.iter().zip(&keep).filter(|p| *p.1).map(|p| *p.0).collect();
        self.dims = self.dims.iter().zip(&keep).filter(|p| *p.1).map(|p| *p.0).collect();
        self
    }

    /// Takes the diagonal over repeated labels, so each label appears once.
    fn diagonal(self) -> Self {
        let mut labels: Vec<usize> = Vec::new();
        for &l in &self.labels {
            if !labels.contains(&l) {
                labels.push(l);
            }
        }
        if labels.len() == self.labels.len() {
            return self;
        }
        let dims: Vec<usize> = labels
            .iter()
            .map(|l| self.dims[self.labels.iter().position(|x| x == l).unwrap_or(0)])
            .collect();
        let st = strides(&self.dims);
        // The input stride of each output axis: the sum over the axes it merges.
        let step: Vec<usize> = labels
            .iter()
            .map(|l| self.labels.iter().zip(&st).filter(|p| p.0 == l).map(|p| *p.1).sum())
            .collect();
        let n: usize = dims.iter().product();
        let data = (0..n).into_par_iter().map_collect(|i| {
            let at: usize = unravel(i, &dims).iter().zip(&step).map(|(c, s)| c * s).sum();
            self.data[at]
        });
        Operand { data, labels, dims }
    }

    /// Permutes the axes into the order of `labels` (a permutation of the own labels).
    fn arrange(self, labels: &[usize]) -> Self {
        let perm: Vec<usize> =
            labels.iter().map(|l| self.labels.iter().position(|x| x == l).unwrap_or(0)).collect();
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Operand { labels: labels.to_vec(), ..self };
        }
        let mut data = vec![W::ZERO; self.data.len()];
        permute(&self.data, &self.dims, &perm, &mut data);
        let dims = perm.iter().map(|&p| self.dims[p]).collect();
        Operand { data, labels: labels.to_vec(), dims }
    }

    /// Sums out every label not in `keep`.
    fn sum_except(self, keep: impl Fn(usize) -> bool) -> Self {
        let (kept, gone): (Vec<usize>, Vec<usize>) = self.labels.iter().partition(|&&l| keep(l));
        if gone.is_empty() {
            return self;
        }
        let order: Vec<usize> = kept.iter().chain(&gone).copied().collect();
        let x = self.arrange(&order);
        let span: usize = x.dims[kept.len()..].iter().product();
        let dims: Vec<usize> = x.dims[..kept.len()].to_vec();
        let n: usize = dims.iter().product();
        let data = if span == 0 {
            vec![W::ZERO; n]
        } else {
            x.data.par_chunks(span).map_collect(|c| c.iter().fold(W::ZERO, |a, &v| a.add(v)))
        };
        Operand { data, labels: kept, dims }
    }
}

fn size_of(plan: &EinsumPlan, labels: &[usize]) -> usize {
    labels.iter().map(|&l| plan.sizes[l]).product()
}

/// Contracts `a` and `b`, keeping the labels for which `kept` holds.
fn contract<W: Num>(
    plan: &EinsumPlan,
    a: Operand<W>,
    b: Operand<W>,
    kept: impl Fn(usize) -> bool,
) -> Operand<W> {
    let a = a.sum_except(|l| kept(l) || b.labels.contains(&l));
    let b = b.sum_except(|l| kept(l) || a.labels.contains(&l));
    let in_b = |l: &usize| b.labels.contains(l);
    let batch: Vec<usize> = a.labels.iter().filter(|&l| in_b(l) && kept(*l)).copied().collect();
    let inner: Vec<usize> = a.labels.iter().filter(|&l| in_b(l) && !kept(*l)).copied().collect();
    let a_only: Vec<usize> = a.labels.iter().filter(|l| !in_b(l)).copied().collect();
    let b_only: Vec<usize> = b.labels.iter().filter(|l| !a.labels.contains(l)).copied().collect();
    let cat = |parts: &[&[usize]]| parts.concat();
    let a = a.arrange(&cat(&[&batch, &a_only, &inner]));
    let b = b.arrange(&cat(&[&batch, &inner, &b_only]));
    let (nb, m, k, n) = (
        size_of(plan, &batch),
        size_of(plan, &a_only),
        size_of(plan, &inner),
        size_of(plan, &b_only),
    );
    let mut data = vec![W::ZERO; nb * m * n];
    if k > 0 && !data.is_empty() {
        W::batched_matmul(nb, (m, k, n), &a.data, &b.data, &mut data);
    }
    let labels = cat(&[&batch, &a_only, &b_only]);
    let dims = labels.iter().map(|&l| plan.sizes[l]).collect();
    Operand { data, labels, dims }
}

/// Evaluates the plan over operands already converted to the working type.
fn evaluate<W: Num>(plan: &EinsumPlan, inputs: Operands<W>) -> Vec<W> {
    let mut ops: Vec<Operand<W>> = inputs
        .into_iter()
        .zip(&plan.inputs)
        .map(|((data, dims), labels)| {
            Operand { data, labels: labels.clone(), dims }.squeeze_broadcast(&plan.sizes).diagonal()
        })
        .collect();
    let in_output = |l: usize| plan.output.contains(&l);
    // Labels no other operand and not the output has are summed right away.
    for i in 0..ops.len() {
        let others: Vec<usize> = ops
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .flat_map(|(_, o)| o.labels.clone())
            .collect();
        let op =
            std::mem::replace(&mut ops[i], Operand { data: vec![], labels: vec![], dims: vec![] });
        ops[i] = op.sum_except(|l| in_output(l) || others.contains(&l));
    }
    let mut rest = ops.into_iter();
    let Some(mut acc) = rest.next() else { return vec![] };
    let mut rest: Vec<Operand<W>> = rest.collect();
    rest.reverse();
    while let Some(b) = rest.pop() {
        let later: Vec<usize> = rest.iter().flat_map(|o| o.labels.clone()).collect();
        acc = contract(plan, acc, b, |l| in_output(l) || later.contains(&l));
    }
    acc.sum_except(in_output).arrange(&plan.output).data
}

/// Operands as `(elements, dims)`.
type Operands<W> = Vec<(Vec<W>, Vec<usize>)>;

/// Each input's elements and dims.
fn operands<T: bytemuck::Pod, W>(
    io: &KernelIo,
    n: usize,
    f: impl Fn(T) -> W,
) -> Result<Operands<W>, EpError> {
    (0..n)
        .map(|i| {
            let dims = io.in_view(i)?.shape.clone();
            Ok((io.input::<T>(i)?.iter().map(|&v| f(v)).collect(), dims))
        })
        .collect()
}

struct EinsumKernel {
    dtype: DType,
    op: Einsum,
}

impl EinsumKernel {
    fn plan(&self, io: &KernelIo, n: usize) -> Result<EinsumPlan, EpError> {
        let dims = (0..n)
            .map(|i| Ok(io.in_view(i)?.shape.clone()))
            .collect::<Result<Vec<_>, EpError>>()?;
        self.op.plan(&dims).map_err(|e| EpError::Kernel(e.to_string()))
    }
}

impl CpuKernel for EinsumKernel {
    #[allow(clippy::unnecessary_cast)] // `as i64` is a no-op only for the i64 instance.
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let n = io.inputs.len();
        let plan = self.plan(io, n)?;
        match self.dtype {
            DType::F64 => {
                let out = evaluate(&plan, operands::<f64, f64>(io, n, |v| v)?);
                io.output::<f64>(0)?.copy_from_slice(&out);
                Ok(())
            }
            d => floats!(d, T => {
                let out = evaluate(&plan, operands::<T, f32>(io, n, |v| v.to_f64() as f32)?);
                let dst = io.output::<T>(0)?;
                dst.iter_mut().zip(out).for_each(|(o, v)| *o = T::from_f64(v as f64));
                Ok(())
            }, else ints!(d, T => {
                let out = evaluate(&plan, operands::<T, i64>(io, n, |v| v as i64)?);
                let dst = io.output::<T>(0)?;
                dst.iter_mut().zip(out).for_each(|(o, v)| *o = v as T);
                Ok(())
            }, else Err(unsupported_dtype("Einsum", d)))),
        }
    }
}

/// The determinant of a row-major `n × n` matrix, by LU with partial pivoting.
fn determinant(mut a: Vec<f64>, n: usize) -> f64 {
    let mut det = 1.0;
    for col in 0..n {
        let pivot = (col..n)
            .max_by(|&i, &j| a[i * n + col].abs().total_cmp(&a[j * n + col].abs()))
            .unwrap_or(col);
        if a[pivot * n + col] == 0.0 {
            return 0.0;
        }
        if pivot != col {
            for j in 0..n {
                a.swap(col * n + j, pivot * n + j);
            }
            det = -det;
        }
        let p = a[col * n + col];
        det *= p;
        for i in col + 1..n {
            let f = a[i * n + col] / p;
            for j in col..n {
                a[i * n + j] -= f * a[col * n + j];
            }
        }
    }
    det
}

fn det<T: AsF64 + bytemuck::Pod + Send + Sync>(io: &KernelIo) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let [.., m, n] = dims[..] else {
        return Err(EpError::Kernel(format!("Det needs [*, M, M], got {dims:?}")));
    };
    if m != n {
        return Err(EpError::Kernel(format!("Det of a non-square {m}×{n} matrix")));
    }
    let x = io.input::<T>(0)?;
    let out = io.output::<T>(0)?;
    if n == 0 {
        out.fill(T::from_f64(1.0));
        return Ok(());
    }
    out.par_iter_mut().zip(x.par_chunks(n * n)).each(|(o, mat)| {
        *o = T::from_f64(determinant(mat.iter().map(|v| v.to_f64()).collect(), n));
    });
    Ok(())
}

struct DetKernel {
    dtype: DType,
}

impl CpuKernel for DetKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        floats!(self.dtype, T => det::<T>(io), else Err(unsupported_dtype("Det", self.dtype)))
    }
}

/// Registers Einsum and Det.
pub(crate) fn register_all(r: &mut KernelRegistry) {
    r.register("Det", |s| {
        s.op_as::<Det>()?;
        Ok(Box::new(DetKernel { dtype: s.input_dtype(0)? }))
    });
    r.register("Einsum", |s: &KernelSpec<'_>| {
        let dtype = s.input_dtype(0)?;
        Ok(Box::new(EinsumKernel { dtype, op: s.op_as::<Einsum>()?.clone() }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<W: Num>(eq: &str, inputs: Operands<W>) -> Vec<W> {
        let dims: Vec<Vec<usize>> = inputs.iter().map(|i| i.1.clone()).collect();
        let plan = Einsum { equation: eq.into() }.plan(&dims).unwrap();
        evaluate(&plan, inputs)
    }

    #[test]
    fn matrix_products_traces_and_transposes_match_their_definitions() {
        let a = (vec![1.0, 2., 3., 4., 5., 6.], vec![2, 3]);
        let b = (vec![1.0, 0., 0., 1., 1., 1.], vec![3, 2]);
        assert_eq!(run::<f64>("ij,jk->ik", vec![a.clone(), b]), vec![4.0, 5., 10., 11.]);
        assert_eq!(run::<f64>("ij->ji", vec![a.clone()]), vec![1.0, 4., 2., 5., 3., 6.]);
        assert_eq!(run::<f64>("ij->", vec![a]), vec![21.0]);
        assert_eq!(run::<f64>("ii", vec![(vec![1.0, 2., 3., 4.], vec![2, 2])]), vec![5.0]);
    }

    #[test]
    fn integer_contractions_wrap_and_size_one_axes_broadcast() {
        let a = (vec![i64::MAX, 1], vec![2]);
        let b = (vec![2, 3], vec![2]);
        assert_eq!(run::<i64>("i,i", vec![a, b]), vec![i64::MAX.wrapping_mul(2).wrapping_add(3)]);
        let ones = (vec![1i64, 1], vec![2, 1]);
        let c = (vec![1i64, 2, 3], vec![3, 1]);
        assert_eq!(run::<i64>("ij,jk->ik", vec![ones, c]), vec![6, 6]);
    }

    #[test]
    fn determinants_follow_row_swaps_and_vanish_for_singular_matrices() {
        assert_eq!(determinant(vec![1.0, 2.0, 3.0, 4.0], 2), -2.0);
        assert_eq!(determinant(vec![0.0, 1.0, 1.0, 0.0], 2), -1.0);
        assert_eq!(determinant(vec![1.0, 2.0, 2.0, 4.0], 2), 0.0);
    }

    #[test]
    fn three_operands_contract_left_to_right() {
        let a = (vec![1.0f32, 2.], vec![2]);
        let b = (vec![1.0f32, 2., 3., 4.], vec![2, 2]);
        let c = (vec![1.0f32, 1.], vec![2]);
        // a @ b = [7, 10], dotted with c: 17.
        assert_eq!(run::<f32>("i,ij,j->", vec![a, b, c]), vec![17.0]);
    }
}
