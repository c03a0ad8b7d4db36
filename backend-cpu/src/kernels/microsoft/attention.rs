//! `com.microsoft` `Attention` and `MultiHeadAttention`: each lays out its
//! queries, keys and values as `[B, N, rows, H]` (projecting, adding biases,
//! unpacking, prepending the cache) and hands them to [`engine::attend`].
//! Half-precision Q, K and V are rounded to their dtype before use, as
//! onnxruntime's buffers of that dtype hold them.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::MICROSOFT_DOMAIN;
use onyx_core::ops::microsoft::attention::{ContribAttention, KvLayout, MultiHeadAttention};

use super::super::attention::{Round, store};
use super::super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};
use super::engine::{AttnBias, Heads, attend, mask_table, scale_of, split_heads, with_past};
use super::{kernel_err, load_f32, load_opt, product};

fn shape(io: &KernelIo, i: usize) -> Option<Vec<usize>> {
    io.input_view(i).map(|v| v.shape.clone())
}

/// Writes `[2, B, N, T, H]` (keys, then values) or the two halves to their outputs.
fn write_present(
    io: &KernelIo,
    slots: &[usize],
    k: &[f32],
    v: &[f32],
    what: &str,
) -> Result<(), EpError> {
    match *slots {
        [both] if io.has_output(both) => {
            let all: Vec<f32> = k.iter().chain(v).copied().collect();
            store(io, both, &all, what)
        }
        [pk, pv] => {
            if io.has_output(pk) {
                store(io, pk, k, what)?;
            }
            if io.has_output(pv) {
                store(io, pv, v, what)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

struct AttentionKernel {
    op: ContribAttention,
    round: Round,
}

impl CpuKernel for AttentionKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let (xs, ws) = (io.in_view(0)?.shape.clone(), io.in_view(1)?.shape.clone());
        let g = self.op.geometry(&xs, &ws, shape(io, 4).as_deref()).map_err(kernel_err)?;
        let (b, s, n, h, hv) = (g.batch, g.q_len, g.heads, g.head_size, g.v_head_size);
        let width = ws[1];
        let [hq, hk, _] = self.op.widths(width).map_err(kernel_err)?;
        let mut qkv = vec![0f32; b * s * width];
        product(&mut qkv, &load_f32(io, 0)?, &load_f32(io, 1)?, (b * s, width, xs[2]), false, 1.0)?;
        if let Some(bias) = load_opt(io, 2)? {
            if bias.len() != width {
                return Err(kernel_err(format!(
                    "Attention: bias of {} for width {width}",
                    bias.len()
                )));
            }
            qkv.chunks_mut(width)
                .for_each(|row| row.iter_mut().zip(&bias).for_each(|(x, b)| *x += b));
        }
        self.round.round_all(&mut qkv);
        let q = split_heads(&qkv, (b, s, n, h), width, 0);
        let k = split_heads(&qkv, (b, s, n, h), width, hq);
        let v = split_heads(&qkv, (b, s, n, hv), width, hq + hk);
        let past = load_opt(io, 4)?;
        let (pk, pv) = match &past {
            Some(p) => {
                let (a, z) = p.split_at(p.len() / 2);
                (Some(a), Some(z))
            }
            None => (None, None),
        };
        let k = with_past(pk, k, b * n, (g.past_len, s), h);
        let v = with_past(pv, v, b * n, (g.past_len, s), hv);
        write_present(io, &[1], &k, &v, "Attention")?;
        let mask = mask_table(io, 3, &g, &self.op.params)?;
        let bias = AttnBias::load(io, 5, &g)?;
        let heads = Heads { q, k, v };
        let y = attend(&g, &heads, mask.as_deref(), bias.as_ref(), scale_of(&self.op.params, h))?;
        store(io, 0, &y, "Attention")
    }
}

/// Part `part` of `[B, L, N, parts, H]` packed rows, as `[B, N, L, H]`.
fn split_packed(
    x: &[f32],
    (b, l, n, h): (usize, usize, usize, usize),
    parts: usize,
    part: usize,
) -> Vec<f32> {
    let mut out = Vec::with_capacity(b * n * l * h);
    for bi in 0..b {
        for head in 0..n {
            for li in 0..l {
                let at = (((bi * l + li) * n + head) * parts + part) * h;
                out.extend_from_slice(&x[at..at + h]);
            }
        }
    }
    out
}

/// Adds `bias[head · h + j]` to every row of each head of `[B, N, L, H]`.
fn add_head_bias(x: &mut [f32], n: usize, l: usize, h: usize, bias: &[f32]) {
    for (r, row) in x.chunks_mut(h.max(1)).enumerate() {
        let head = (r / l.max(1)) % n;
        row.iter_mut().zip(&bias[head * h..(head + 1) * h]).for_each(|(x, b)| *x += b);
    }
}

struct MhaKernel {
    op: MultiHeadAttention,
    round: Round,
}

impl MhaKernel {
    fn heads(
        &self,
        io: &KernelIo,
    ) -> Result<(onyx_core::ops::microsoft::attention::MhaGeometry, Heads), EpError> {
        let qs = io.in_view(0)?.shape.clone();
        let (layout, g) = self
            .op
            .geometry(
                &qs,
                shape(io, 1).as_deref(),
                shape(io, 2).as_deref(),
                shape(io, 6).as_deref(),
            )
            .map_err(kernel_err)?;
        let (b, s, l, n, h, hv) = (g.batch, g.q_len, g.kv_len, g.heads, g.head_size, g.v_head_size);
        let (mut q, mut k, mut v) = match layout {
            KvLayout::Separate => (
                split_heads(&load_f32(io, 0)?, (b, s, n, h), n * h, 0),
                split_heads(&load_f32(io, 1)?, (b, l, n, h), n * h, 0),
                split_heads(&load_f32(io, 2)?, (b, l, n, hv), n * hv, 0),
            ),
            KvLayout::PackedKv => {
                let kv = load_f32(io, 1)?;
                (
                    split_heads(&load_f32(io, 0)?, (b, s, n, h), n * h, 0),
                    split_packed(&kv, (b, l, n, h), 2, 0),
                    split_packed(&kv, (b, l, n, h), 2, 1),
                )
            }
            KvLayout::PackedQkv => {
                let x = load_f32(io, 0)?;
                let part = |p| split_packed(&x, (b, s, n, h), 3, p);
                (part(0), part(1), part(2))
            }
            KvLayout::Bnsh => (
                split_heads(&load_f32(io, 0)?, (b, s, n, h), n * h, 0),
                load_f32(io, 1)?,
                load_f32(io, 2)?,
            ),
        };
        if let Some(bias) = load_opt(io, 3)? {
            if bias.len() != 2 * n * h + n * hv {
                return Err(kernel_err(format!("MultiHeadAttention: bias of {}", bias.len())));
            }
            add_head_bias(&mut q, n, s, h, &bias);
            if layout != KvLayout::Bnsh {
                add_head_bias(&mut k, n, l, h, &bias[n * h..]);
                add_head_bias(&mut v, n, l, hv, &bias[2 * n * h..]);
            }
        }
        for x in [&mut q, &mut k, &mut v] {
            self.round.round_all(x);
        }
        let (pk, pv) = (load_opt(io, 6)?, load_opt(io, 7)?);
        if pk.is_some() != pv.is_some() {
            return Err(kernel_err("MultiHeadAttention: past_key and past_value go together"));
        }
        if pv.as_ref().is_some_and(|p| p.len() != b * n * g.past_len * hv) {
            return Err(kernel_err("MultiHeadAttention: past_value does not fit past_key"));
        }
        let k = with_past(pk.as_deref(), k, b * n, (g.past_len, l), h);
        let v = with_past(pv.as_deref(), v, b * n, (g.past_len, l), hv);
        Ok((g, Heads { q, k, v }))
    }
}

impl CpuKernel for MhaKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let (g, heads) = self.heads(io)?;
        write_present(io, &[1, 2], &heads.k, &heads.v, "MultiHeadAttention")?;
        let mask = mask_table(io, 4, &g, &self.op.params)?;
        let bias = AttnBias::load(io, 5, &g)?;
        let scale = scale_of(&self.op.params, g.head_size);
        let y = attend(&g, &heads, mask.as_deref(), bias.as_ref(), scale)?;
        store(io, 0, &y, "MultiHeadAttention")
    }
}

fn float_dtype(s: &KernelSpec<'_>) -> Result<DType, EpError> {
    let dtype = s.input_dtype(0)?;
    if matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        Ok(dtype)
    } else {
        Err(unsupported_dtype(&s.node.op_type, dtype))
    }
}

/// Registers `Attention` and `MultiHeadAttention` in `com.microsoft`.
pub(super) fn register_all(r: &mut KernelRegistry) {
    r.register_in(MICROSOFT_DOMAIN, "Attention", |s| {
        let round = Round::of(float_dtype(s)?);
        Ok(Box::new(AttentionKernel { op: s.op_as::<ContribAttention>()?.clone(), round }))
    });
    r.register_in(MICROSOFT_DOMAIN, "MultiHeadAttention", |s| {
        let round = Round::of(float_dtype(s)?);
        Ok(Box::new(MhaKernel { op: s.op_as::<MultiHeadAttention>()?.clone(), round }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_rows_unpack_per_head_and_part() {
        // [B 1, L 2, N 1, parts 2, H 1]: (l, part) = 10·l + part.
        let x = [0.0, 1.0, 10.0, 11.0];
        assert_eq!(split_packed(&x, (1, 2, 1, 1), 2, 1), vec![1.0, 11.0]);
    }

    #[test]
    fn head_bias_follows_the_head_of_each_row() {
        let mut x = vec![0.0; 4];
        add_head_bias(&mut x, 2, 2, 1, &[1.0, 2.0]);
        assert_eq!(x, vec![1.0, 1.0, 2.0, 2.0]);
    }
}
