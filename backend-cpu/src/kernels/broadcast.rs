//! Multidirectional broadcasting as rows: dims are collapsed where every input
//! either follows the output or is broadcast, so most cases become a few long
//! rows in which each input is either contiguous or a single repeated value.

use std::ops::Range;

use rayon::prelude::*;

use crate::par::Loop;

/// Elements processed per segment: small enough that an in-place operand's
/// segment can be copied to the stack, large enough to vectorize well.
pub const SEGMENT: usize = 2048;

/// Output elements per parallel task (a multiple of [`SEGMENT`]).
const TASK: usize = 8 * SEGMENT;

/// Below this many output elements, everything runs on the calling thread.
const PARALLEL_MIN: usize = 32 * 1024;

/// How each input maps onto rows of the output.
#[derive(Clone, Debug)]
pub struct Broadcast {
    /// Collapsed output dims (the last is the row).
    dims: Vec<usize>,
    /// Per input, the stride of each collapsed dim (0 where broadcast).
    strides: Vec<Vec<usize>>,
    numel: usize,
}

/// Where one input's elements for a segment live.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Run {
    /// Contiguous, starting at this offset.
    Slice(usize),
    /// One element, repeated.
    Scalar(usize),
}

impl Broadcast {
    /// Plans broadcasting of `inputs` to `out` (shapes already validated by inference).
    pub fn new(out: &[usize], inputs: &[&[usize]]) -> Self {
        let rank = out.len();
        let aligned: Vec<Vec<usize>> = inputs
            .iter()
            .map(|s| {
                let mut d = vec![1; rank.saturating_sub(s.len())];
                d.extend_from_slice(s);
                d
            })
            .collect();
        // Keep dims of size > 1; group neighbours with the same broadcast pattern.
        let mut dims: Vec<usize> = Vec::new();
        let mut patterns: Vec<Vec<bool>> = Vec::new();
        for d in 0..rank {
            if out[d] == 1 {
                continue;
            }
            let pattern: Vec<bool> = aligned.iter().map(|a| a[d] == 1).collect();
            if patterns.last() == Some(&pattern) {
                *dims.last_mut().expect("a pattern implies a dim") *= out[d];
            } else {
                dims.push(out[d]);
                patterns.push(pattern);
            }
        }
        if dims.is_empty() {
            dims.push(1);
            patterns.push(vec![false; inputs.len()]);
        }
        let strides = (0..inputs.len())
            .map(|i| {
                let mut acc = 1;
                let mut s = vec![0; dims.len()];
                for d in (0..dims.len()).rev() {
                    if !patterns[d][i] {
                        s[d] = acc;
                        acc *= dims[d];
                    }
                }
                s
            })
            .collect();
        Broadcast { numel: out.iter().product(), dims, strides }
    }

    /// Output elements.
    #[cfg(test)]
    pub fn numel(&self) -> usize {
        self.numel
    }

    fn row_len(&self) -> usize {
        *self.dims.last().expect("at least one dim")
    }

    /// Where input `i`'s elements for output range `r` (within one row) live.
    fn run(&self, i: usize, row: usize, within: usize) -> Run {
        let s = &self.strides[i];
        let last = self.dims.len() - 1;
        let mut rem = row;
        let mut base = 0;
        for d in (0..last).rev() {
            base += (rem % self.dims[d]) * s[d];
            rem /= self.dims[d];
        }
        if s[last] == 0 { Run::Scalar(base) } else { Run::Slice(base + within) }
    }

    /// Calls `f(output_range, runs)` for every segment, in parallel, with one
    /// [`Run`] per input. `out` is split so each call gets its own output slice.
    ///
    /// A task covers whole rows, about `TASK` elements (one row, split into
    /// segments across tasks, when rows are longer), so short rows do not cost
    /// a task each; the runs buffer is allocated once per task.
    pub fn for_each<T: Send, F>(&self, out: &mut [T], f: F)
    where
        F: Fn(&mut [T], Range<usize>, &[Run]) + Sync + Send,
    {
        if self.numel == 0 {
            return;
        }
        let row_len = self.row_len();
        let n_inputs = self.strides.len();
        let segment = |runs: &mut Vec<Run>, row: usize, within: usize, seg: &mut [T]| {
            runs.clear();
            runs.extend((0..n_inputs).map(|i| self.run(i, row, within)));
            let start = row * row_len + within;
            f(seg, start..start + seg.len(), runs);
        };
        let rows_per_task = (TASK / row_len).max(1);
        let task = |(t, chunk): (usize, &mut [T])| {
            let mut runs = Vec::with_capacity(n_inputs);
            for (r, row) in chunk.chunks_mut(row_len).enumerate() {
                for (s, seg) in row.chunks_mut(SEGMENT).enumerate() {
                    segment(&mut runs, t * rows_per_task + r, s * SEGMENT, seg);
                }
            }
        };
        if self.numel < PARALLEL_MIN {
            task((0, out));
        } else if row_len <= TASK {
            out.par_chunks_mut(row_len * rows_per_task).enumerate().each(task);
        } else {
            out.par_chunks_mut(row_len).enumerate().each(|(row, r)| {
                r.par_chunks_mut(TASK).enumerate().each_init(
                    || Vec::with_capacity(n_inputs),
                    |runs, (t, part)| {
                        for (s, seg) in part.chunks_mut(SEGMENT).enumerate() {
                            segment(runs, row, t * TASK + s * SEGMENT, seg);
                        }
                    },
                );
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gather(b: &Broadcast, input: usize) -> Vec<usize> {
        let mut out = vec![0usize; b.numel()];
        b.for_each(&mut out, |o, _, runs| {
            for (k, x) in o.iter_mut().enumerate() {
                *x = match runs[input] {
                    Run::Slice(s) => s + k,
                    Run::Scalar(s) => s,
                };
            }
        });
        out
    }

    #[test]
    fn bias_over_channels_becomes_scalar_runs() {
        let b = Broadcast::new(&[2, 3, 4], &[&[2, 3, 4], &[3, 1]]);
        assert_eq!(gather(&b, 0), (0..24).collect::<Vec<_>>());
        let expect: Vec<usize> = (0..24).map(|i| (i / 4) % 3).collect();
        assert_eq!(gather(&b, 1), expect);
    }

    #[test]
    fn outer_product_broadcasts_both_ways() {
        let b = Broadcast::new(&[3, 2], &[&[3, 1], &[2]]);
        assert_eq!(gather(&b, 0), vec![0, 0, 1, 1, 2, 2]);
        assert_eq!(gather(&b, 1), vec![0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn scalars_and_empty_tensors_work() {
        let b = Broadcast::new(&[], &[&[], &[]]);
        assert_eq!(gather(&b, 1), vec![0]);
        let b = Broadcast::new(&[0, 3], &[&[0, 3], &[3]]);
        assert_eq!(gather(&b, 1), Vec::<usize>::new());
    }

    #[test]
    fn long_rows_are_split_into_segments() {
        let n = SEGMENT * 2 + 5;
        let b = Broadcast::new(&[2, n], &[&[2, n], &[2, 1]]);
        let g0 = gather(&b, 0);
        assert_eq!(g0, (0..2 * n).collect::<Vec<_>>());
        assert_eq!(gather(&b, 1)[n + 3], 1);
    }

    #[test]
    fn parallel_tasks_cover_short_and_long_rows() {
        let b = Broadcast::new(&[300, 384], &[&[300, 384], &[384]]);
        assert_eq!(gather(&b, 0), (0..300 * 384).collect::<Vec<_>>());
        assert_eq!(gather(&b, 1), (0..300 * 384).map(|i| i % 384).collect::<Vec<_>>());
        let n = TASK * 2 + 7;
        let b = Broadcast::new(&[2, n], &[&[2, n], &[2, 1]]);
        assert_eq!(gather(&b, 0), (0..2 * n).collect::<Vec<_>>());
        assert_eq!(gather(&b, 1), (0..2 * n).map(|i| i / n).collect::<Vec<_>>());
    }
}
