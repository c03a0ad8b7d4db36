//! Which decoder layout a model has, read from its inputs and outputs (and
//! from `genai_config.json` beside it, where there is one).
//!
//! Both layouts Onyx generates with feed `input_ids` and `attention_mask`
//! (and `position_ids` where declared) with `past_key_values.N.key/value`,
//! and return `logits` with `present.N.key/value`:
//! - the Optimum / transformers.js "decoder with past" layout, standard ops;
//! - the onnxruntime-genai model builder's, with `GroupQueryAttention`,
//!   `MatMulNBits` and friends, and its `genai_config.json`.

use std::path::Path;

use onyx_core::dtype::DType;
use onyx_core::shape::Dim;

use crate::session::{IoInfo, Session};

/// The two decoder layouts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LayoutKind {
    /// Optimum / transformers.js: standard ops, KV concatenated by the graph.
    Optimum,
    /// onnxruntime-genai's model builder: `GroupQueryAttention` in the graph.
    Genai,
}

/// One layer's cache: the input it is fed through and the output it grows into.
#[derive(Clone, Debug, PartialEq)]
pub struct KvPair {
    /// `past_key_values.N.key` (or `.value`).
    pub past: String,
    /// `present.N.key` (or `.value`).
    pub present: String,
}

/// What the generation loop needs to know about a decoder.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderLayout {
    /// Which layout.
    pub kind: LayoutKind,
    /// The dtype of `input_ids` (and of `attention_mask` / `position_ids`): int64 or int32.
    pub id_dtype: DType,
    /// Whether the model takes `attention_mask`.
    pub attention_mask: bool,
    /// Whether the model takes `position_ids`.
    pub position_ids: bool,
    /// Every cache tensor, keys and values of every layer.
    pub kv: Vec<KvPair>,
    /// The cache's dtype.
    pub kv_dtype: DType,
    /// KV heads (dimension 1 of a past tensor).
    pub kv_heads: usize,
    /// Head size (dimension 3).
    pub head_dim: usize,
    /// What `genai_config.json` says, where the model folder has one.
    pub config: GenaiConfig,
    /// Every past input feeds only `GroupQueryAttention`, which reads as many
    /// rows as `seqlens_k` says whatever the buffer's length: the cache can be
    /// bound at its full length once (where a maximum length is known), so
    /// every decode step has one input signature (onnxruntime-genai's
    /// `past_present_share_buffer`).
    pub preallocated_cache: bool,
}

/// The parts of onnxruntime-genai's `genai_config.json` generation reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenaiConfig {
    /// End-of-sequence tokens: generation stops at one.
    pub eos_token_ids: Vec<i64>,
    /// The longest sequence (prompt and new tokens) the model was built for.
    pub max_length: Option<usize>,
    /// Padding token for batches of unequal prompts.
    pub pad_token_id: Option<i64>,
    /// `model.decoder.head_size`: the cache's last dim, which onnxruntime-genai
    /// 0.18's builder declares symbolic.
    pub head_size: Option<usize>,
    /// `model.decoder.num_key_value_heads`.
    pub kv_heads: Option<usize>,
    /// The folder was built for one buffer shared by past and present at the
    /// maximum length (its `search.past_present_share_buffer`). Onyx binds
    /// the cache at its full length either way for GroupQueryAttention models.
    pub past_present_share_buffer: bool,
}

impl GenaiConfig {
    /// Reads `genai_config.json` in `dir`; `Ok(None)` where there is none.
    ///
    /// # Errors
    /// A reason when the file exists but cannot be read or parsed.
    pub fn read(dir: &Path) -> Result<Option<GenaiConfig>, String> {
        let path = dir.join("genai_config.json");
        if !path.exists() {
            return Ok(None);
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let model = &json["model"];
        let eos_token_ids = match &model["eos_token_id"] {
            serde_json::Value::Array(a) => a.iter().filter_map(|v| v.as_i64()).collect(),
            v => v.as_i64().into_iter().collect(),
        };
        let max_length = json["search"]["max_length"]
            .as_u64()
            .or_else(|| model["context_length"].as_u64())
            .map(|n| n as usize);
        let pad_token_id = model["pad_token_id"].as_i64();
        let past_present_share_buffer =
            json["search"]["past_present_share_buffer"].as_bool() == Some(true);
        let decoder = &model["decoder"];
        let size = |k: &str| decoder[k].as_u64().map(|n| n as usize);
        Ok(Some(GenaiConfig {
            eos_token_ids,
            max_length,
            pad_token_id,
            head_size: size("head_size"),
            kv_heads: size("num_key_value_heads"),
            past_present_share_buffer,
        }))
    }
}

fn find<'a>(ios: &'a [IoInfo], name: &str) -> Option<&'a IoInfo> {
    ios.iter().find(|i| i.name == name)
}

fn fixed(d: Option<&Dim>) -> Option<usize> {
    match d? {
        Dim::Known(n) => Some(*n),
        _ => None,
    }
}

impl DecoderLayout {
    /// The layout of `session`'s model, or why it is not a decoder Onyx can
    /// generate with.
    ///
    /// # Errors
    /// A reason naming what is missing or mismatched.
    pub fn detect(session: &Session) -> Result<DecoderLayout, String> {
        let (inputs, outputs) = (session.inputs(), session.outputs());
        let not_decoder = |why: String| format!("the model is not a decoder with past: {why}");
        let ids = find(&inputs, "input_ids").ok_or_else(|| not_decoder("no input_ids".into()))?;
        let id_dtype = ids.dtype().unwrap_or(DType::I64);
        if !matches!(id_dtype, DType::I64 | DType::I32) {
            return Err(not_decoder(format!("input_ids is {id_dtype:?}, not int64 or int32")));
        }
        let logits = find(&outputs, "logits").ok_or_else(|| not_decoder("no logits".into()))?;
        if !logits.dtype().is_none_or(|d| d.is_float()) {
            return Err(not_decoder("logits are not floating point".into()));
        }
        let dir = session.path().and_then(Path::parent);
        let config = match dir {
            Some(d) => GenaiConfig::read(d)?,
            None => None,
        };
        let mut kv = Vec::new();
        let mut shape: Option<(DType, usize, usize)> = None;
        for input in inputs.iter().filter(|i| i.name.starts_with("past_key_values.")) {
            let present = input.name.replacen("past_key_values.", "present.", 1);
            let out = find(&outputs, &present).ok_or_else(|| {
                not_decoder(format!("{} has no matching output {present}", input.name))
            })?;
            let dims = input.shape().map(|s| s.dims().to_vec()).unwrap_or_default();
            // Declared sizes first, else genai_config.json's.
            let heads = fixed(dims.get(1)).or(config.as_ref().and_then(|c| c.kv_heads));
            let head_dim = fixed(dims.get(3)).or(config.as_ref().and_then(|c| c.head_size));
            let (heads, head_dim) = match (dims.len(), heads, head_dim) {
                (4, Some(h), Some(d)) => (h, d),
                _ => {
                    return Err(format!(
                        "{}: expected a declared [batch, kv_heads, past, head_size] shape with \
                         fixed heads and head size (or genai_config.json's num_key_value_heads \
                         and head_size), got {dims:?}",
                        input.name
                    ));
                }
            };
            let dtype = input.dtype().unwrap_or(DType::F32);
            let this = (dtype, heads, head_dim);
            if shape.is_some_and(|s| s != this) {
                return Err(format!(
                    "{}: {dtype:?} [_, {heads}, _, {head_dim}] differs from the other caches'",
                    input.name
                ));
            }
            if out.dtype().is_some_and(|d| d != dtype) {
                return Err(format!("{present} is not {dtype:?} like {}", input.name));
            }
            shape = Some(this);
            kv.push(KvPair { past: input.name.clone(), present });
        }
        let Some((kv_dtype, kv_heads, head_dim)) = shape else {
            return Err(not_decoder("no past_key_values.N.key/value inputs".into()));
        };
        let known = |n: &str| {
            n == "input_ids"
                || n == "attention_mask"
                || n == "position_ids"
                || n.starts_with("past_key_values.")
        };
        if let Some(other) = inputs.iter().find(|i| !known(&i.name)) {
            return Err(not_decoder(format!(
                "input {} is not one a decoder step feeds",
                other.name
            )));
        }
        let graph = &session.model().graph;
        let gqa = graph.nodes.iter().any(|n| n.op_type == "GroupQueryAttention");
        // Past inputs read only as GroupQueryAttention's past_key / past_value.
        let pasts: Vec<_> = graph
            .inputs
            .iter()
            .copied()
            .filter(|&v| graph.value(v).name.starts_with("past_key_values."))
            .collect();
        let preallocated_cache = gqa
            && graph.nodes.iter().all(|n| {
                !n.implicit_inputs.iter().any(|v| pasts.contains(v))
                    && n.inputs.iter().enumerate().all(|(slot, v)| {
                        !v.is_some_and(|v| pasts.contains(&v))
                            || n.op_type == "GroupQueryAttention" && matches!(slot, 3 | 4)
                    })
            });
        let kind = if gqa || config.is_some() { LayoutKind::Genai } else { LayoutKind::Optimum };
        Ok(DecoderLayout {
            kind,
            id_dtype,
            attention_mask: find(&inputs, "attention_mask").is_some(),
            position_ids: find(&inputs, "position_ids").is_some(),
            kv,
            kv_dtype,
            kv_heads,
            head_dim,
            config: config.unwrap_or_default(),
            preallocated_cache,
        })
    }

    /// Bytes of cache per token of sequence, all layers (per batch row).
    pub fn kv_bytes_per_token(&self) -> u64 {
        let per = self.kv_dtype.byte_size(self.kv_heads * self.head_dim).unwrap_or(0);
        per as u64 * self.kv.len() as u64
    }
}
