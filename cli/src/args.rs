//! Command-line parsing (clap) and the dispatch to the subcommands.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// Onyx: portable ONNX inference whose memory is the peak live set.
#[derive(Parser, Debug)]
#[command(name = "onyx", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a model and print its outputs, latency and memory figures.
    Run(RunArgs),
    /// Describe a model: IR, opsets, inputs and outputs, ops, backend support, planned memory.
    Info(InfoArgs),
    /// Run the ONNX node test suite on a backend and report pass/fail/error/unsupported.
    Conformance(ConformanceArgs),
    /// Time a model: session creation, the first run and warm runs (median and spread).
    Bench(BenchArgs),
    /// Generate tokens with a decoder (Optimum or onnxruntime-genai layout),
    /// printing them as they come.
    Generate(GenerateArgs),
}

/// Options shared by commands that build a session.
#[derive(Args, Debug, Clone)]
pub(crate) struct SessionArgs {
    /// Device: cpu, wgpu, wgpu:N, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub(crate) device: String,
    /// Make any device or per-node fallback an error.
    #[arg(long)]
    pub(crate) strict: bool,
    /// Size of a symbolic dimension, e.g. --dim batch=2 (others default to 1).
    #[arg(long = "dim", value_name = "NAME=VALUE", value_parser = parse_dim)]
    pub(crate) dims: Vec<(String, usize)>,
    /// CPU worker threads (default: all cores). 1 runs on the calling thread only.
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Let f32 matrix products on CUDA use TF32 tensor cores.
    #[arg(long)]
    pub(crate) allow_tf32: bool,
    /// Run the graph as written: no folded BatchNormalization, fused Conv activation,
    /// attention, Gelu or skip normalization.
    #[arg(long)]
    pub(crate) no_fusion: bool,
    /// On CUDA, run every node from the host each time instead of recording
    /// the second run with given input shapes as a CUDA graph and replaying it.
    #[arg(long)]
    pub(crate) no_cuda_graph: bool,
}

#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    /// The .onnx file.
    pub(crate) model: PathBuf,
    #[command(flatten)]
    pub(crate) session: SessionArgs,
    /// An input from a file: NAME=FILE.npy or NAME=FILE.pb (others are generated).
    #[arg(long = "input", value_name = "NAME=FILE", value_parser = parse_input)]
    pub(crate) inputs: Vec<(String, PathBuf)>,
    /// Keep every intermediate until the end of the run (for comparison).
    #[arg(long)]
    pub(crate) no_release: bool,
    /// Write each output as OUTPUT_NAME.npy into this folder.
    #[arg(long)]
    pub(crate) output_dir: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// Seed for generated inputs.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Run this many times on the same inputs and report the last run: the
    /// first run with given input shapes records their schedule, later ones
    /// follow it (and hold its arena).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) repeat: u32,
}

#[derive(Args, Debug)]
pub(crate) struct BenchArgs {
    /// The .onnx file.
    pub(crate) model: PathBuf,
    #[command(flatten)]
    pub(crate) session: SessionArgs,
    /// An input from a file: NAME=FILE.npy or NAME=FILE.pb (others are generated).
    #[arg(long = "input", value_name = "NAME=FILE", value_parser = parse_input)]
    pub(crate) inputs: Vec<(String, PathBuf)>,
    /// Untimed runs after the first one.
    #[arg(long, default_value_t = 3)]
    pub(crate) warmup: usize,
    /// Timed runs.
    #[arg(long, default_value_t = 20)]
    pub(crate) runs: usize,
    /// After the timed runs, profiled runs (devices synchronized after
    /// every node): each node's median time over them, by op type, and the
    /// slowest nodes.
    #[arg(long)]
    pub(crate) profile: bool,
    /// How many profiled runs `--profile` takes the median of.
    #[arg(long, default_value_t = 20)]
    pub(crate) profile_runs: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// Seed for generated inputs.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
}

#[derive(Args, Debug)]
pub(crate) struct GenerateArgs {
    /// The decoder's .onnx file (with past key values as inputs).
    pub(crate) model: PathBuf,
    #[command(flatten)]
    pub(crate) session: SessionArgs,
    /// The prompt as token ids, e.g. 1,2,3.
    #[arg(long, value_name = "IDS", conflicts_with = "prompt")]
    pub(crate) prompt_ids: Option<String>,
    /// The prompt as text, encoded with the tokenizer.
    #[arg(long, value_name = "TEXT")]
    pub(crate) prompt: Option<String>,
    /// A tokenizer.json (default: the one beside the model, if any).
    #[arg(long, value_name = "FILE")]
    pub(crate) tokenizer: Option<PathBuf>,
    /// New tokens at most.
    #[arg(long, default_value_t = 64)]
    pub(crate) max_new_tokens: usize,
    /// Prompt and new tokens at most (default: genai_config.json's, else none).
    #[arg(long)]
    pub(crate) max_length: Option<usize>,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) temperature: f32,
    /// Sample among the K most likely tokens only (0: all).
    #[arg(long, default_value_t = 0)]
    pub(crate) top_k: usize,
    /// Sample among the most likely tokens whose probabilities sum to P.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) top_p: f32,
    /// Penalty on tokens already in the sequence (1: none).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) repetition_penalty: f32,
    /// The sampler's seed.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// A token that ends generation (repeatable; default: genai_config.json's eos).
    #[arg(long = "stop-token", value_name = "ID")]
    pub(crate) stop_tokens: Vec<i64>,
    /// Print one JSON object (generated_ids, ttft_ms, tokens/s, memory) instead of tokens.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args, Debug)]
pub(crate) struct InfoArgs {
    /// The .onnx file; without one, describes the --device (name, compute capability, memory).
    pub(crate) model: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) session: SessionArgs,
    /// Skip the run that measures the planned memory figures.
    #[arg(long)]
    pub(crate) no_plan: bool,
}

#[derive(Args, Debug)]
pub(crate) struct ConformanceArgs {
    /// Backend (device string) to test.
    #[arg(long, default_value = "cpu")]
    pub(crate) backend: String,
    /// Only cases whose name matches this regex.
    #[arg(long)]
    pub(crate) filter: Option<String>,
    /// Write <backend>.json and <backend>.md here.
    #[arg(long)]
    pub(crate) report: Option<PathBuf>,
    /// The suite folder (default: the --suite folder under $ONYX_TESTDATA or target/onnx-testdata; generated if missing).
    #[arg(long)]
    pub(crate) data: Option<PathBuf>,
    /// Which generated suite: `node` (the ONNX node suite) or `ort` (onnxruntime-generated cases for contrib ops).
    #[arg(long, default_value = "node")]
    pub(crate) suite: String,
    /// Compare with this manifest of expected passes; regressions make the exit code 1.
    #[arg(long)]
    pub(crate) manifest: Option<PathBuf>,
    /// Fail instead of falling back to the CPU (for GPU backends).
    #[arg(long)]
    pub(crate) no_fallback: bool,
}

fn parse_dim(s: &str) -> Result<(String, usize), String> {
    let (k, v) = s.split_once('=').ok_or("expected NAME=VALUE")?;
    Ok((k.to_string(), v.parse().map_err(|_| format!("'{v}' is not a size"))?))
}

fn parse_input(s: &str) -> Result<(String, PathBuf), String> {
    let (k, v) = s.rsplit_once('=').ok_or("expected NAME=FILE")?;
    Ok((k.to_string(), PathBuf::from(v)))
}

/// Runs the chosen subcommand.
///
/// # Errors
/// The subcommand's error, with context for every layer.
pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(a) => crate::run::run(a),
        Command::Info(a) => crate::info::info(a),
        Command::Conformance(a) => crate::conformance::conformance(a),
        Command::Bench(a) => crate::bench::bench(a),
        Command::Generate(a) => crate::generate::generate(a),
    }
}
