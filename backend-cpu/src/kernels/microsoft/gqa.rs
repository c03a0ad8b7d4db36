//! `com.microsoft` `GroupQueryAttention`: each batch entry `b` has
//! `T_b = seqlens_k[b] + 1` keys, its new tokens at positions `P_b .. T_b`
//! (`P_b = T_b - S`, or 0 for a first prompt); present rows beyond `T_b` stay
//! zero. Queries see keys causally (within the local window when one is
//! set), or all `T_b` of them when `causal` is 0; query head `n` reads
//! key/value head `n / (N / KV)`. Rotary positions are `P_b + i`, or
//! `position_ids` when given (except on a first prompt, as onnxruntime).
//! Scores are scaled, soft-capped, biased by `attention_bias`, then
//! normalized with the head's sink logit (`head_sink`, or 0 under
//! `smooth_softmax`) in the denominator.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::MICROSOFT_DOMAIN;
use onyx_core::ops::microsoft::gqa::{GqaGeometry, GroupQueryAttention};
use rayon::prelude::*;

use crate::par::Loop;

use super::super::attention::{Round, store};
use super::super::dispatch::{AsF64, floats};
use super::super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};
use super::engine::{softmax, softmax_with_sink};
use super::rotary::rotate;
use super::{kernel_err, load_f32, load_opt, product};

/// What one call reads, prepared: rotated queries `[B, N, S, H]` and the
/// present keys and values `[B, KV, present_len, H]`.
struct Prepared {
    g: GqaGeometry,
    /// Each batch entry's first new position `P_b` and total length `T_b`
    /// (below `P_b + S` only for a right-padded first prompt, whose padding
    /// tokens still go to the present but are not attended).
    spans: Vec<(usize, usize)>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// `attention_bias` and its first two dims (batch and heads, each 1 or full).
    bias: Option<(Vec<f32>, usize, usize)>,
    /// The columns of a bias row: total_sequence_length.
    total: usize,
    /// Each head's sink logit.
    sinks: Option<Vec<f32>>,
}

struct GqaKernel {
    op: GroupQueryAttention,
    round: Round,
}

impl GqaKernel {
    fn prepare(&self, io: &KernelIo) -> Result<Prepared, EpError> {
        let shape = |i: usize| io.input_view(i).map(|v| v.shape.clone());
        let total = io.ints(6)?.first().copied().unwrap_or(-1);
        let total = usize::try_from(total)
            .map_err(|_| kernel_err(format!("GroupQueryAttention: total length {total}")))?;
        let (ks, vs) = (shape(1), shape(2));
        let kv = ks.as_deref().zip(vs.as_deref());
        let g = self
            .op
            .geometry(&io.in_view(0)?.shape, kv, shape(3).as_deref(), total)
            .map_err(kernel_err)?;
        let (b, s, n, kvn, h, lp) =
            (g.batch, g.q_len, g.heads, g.kv_heads, g.head_size, g.present_len);
        let seqlens = io.ints(5)?;
        if seqlens.len() != b {
            return Err(kernel_err(format!(
                "GroupQueryAttention: {} seqlens_k for batch {b}",
                seqlens.len()
            )));
        }
        let first_prompt = s > 1 && s == total;
        let positions = match io.input_view(9) {
            Some(view) if !first_prompt => {
                if view.shape != [b, s] {
                    return Err(kernel_err(format!(
                        "GroupQueryAttention: position_ids {:?} for batch {b} and {s} new tokens",
                        view.shape
                    )));
                }
                Some(io.ints(9)?)
            }
            _ => None,
        };
        let cap = g.past_capacity;
        let spans = seqlens
            .iter()
            .map(|&sl| {
                let err =
                    |why: &str| kernel_err(format!("GroupQueryAttention: seqlens_k {sl} {why}"));
                let t = usize::try_from(sl).map_err(|_| err("is negative"))? + 1;
                let p = if first_prompt {
                    0
                } else {
                    t.checked_sub(s).ok_or_else(|| err("is below the new tokens"))?
                };
                if p > cap {
                    return Err(err(&format!("needs {p} past rows of a buffer of {cap}")));
                }
                if p + s > lp {
                    return Err(err(&format!("puts new tokens past {lp} present rows")));
                }
                Ok((p, t))
            })
            .collect::<Result<Vec<(usize, usize)>, EpError>>()?;
        // Rows of the query input and where each part starts in them.
        let x = load_f32(io, 0)?;
        let (stride, k_at, v_at) =
            if g.packed { ((n + 2 * kvn) * h, n * h, (n + kvn) * h) } else { (n * h, 0, 0) };
        let (kin, vin) = if g.packed { (None, None) } else { (load_opt(io, 1)?, load_opt(io, 2)?) };
        let (kin, kstride) =
            (kin.as_deref().unwrap_or(&x), if g.packed { stride } else { kvn * h });
        let vin = vin.as_deref().unwrap_or(&x);
        if self.op.do_rotary && io.in_view(7)?.shape != io.in_view(8)?.shape {
            return Err(kernel_err("GroupQueryAttention: cos and sin caches differ in shape"));
        }
        let rope = if self.op.do_rotary {
            Some((load_f32(io, 7)?, load_f32(io, 8)?, io.in_view(7)?.shape.clone()))
        } else {
            None
        };
        let rot = |v: &mut [f32], pos: usize| -> Result<(), EpError> {
            let Some((cos, sin, cs)) = &rope else { return Ok(()) };
            let half = cs.get(1).copied().unwrap_or(0);
            if cs.len() != 2 || 2 * half > h || pos >= cs[0] {
                return Err(kernel_err(format!(
                    "GroupQueryAttention: caches {cs:?} for heads of {h} at position {pos}"
                )));
            }
            rotate(
                &mut v[..2 * half],
                &cos[pos * half..(pos + 1) * half],
                &sin[pos * half..(pos + 1) * half],
                self.op.rotary_interleaved,
            );
            Ok(())
        };
        let mut q = vec![0f32; b * n * s * h];
        let mut k = vec![0f32; b * kvn * lp * h];
        let mut v = vec![0f32; b * kvn * lp * h];
        let (pk, pv) = (load_past(io, 3, 1)?, load_past(io, 4, 2)?);
        if pk.as_ref().map(Vec::len) != pv.as_ref().map(Vec::len) {
            return Err(kernel_err("GroupQueryAttention: past_key and past_value differ"));
        }
        // The rotary position of new token `si` of batch entry `bi`.
        let position = |bi: usize, si: usize, p: usize| -> Result<usize, EpError> {
            let Some(ids) = &positions else { return Ok(p + si) };
            let id = ids[bi * s + si];
            usize::try_from(id)
                .map_err(|_| kernel_err(format!("GroupQueryAttention: position id {id}")))
        };
        for (bi, &(p, _)) in spans.iter().enumerate() {
            for head in 0..kvn {
                let dst = (bi * kvn + head) * lp * h;
                let src = (bi * kvn + head) * cap * h;
                if let (Some(pk), Some(pv)) = (&pk, &pv) {
                    k[dst..dst + p * h].copy_from_slice(&pk[src..src + p * h]);
                    v[dst..dst + p * h].copy_from_slice(&pv[src..src + p * h]);
                }
            }
            for si in 0..s {
                let row = bi * s + si;
                let pos = position(bi, si, p)?;
                for head in 0..n {
                    let at = row * stride + head * h;
                    let dst = ((bi * n + head) * s + si) * h;
                    q[dst..dst + h].copy_from_slice(&x[at..at + h]);
                    rot(&mut q[dst..dst + h], pos)?;
                }
                for head in 0..kvn {
                    let (ka, va) =
                        (row * kstride + k_at + head * h, row * kstride + v_at + head * h);
                    let dst = ((bi * kvn + head) * lp + p + si) * h;
                    k[dst..dst + h].copy_from_slice(&kin[ka..ka + h]);
                    rot(&mut k[dst..dst + h], pos)?;
                    v[dst..dst + h].copy_from_slice(&vin[va..va + h]);
                }
            }
        }
        self.round.round_all(&mut q);
        self.round.round_all(&mut k);
        let bias = match io.input_view(10) {
            None => None,
            Some(view) => match view.shape[..] {
                [bb, nb, bs, bt]
                    if (bb == 1 || bb == b) && (nb == 1 || nb == n) && bs == s && bt == total =>
                {
                    if let Some(&(_, t)) = spans.iter().find(|&&(_, t)| t > total) {
                        return Err(kernel_err(format!(
                            "GroupQueryAttention: {t} keys, beyond the bias's {total} columns"
                        )));
                    }
                    Some((load_f32(io, 10)?, bb, nb))
                }
                _ => {
                    return Err(kernel_err(format!(
                        "GroupQueryAttention: attention_bias {:?} for [{b}, {n}, {s}, {total}]",
                        view.shape
                    )));
                }
            },
        };
        let sinks = match load_opt(io, 11)? {
            Some(sinks) if sinks.len() != n => {
                return Err(kernel_err(format!(
                    "GroupQueryAttention: {} head_sink values for {n} heads",
                    sinks.len()
                )));
            }
            Some(sinks) => Some(sinks),
            None if self.op.smooth_softmax => Some(vec![0.0; n]),
            None => None,
        };
        Ok(Prepared { g, spans, q, k, v, bias, total, sinks })
    }

    /// The output rows `[S, H]` of query head `bn = b · N + n`: both products
    /// through `gemm` over the keys any of its queries may see.
    fn head(&self, pr: &Prepared, bn: usize) -> Result<Vec<f32>, EpError> {
        let g = &pr.g;
        let (s, h, lp) = (g.q_len, g.head_size, g.present_len);
        let (bi, head) = (bn / g.heads, bn % g.heads);
        let kvh = bi * g.kv_heads + head / (g.heads / g.kv_heads);
        let (p0, t) = pr.spans[bi];
        // Keys 0..seen: the last query's position bounds them (when causal),
        // and so does T_b.
        let seen = if self.op.causal { (p0 + s).min(t) } else { t };
        let keys = &pr.k[kvh * lp * h..(kvh * lp + seen) * h];
        let vals = &pr.v[kvh * lp * h..(kvh * lp + seen) * h];
        let scale = self.op.scale.unwrap_or_else(|| (1.0 / (h as f64).sqrt()) as f32);
        let mut scores = vec![0f32; s * seen];
        product(&mut scores, &pr.q[bn * s * h..(bn + 1) * s * h], keys, (s, seen, h), true, scale)?;
        let (cap, w) = (self.op.softcap, self.op.local_window_size);
        for (i, row) in scores.chunks_mut(seen.max(1)).enumerate().take(s) {
            let pos = p0 + i;
            // The window holds `w` keys, the query's own included.
            let lo = if w > 0 { (pos + 1).saturating_sub(w as usize) } else { 0 };
            let hi = if self.op.causal { (pos + 1).min(seen).max(lo) } else { seen };
            let (before, rest) = row.split_at_mut(lo.min(row.len()));
            let (visible, after) = rest.split_at_mut(hi - lo);
            if cap > 0.0 {
                visible.iter_mut().for_each(|x| *x = cap * (*x / cap).tanh());
            }
            if let Some((bias, bb, nb)) = &pr.bias {
                // Bias columns are absolute key positions.
                let at = (((bi % bb) * nb + head % nb) * s + i) * pr.total + lo;
                visible.iter_mut().zip(&bias[at..at + (hi - lo)]).for_each(|(x, b)| *x += b);
            }
            match &pr.sinks {
                Some(sinks) => softmax_with_sink(visible, sinks[head]),
                None => softmax(visible),
            }
            before.fill(0.0);
            after.fill(0.0);
        }
        let mut out = vec![0f32; s * h];
        product(&mut out, &scores, vals, (s, h, seen), false, 1.0)?;
        Ok(out)
    }
}

/// Past input `i` widened to f32 when present; read through present output
/// `o` where the caller binds the two to one buffer (the present is written
/// only after every read).
fn load_past(io: &KernelIo, i: usize, o: usize) -> Result<Option<Vec<f32>>, EpError> {
    if !io.aliased(i, o) {
        return load_opt(io, i);
    }
    let dtype = io.out_view(o)?.dtype;
    floats!(dtype, T => Ok(Some(io.output::<T>(o)?.iter().map(|v| v.to_f64() as f32).collect())),
        else Err(kernel_err(format!("GroupQueryAttention: a past cache of {dtype}"))))
}

impl CpuKernel for GqaKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let pr = self.prepare(io)?;
        let g = &pr.g;
        let heads: Vec<Vec<f32>> = (0..g.batch * g.heads)
            .into_par_iter()
            .map_collect::<_, Result<_, _>, _>(|bn| self.head(&pr, bn))?;
        let (s, n, h) = (g.q_len, g.heads, g.head_size);
        let mut y = vec![0f32; g.batch * s * n * h];
        for (bn, out) in heads.iter().enumerate() {
            let (bi, head) = (bn / n, bn % n);
            for (i, row) in out.chunks(h.max(1)).enumerate().take(s) {
                let at = ((bi * s + i) * n + head) * h;
                y[at..at + h].copy_from_slice(row);
            }
        }
        store(io, 0, &y, "GroupQueryAttention")?;
        for (o, values) in [(1, &pr.k), (2, &pr.v)] {
            if io.has_output(o) {
                store(io, o, values, "GroupQueryAttention")?;
            }
        }
        Ok(())
    }
}

/// Registers `GroupQueryAttention` in `com.microsoft`.
pub(super) fn register_all(r: &mut KernelRegistry) {
    r.register_in(MICROSOFT_DOMAIN, "GroupQueryAttention", |s: &KernelSpec<'_>| {
        let dtype = s.input_dtype(0)?;
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(unsupported_dtype("GroupQueryAttention", dtype));
        }
        Ok(Box::new(GqaKernel {
            op: s.op_as::<GroupQueryAttention>()?.clone(),
            round: Round::of(dtype),
        }))
    });
}
