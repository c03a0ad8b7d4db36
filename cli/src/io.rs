//! Shared CLI plumbing: building sessions with a progress bar, reading input
//! files, summarizing outputs, and formatting sizes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use onyx::core::onnx::external::NoExternalData;
use onyx::core::onnx::pb;
use onyx::{Session, Tensor, Value};
use prost::Message;

use crate::args::SessionArgs;

/// Builds a session; shows a progress bar while uploading weights of large models.
pub fn open(model: &Path, args: &SessionArgs, release: bool) -> Result<Session> {
    open_with(model, args, release, |b| b)
}

/// [`open`] with extra builder settings.
pub fn open_with(
    model: &Path,
    args: &SessionArgs,
    release: bool,
    extra: impl FnOnce(onyx::SessionBuilder) -> onyx::SessionBuilder,
) -> Result<Session> {
    let size = std::fs::metadata(model).map(|m| m.len()).unwrap_or(0);
    let bar = (size > 32 << 20).then(|| {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes}")
                .expect("static template")
                .progress_chars("=> "),
        );
        bar.set_message("loading weights");
        bar
    });
    let mut builder = Session::builder()
        .with_device(&args.device)
        .with_strict(args.strict)
        .with_fusion(!args.no_fusion)
        .with_cuda_graphs(!args.no_cuda_graph)
        .with_release_dead_values(release);
    if args.allow_tf32 {
        builder = builder.with_allow_tf32(true);
    }
    if let Some(t) = args.threads {
        builder = builder.with_threads(t);
    }
    builder = extra(builder);
    if let Some(bar) = bar.clone() {
        builder = builder.with_progress(Box::new(move |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        }));
    }
    let session =
        builder.commit_from_file(model).with_context(|| format!("loading {}", model.display()))?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(session)
}

/// Reads an input value from `.npy` or `.pb` (TensorProto or SequenceProto).
pub fn read_input(path: &Path) -> Result<Value> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    match ext {
        "npy" => {
            let f =
                std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
            Ok(Value::Tensor(
                onyx::npy::read_npy(std::io::BufReader::new(f))
                    .with_context(|| format!("reading {}", path.display()))?,
            ))
        }
        "pb" => {
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let t = pb::TensorProto::decode(&bytes[..])
                .with_context(|| format!("decoding {}", path.display()))?;
            let t = onyx::core::onnx::tensor_from_proto(&t, &NoExternalData)
                .with_context(|| format!("decoding {}", path.display()))?;
            Ok(Value::Tensor(t))
        }
        _ => bail!("{}: inputs must be .npy or .pb files", path.display()),
    }
}

/// Generated inputs for the model, overridden by files where given.
pub fn inputs(
    session: &Session,
    files: &[(String, std::path::PathBuf)],
    dims: &[(String, usize)],
    seed: u64,
) -> Result<Vec<(String, Value)>> {
    let dims: HashMap<String, usize> = dims.iter().cloned().collect();
    let infos = session.inputs();
    let mut given: HashMap<&str, &Path> =
        files.iter().map(|(n, p)| (n.as_str(), p.as_path())).collect();
    let mut out = Vec::new();
    let generated: Vec<_> =
        infos.iter().filter(|i| !given.contains_key(i.name.as_str())).cloned().collect();
    let mut random = onyx::inputs::random_inputs(&generated, &dims, seed)?.into_iter();
    for info in &infos {
        match given.remove(info.name.as_str()) {
            Some(path) => {
                let mut v = read_input(path)?;
                // .npy has no bfloat16/float8/int4: files hold their raw bits instead.
                if let (Value::Tensor(t), Some(d)) = (&v, info.dtype()) {
                    if t.dtype() != d && raw_storage(d) == Some(t.dtype()) {
                        v = Value::Tensor(onyx::npy::with_dtype(t.clone(), d)?);
                    }
                }
                out.push((info.name.clone(), v));
            }
            None => out.push(random.next().context("generated inputs ran out")?),
        }
    }
    if let Some((name, _)) = given.into_iter().next() {
        bail!("--input {name}: the model has no input named '{name}'");
    }
    Ok(out)
}

/// What to say after "running MODEL" when a run fails: the dimensions the
/// generated inputs left at 1, and the flag that sets them (empty when every
/// input came from a file or every dimension was set).
pub fn dims_hint(
    session: &Session,
    files: &[(String, PathBuf)],
    dims: &[(String, usize)],
) -> String {
    let dims: HashMap<String, usize> = dims.iter().cloned().collect();
    let generated: Vec<_> =
        session.inputs().into_iter().filter(|i| !files.iter().any(|(n, _)| *n == i.name)).collect();
    let left = onyx::inputs::defaulted_dims(&generated, &dims);
    if left.is_empty() {
        return String::new();
    }
    format!(
        " (inputs generated with {} left at 1; set sizes with --dim NAME=VALUE)",
        left.join(", ")
    )
}

/// The numpy dtype that carries the raw bits of a dtype numpy lacks.
fn raw_storage(d: onyx::DType) -> Option<onyx::DType> {
    use onyx::DType::*;
    match d {
        BF16 => Some(U16),
        F8E4M3FN | F8E4M3FNUZ | F8E5M2 | F8E5M2FNUZ | F8E8M0 | U4 | I4 | F4E2M1 | U2 | I2
        | F6E2M3 | F6E3M2 => Some(U8),
        _ => None,
    }
}

/// The file name for an output: every character outside `[A-Za-z0-9._-]` becomes `_`.
pub fn output_file_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' })
        .collect();
    format!("{s}.npy")
}

/// Summary statistics of a tensor, for printing.
#[derive(serde::Serialize)]
pub struct Stats {
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
    pub first: Vec<serde_json::Value>,
}

/// Computes min/max/mean (NaN-free) and the first few values.
pub fn stats(t: &Tensor) -> Stats {
    if let Ok(s) = t.strings() {
        return Stats {
            min: None,
            max: None,
            mean: None,
            first: s.iter().take(5).map(|x| x.clone().into()).collect(),
        };
    }
    let v = t.to_f64_vec().unwrap_or_default();
    let finite: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    let (min, max, mean) = if finite.is_empty() {
        (None, None, None)
    } else {
        (
            Some(finite.iter().copied().fold(f64::INFINITY, f64::min)),
            Some(finite.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            Some(finite.iter().sum::<f64>() / finite.len() as f64),
        )
    };
    let first = v
        .iter()
        .take(5)
        .map(|&x| serde_json::Number::from_f64(x).map_or(serde_json::Value::Null, Into::into))
        .collect();
    Stats { min, max, mean, first }
}

/// `1.5 MiB`-style sizes.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.2} {}", UNITS[u]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_names_become_safe_file_names() {
        assert_eq!(output_file_name("onnx::Shape_422"), "onnx__Shape_422.npy");
        assert_eq!(output_file_name("a/b c:0"), "a_b_c_0.npy");
        assert_eq!(output_file_name("logits.v2-x"), "logits.v2-x.npy");
    }

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.50 KiB");
    }
}
