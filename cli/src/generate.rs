//! `onyx generate`: autoregressive decoding through `onyx::Generator`,
//! printing tokens as they come (text where the model folder has a
//! `tokenizer.json`), or one JSON object with ids, timings and memory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use onyx::{GenerateOptions, Generator, Sampling};
use serde_json::json;
use tokenizers::Tokenizer;

use crate::args::GenerateArgs;
use crate::io::open;

/// The tokenizer asked for, or the model folder's `tokenizer.json` if it has one.
fn tokenizer(a: &GenerateArgs, required: bool) -> Result<Option<Tokenizer>> {
    let path: PathBuf = match &a.tokenizer {
        Some(p) => p.clone(),
        None => a.model.parent().unwrap_or(Path::new(".")).join("tokenizer.json"),
    };
    if !path.exists() {
        if required || a.tokenizer.is_some() {
            bail!(
                "--prompt needs a tokenizer: {} does not exist (pass --tokenizer FILE, or \
                 --prompt-ids)",
                path.display()
            );
        }
        return Ok(None);
    }
    let t = Tokenizer::from_file(&path)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("reading the tokenizer {}", path.display()))?;
    Ok(Some(t))
}

fn prompt_ids(a: &GenerateArgs, tok: Option<&Tokenizer>) -> Result<Vec<i64>> {
    match (&a.prompt_ids, &a.prompt, tok) {
        (Some(ids), None, _) => ids
            .split(',')
            .map(|s| s.trim().parse::<i64>().with_context(|| format!("'{s}' is not a token id")))
            .collect(),
        (None, Some(text), Some(t)) => {
            let enc = t.encode(text.as_str(), true).map_err(|e| anyhow::anyhow!("{e}"))?;
            Ok(enc.get_ids().iter().map(|&i| i as i64).collect())
        }
        (None, Some(_), None) => bail!("--prompt needs a tokenizer"),
        _ => bail!("give exactly one of --prompt-ids and --prompt"),
    }
}

fn decode(t: &Tokenizer, ids: &[i64]) -> Result<String> {
    let ids: Vec<u32> = ids.iter().map(|&i| i as u32).collect();
    t.decode(&ids, true).map_err(|e| anyhow::anyhow!("decoding tokens: {e}"))
}

pub fn generate(a: GenerateArgs) -> Result<ExitCode> {
    let tok = tokenizer(&a, a.prompt.is_some())?;
    let prompt = prompt_ids(&a, tok.as_ref())?;
    let session = open(&a.model, &a.session, true)?;
    let opts = GenerateOptions {
        max_new_tokens: a.max_new_tokens,
        max_length: a.max_length,
        sampling: Sampling {
            temperature: a.temperature,
            top_k: a.top_k,
            top_p: a.top_p,
            repetition_penalty: a.repetition_penalty,
            seed: a.seed,
        },
        stop_tokens: (!a.stop_tokens.is_empty()).then(|| a.stop_tokens.clone()),
    };
    let mut generator = Generator::new(&session, std::slice::from_ref(&prompt), opts)
        .with_context(|| format!("generating with {}", a.model.display()))?;
    let mut ids = Vec::new();
    let mut shown = String::new();
    let mut stdout = std::io::stdout().lock();
    while let Some(step) = generator.step().context("generating")? {
        ids.push(step[0]);
        if a.json {
            continue;
        }
        // Print what the new token adds to the text (or its id), as it comes.
        match &tok {
            Some(t) => {
                let text = decode(t, &ids)?;
                let new = text.get(shown.len()..).unwrap_or("");
                write!(stdout, "{new}")?;
                shown = text;
            }
            None => write!(stdout, "{}{}", if ids.len() > 1 { " " } else { "" }, step[0])?,
        }
        stdout.flush()?;
    }
    let st = generator.stats().clone();
    let layout = generator.layout().kind;
    drop(generator);
    if a.json {
        let mut report = json!({
            "model": a.model,
            "device": session.device(),
            "layout": layout,
            "prompt_tokens": prompt.len(),
            "generated_ids": ids,
            "ttft_ms": st.time_to_first_token.as_secs_f64() * 1e3,
            "prefill_tokens_per_s": st.prefill_tokens_per_s(),
            "decode_tokens_per_s": st.decode_tokens_per_s(),
            "replayed_steps": st.replayed_steps,
            "memory": {
                "peak_bytes": st.peak_bytes,
                "weight_bytes": st.weight_bytes,
                "kv_bytes": st.kv_bytes,
                "live_set_bound_bytes": st.live_set_bound_bytes,
            },
        });
        if let Some(t) = &tok {
            report["text"] = json!(decode(t, &ids)?);
        }
        writeln!(stdout, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        writeln!(stdout)?;
        eprintln!(
            "{} tokens on {}: first after {:.1} ms, prefill {:.0} tokens/s, decode {:.0} tokens/s, \
             peak {} bytes",
            ids.len(),
            session.device(),
            st.time_to_first_token.as_secs_f64() * 1e3,
            st.prefill_tokens_per_s(),
            st.decode_tokens_per_s(),
            st.peak_bytes
        );
    }
    Ok(ExitCode::SUCCESS)
}
