//! Generation: an autoregressive loop over a decoder-with-past session,
//! with the KV cache kept on the session's device through an [`IoBinding`]
//! (each step's `present.*` outputs become the next step's `past_*` inputs;
//! only the last position's logits are read back).
//!
//! ```no_run
//! use onyx::{GenerateOptions, Generator, Session};
//!
//! let session = Session::builder().with_device("cpu").commit_from_file("model.onnx")?;
//! let opts = GenerateOptions { max_new_tokens: 16, ..GenerateOptions::default() };
//! let mut generator = Generator::new(&session, &[vec![1, 2, 3]], opts)?;
//! for step in &mut generator {
//!     println!("{}", step?[0]);
//! }
//! println!("{:.0} tokens/s", generator.stats().decode_tokens_per_s());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod layout;
mod sampling;

use std::time::Duration;

use onyx_core::dtype::DType;
use onyx_core::tensor::{Tensor, Value};

pub use layout::{DecoderLayout, GenaiConfig, KvPair, LayoutKind};
pub use sampling::Sampling;

use crate::error::{Error, Result};
use crate::session::{Instant, IoBinding, Session};

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    /// New tokens per sequence at most.
    pub max_new_tokens: usize,
    /// Prompt plus new tokens at most; default: `genai_config.json`'s, else unbounded.
    pub max_length: Option<usize>,
    /// How each token is chosen.
    pub sampling: Sampling,
    /// Tokens that end a sequence (kept in its output); default: the
    /// end-of-sequence tokens of `genai_config.json`, else none.
    pub stop_tokens: Option<Vec<i64>>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_new_tokens: 64,
            max_length: None,
            sampling: Sampling::default(),
            stop_tokens: None,
        }
    }
}

/// Figures of a generation so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationStats {
    /// Prompt tokens per sequence (the longest prompt, padding included).
    pub prompt_tokens: usize,
    /// Tokens generated per sequence so far.
    pub generated_tokens: usize,
    /// From the start of the prefill to the first token chosen.
    pub time_to_first_token: Duration,
    /// The prefill step, its read-back included.
    pub prefill: Duration,
    /// Every decode step together.
    pub decode: Duration,
    /// Highest bytes in use on the primary device during any step: the
    /// weights, the bound cache and inputs, the step's intermediates and outputs.
    pub peak_bytes: u64,
    /// Bytes of weights on the primary device.
    pub weight_bytes: u64,
    /// Bytes of KV cache the last step was fed.
    pub kv_bytes: u64,
    /// The largest live-set bound of any step on the primary device.
    pub live_set_bound_bytes: u64,
    /// Steps that replayed a recorded run (a CUDA graph) instead of
    /// launching node by node.
    pub replayed_steps: usize,
}

impl GenerationStats {
    /// Prompt tokens per second of prefill.
    pub fn prefill_tokens_per_s(&self) -> f64 {
        per_second(self.prompt_tokens, self.prefill)
    }

    /// Decode steps per second (each makes one token per sequence).
    pub fn decode_tokens_per_s(&self) -> f64 {
        per_second(self.generated_tokens.saturating_sub(1), self.decode)
    }
}

fn per_second(n: usize, t: Duration) -> f64 {
    if t.is_zero() { 0.0 } else { n as f64 / t.as_secs_f64() }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Phase {
    Prefill,
    Decode,
    Done,
}

/// Generates tokens from a decoder session; an iterator of steps, each one
/// token per sequence. Dropping it (a cancelled stream) frees its cache.
pub struct Generator<'s> {
    session: &'s Session,
    layout: DecoderLayout,
    binding: IoBinding<'s>,
    opts: GenerateOptions,
    stop: Vec<i64>,
    pad: i64,
    rng: fastrand::Rng,
    /// Every token of each sequence so far (prompt unpadded, then new ones).
    tokens: Vec<Vec<i64>>,
    /// The attention mask row of each sequence (padding is 0).
    mask: Vec<Vec<i64>>,
    /// Where each prompt's last token sits in the prefill's rows: prompts are
    /// padded on the left (the last column) or, for GroupQueryAttention, on
    /// the right (see [`Generator::new`]).
    prompt_last: Vec<usize>,
    finished: Vec<bool>,
    /// The last position's logits of each sequence, after the last step.
    logits: Vec<Vec<f32>>,
    phase: Phase,
    max_new: usize,
    /// The cache's full length when it is bound once at that length
    /// ([`DecoderLayout::preallocated_cache`]): the attention mask is padded
    /// to it, so every decode step has the same input shapes.
    capacity: Option<usize>,
    stats: GenerationStats,
    started: Option<Instant>,
}

fn generate_err(reason: impl Into<String>) -> Error {
    Error::Generate(reason.into())
}

impl<'s> Generator<'s> {
    /// A generator for `prompts` (one per sequence; unequal lengths are padded
    /// on the left, or on the right for GroupQueryAttention models). Nothing
    /// runs until the first step.
    ///
    /// # Errors
    /// [`Error::Generate`] for a model that is not a decoder with past, empty
    /// or too long prompts, or bad sampling settings; [`Error::Provider`] if
    /// the first inputs cannot be bound.
    pub fn new(session: &'s Session, prompts: &[Vec<i64>], opts: GenerateOptions) -> Result<Self> {
        let layout = DecoderLayout::detect(session).map_err(generate_err)?;
        opts.sampling.validate().map_err(generate_err)?;
        if prompts.is_empty() || prompts.iter().any(Vec::is_empty) {
            return Err(generate_err("every prompt needs at least one token"));
        }
        if prompts.len() > 1 && !layout.attention_mask {
            return Err(generate_err("batches need an attention_mask input to pad prompts"));
        }
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let max_length = opts.max_length.or(layout.config.max_length);
        let max_new = match max_length {
            Some(m) if longest >= m => {
                return Err(generate_err(format!(
                    "the prompt has {longest} tokens; the maximum length is {m}, which leaves \
                     no room to generate"
                )));
            }
            Some(m) => opts.max_new_tokens.min(m - longest),
            None => opts.max_new_tokens,
        };
        // Bound once at full length only where a maximum length bounds it
        // (genai_config.json's or the caller's), as onnxruntime-genai does;
        // without one the cache grows by a row a step.
        let capacity = (layout.preallocated_cache && max_length.is_some())
            .then(|| longest.checked_add(max_new))
            .flatten();
        // GroupQueryAttention reads row b's keys from position 0 up to
        // seqlens_k[b] (its mask's sum), so a left-padded prompt would attend
        // to its padding: there prompts are padded on the right, each row's
        // cache grows from its own length, and the mask's sum, not its
        // layout, carries the length (as onnxruntime's kernel takes a batch).
        let right_pad = layout.preallocated_cache;
        let stop = opts.stop_tokens.clone().unwrap_or_else(|| layout.config.eos_token_ids.clone());
        let pad = layout.config.pad_token_id.or(stop.first().copied()).unwrap_or(0);
        // A row padded with `fill` to the longest prompt, on its side.
        let pad_row = |row: Vec<i64>, fill: i64| {
            let padding = vec![fill; longest - row.len()];
            if right_pad { [row, padding].concat() } else { [padding, row].concat() }
        };
        let mask: Vec<Vec<i64>> = prompts.iter().map(|p| pad_row(vec![1; p.len()], 0)).collect();
        let prompt_last =
            prompts.iter().map(|p| if right_pad { p.len() - 1 } else { longest - 1 }).collect();
        let mut g = Generator {
            session,
            binding: session.create_binding(),
            rng: fastrand::Rng::with_seed(opts.sampling.seed),
            stop,
            pad,
            tokens: prompts.to_vec(),
            finished: vec![false; prompts.len()],
            logits: Vec::new(),
            phase: if max_new == 0 { Phase::Done } else { Phase::Prefill },
            max_new,
            capacity,
            stats: GenerationStats {
                prompt_tokens: longest,
                weight_bytes: session.weight_bytes(),
                ..GenerationStats::default()
            },
            started: None,
            layout,
            mask,
            prompt_last,
            opts,
        };
        let ids: Vec<Vec<i64>> = prompts.iter().map(|p| pad_row(p.clone(), g.pad)).collect();
        g.bind_step(&ids, 0)?;
        let empty = Tensor::zeros(
            g.layout.kv_dtype,
            vec![prompts.len(), g.layout.kv_heads, capacity.unwrap_or(0), g.layout.head_dim],
        );
        for kv in &g.layout.kv {
            g.binding.bind_input(&kv.past, &Value::Tensor(empty.clone()))?;
            if capacity.is_some() {
                // One buffer for past and present: GroupQueryAttention writes
                // the new rows in place and the device holds the cache once.
                g.binding.share_buffer(&kv.present, &kv.past)?;
            }
        }
        Ok(g)
    }

    /// The decoder's layout.
    pub fn layout(&self) -> &DecoderLayout {
        &self.layout
    }

    /// Figures so far.
    pub fn stats(&self) -> &GenerationStats {
        &self.stats
    }

    /// Every token of each sequence so far: its prompt, then what was generated.
    pub fn sequences(&self) -> &[Vec<i64>] {
        &self.tokens
    }

    /// The last position's logits of each sequence after the last step
    /// (before the repetition penalty): for checking against another runtime.
    pub fn last_logits(&self) -> &[Vec<f32>] {
        &self.logits
    }

    /// Runs one step: the prefill first, then one decode step per call.
    /// `Ok(None)` once every sequence has stopped or the length is reached.
    ///
    /// # Errors
    /// The run's errors; the generator then stops and frees its cache.
    pub fn step(&mut self) -> Result<Option<Vec<i64>>> {
        if self.phase == Phase::Done {
            return Ok(None);
        }
        match self.try_step() {
            Ok(t) => Ok(Some(t)),
            Err(e) => {
                self.phase = Phase::Done;
                let _ = self.binding.clear();
                Err(e)
            }
        }
    }

    fn try_step(&mut self) -> Result<Vec<i64>> {
        let t0 = Instant::now();
        let start = *self.started.get_or_insert(t0);
        let ran = self.session.run_binding(&mut self.binding)?;
        self.stats.replayed_steps += usize::from(ran.replayed);
        let m = &ran.memory;
        self.stats.peak_bytes = self.stats.peak_bytes.max(m.weight_bytes + m.peak_bytes);
        self.stats.live_set_bound_bytes =
            self.stats.live_set_bound_bytes.max(m.live_set_bound_bytes);
        self.stats.kv_bytes = self
            .layout
            .kv
            .iter()
            .filter_map(|kv| self.binding.input_shape(&kv.past))
            .map(|(d, s)| d.byte_size(s.numel().unwrap_or(0)).unwrap_or(0) as u64)
            .sum();
        self.logits = self.last_logits_from_device()?;
        let mut chosen = Vec::with_capacity(self.tokens.len());
        for (row, seq) in self.tokens.iter_mut().enumerate() {
            if self.finished[row] {
                chosen.push(self.pad);
                continue;
            }
            let mut l = self.logits[row].clone();
            sampling::penalize(&mut l, seq, self.opts.sampling.repetition_penalty);
            let t = sampling::choose(&l, &self.opts.sampling, &mut self.rng) as i64;
            seq.push(t);
            self.finished[row] = self.stop.contains(&t);
            chosen.push(t);
        }
        self.stats.generated_tokens += 1;
        let elapsed = t0.elapsed();
        if self.phase == Phase::Prefill {
            self.stats.prefill = elapsed;
            self.stats.time_to_first_token = start.elapsed();
        } else {
            self.stats.decode += elapsed;
        }
        if self.stats.generated_tokens >= self.max_new || self.finished.iter().all(|&f| f) {
            self.phase = Phase::Done;
            self.binding.clear()?;
            return Ok(chosen);
        }
        // The cache stays where the run left it: present → past, no copy.
        let t1 = Instant::now();
        for kv in &self.layout.kv {
            self.binding.bind_output_as_input(&kv.present, &kv.past)?;
        }
        let past = self.mask[0].len();
        for (row, m) in self.mask.iter_mut().enumerate() {
            m.push(if self.finished[row] { 0 } else { 1 });
        }
        let next: Vec<Vec<i64>> = chosen.iter().map(|&t| vec![t]).collect();
        self.bind_step(&next, past)?;
        self.phase = Phase::Decode;
        self.stats.decode += t1.elapsed();
        Ok(chosen)
    }

    /// Binds `input_ids` (one row per sequence), the attention mask so far
    /// and the positions of the new tokens (`past` tokens precede them).
    fn bind_step(&mut self, ids: &[Vec<i64>], past: usize) -> Result<()> {
        let (b, s) = (ids.len(), ids[0].len());
        let flat: Vec<i64> = ids.iter().flatten().copied().collect();
        let id_tensor = self.ids(vec![b, s], flat)?;
        self.binding.bind_input("input_ids", &Value::Tensor(id_tensor))?;
        if self.layout.attention_mask {
            // Padded with zeros to the capacity, where the cache has one;
            // except a prefill of unequal prompts, which GroupQueryAttention
            // takes as one only where the mask is as wide as the prompt
            // (onnxruntime-genai binds every prefill so).
            let unequal = self.prompt_last.iter().any(|&l| l + 1 != s);
            let total = match self.capacity {
                Some(c) if !(past == 0 && unequal) => c,
                _ => self.mask[0].len(),
            };
            let mut flat = Vec::with_capacity(b * total);
            for m in &self.mask {
                flat.extend_from_slice(m);
                flat.resize(flat.len() + total - m.len(), 0);
            }
            let t = self.ids(vec![b, total], flat)?;
            self.binding.bind_input("attention_mask", &Value::Tensor(t))?;
        }
        if self.layout.position_ids {
            // The position of a token is the count of unmasked tokens before
            // it; padding gets 1, as transformers does.
            let mut flat = Vec::with_capacity(b * s);
            for m in &self.mask {
                let mut seen: i64 = m[..past].iter().sum();
                for &bit in &m[past..past + s] {
                    flat.push(if bit == 0 { 1 } else { seen });
                    seen += bit;
                }
            }
            let t = self.ids(vec![b, s], flat)?;
            self.binding.bind_input("position_ids", &Value::Tensor(t))?;
        }
        Ok(())
    }

    /// The last position's logits of each sequence, read back row by row
    /// (a prompt's other positions never leave the device).
    fn last_logits_from_device(&self) -> Result<Vec<Vec<f32>>> {
        let batch = self.tokens.len();
        let Some(shape) = self.binding.output_shape("logits").and_then(|(_, s)| s.concrete())
        else {
            return Err(generate_err("the step gave no logits"));
        };
        let &[b, s, vocab] = shape.as_slice() else {
            return Err(generate_err(format!(
                "logits have shape {shape:?}, not [batch, seq, vocab]"
            )));
        };
        if b != batch || s == 0 || vocab == 0 {
            return Err(generate_err(format!(
                "logits have shape {shape:?} for a batch of {batch}"
            )));
        }
        (0..b)
            .map(|r| {
                let rows = self.stats.prompt_tokens;
                let last = match self.phase {
                    Phase::Prefill if s == rows => self.prompt_last[r],
                    // Logits of the last position only: right for a prompt that ends there.
                    Phase::Prefill if self.prompt_last[r] + 1 == rows => s - 1,
                    Phase::Prefill => {
                        return Err(generate_err(format!(
                            "logits have {s} positions for {rows} prompt tokens: prompts of \
                             unequal length need every position's"
                        )));
                    }
                    _ => s - 1,
                };
                let row = self.binding.output_row_to_host("logits", r * s + last)?;
                let values = row.to_f64_vec().map_err(|e| generate_err(e.to_string()))?;
                Ok(values.into_iter().map(|x| x as f32).collect())
            })
            .collect()
    }

    fn ids(&self, shape: Vec<usize>, v: Vec<i64>) -> Result<Tensor> {
        let t = match self.layout.id_dtype {
            DType::I32 => Tensor::from_vec(shape, v.into_iter().map(|x| x as i32).collect()),
            _ => Tensor::from_vec(shape, v),
        };
        t.map_err(|e| generate_err(e.to_string()))
    }
}

impl Iterator for Generator<'_> {
    type Item = Result<Vec<i64>>;

    fn next(&mut self) -> Option<Self::Item> {
        self.step().transpose()
    }
}
