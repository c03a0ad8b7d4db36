//! `onyx run`.

use std::process::ExitCode;

use anyhow::{Context, Result};
use onyx::Value;
use serde_json::json;

use crate::args::RunArgs;
use crate::io::{bytes, dims_hint, inputs, open, output_file_name, stats};

pub fn run(a: RunArgs) -> Result<ExitCode> {
    let session = open(&a.model, &a.session, !a.no_release)?;
    let values = inputs(&session, &a.inputs, &a.session.dims, a.seed)?;
    let hint = dims_hint(&session, &a.inputs, &a.session.dims);
    let run = || {
        session.run(values.clone()).with_context(|| format!("running {}{hint}", a.model.display()))
    };
    let mut out = run()?;
    for _ in 1..a.repeat {
        out = run()?;
    }

    if let Some(dir) = &a.output_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (name, v) in &out.values {
            let path = dir.join(output_file_name(name));
            match v {
                Value::Tensor(t) => {
                    let f = std::fs::File::create(&path)
                        .with_context(|| format!("creating {}", path.display()))?;
                    onyx::npy::write_npy(std::io::BufWriter::new(f), t)
                        .with_context(|| format!("writing {}", path.display()))?;
                }
                Value::Sequence(..) => log::warn!("output '{name}' is a sequence; not written"),
                Value::Empty { .. } => log::warn!("output '{name}' is an empty optional"),
            }
        }
    }

    let m = out.memory;
    if a.json {
        let outputs: Vec<_> = out
            .values
            .iter()
            .map(|(name, v)| match v {
                Value::Tensor(t) => json!({
                    "name": name,
                    "dtype": t.dtype().name(),
                    "shape": t.shape(),
                    "stats": stats(t),
                    "file": a.output_dir.as_ref().map(|d| d.join(output_file_name(name))),
                }),
                Value::Sequence(d, ts) => {
                    json!({"name": name, "dtype": d.name(), "sequence_length": ts.len()})
                }
                Value::Empty { dtype, sequence } => {
                    json!({"name": name, "dtype": dtype.name(), "optional": "empty", "sequence": sequence})
                }
            })
            .collect();
        let report = json!({
            "model": a.model,
            "device": session.device(),
            "requested_device": session.requested_device(),
            "fallback": session.fallback(),
            "latency_ms": out.latency.as_secs_f64() * 1e3,
            "outputs": outputs,
            "memory": {
                "release_dead_values": !a.no_release,
                "peak_bytes": m.peak_bytes,
                "no_release_bytes": m.no_release_bytes,
                "live_set_bound_bytes": m.live_set_bound_bytes,
                "arena_bytes": m.arena_bytes,
                "releases": m.releases,
                "weight_bytes": m.weight_bytes,
                "devices": m.devices,
                "timeline": m.timeline,
            },
            "kernels_per_device": session.kernels_per_device(),
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }

    println!("model   {}", a.model.display());
    println!(
        "device  {}{}",
        session.device(),
        session.fallback().map(|f| format!(" (fallback: {f})")).unwrap_or_default()
    );
    println!("outputs");
    for (name, v) in &out.values {
        match v {
            Value::Tensor(t) => {
                let s = stats(t);
                let f = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.6}"));
                let first: Vec<String> =
                    s.first.iter().map(|v| v.to_string().trim_matches('"').to_string()).collect();
                println!(
                    "  {name}: {} {:?}  min {} max {} mean {}  first [{}]",
                    t.dtype(),
                    t.shape(),
                    f(s.min),
                    f(s.max),
                    f(s.mean),
                    first.join(", ")
                );
            }
            Value::Sequence(d, ts) => println!("  {name}: sequence of {} {d} tensors", ts.len()),
            Value::Empty { dtype, .. } => println!("  {name}: empty optional of {dtype}"),
        }
    }
    println!("latency {:.3} ms", out.latency.as_secs_f64() * 1e3);
    println!("memory (weights {} resident, not counted below)", bytes(m.weight_bytes));
    let mode = if a.no_release { "release off" } else { "release on" };
    println!("  peak ({mode})         {:>12}  ({} B)", bytes(m.peak_bytes), m.peak_bytes);
    println!(
        "  without release        {:>12}  ({} B)",
        bytes(m.no_release_bytes),
        m.no_release_bytes
    );
    println!(
        "  live-set bound         {:>12}  ({} B)",
        bytes(m.live_set_bound_bytes),
        m.live_set_bound_bytes
    );
    if m.arena_bytes > 0 {
        println!("  arena                  {:>12}  ({} B)", bytes(m.arena_bytes), m.arena_bytes);
    }
    println!("  releases               {:>12}", m.releases);
    if m.devices.len() > 1 {
        for d in &m.devices {
            println!(
                "  {:<10} peak {:>12}  without release {:>12}  bound {:>12}",
                d.device,
                bytes(d.peak_bytes),
                bytes(d.no_release_bytes),
                bytes(d.live_set_bound_bytes)
            );
        }
        let counts: Vec<String> =
            session.kernels_per_device().iter().map(|(d, n)| format!("{n} on {d}")).collect();
        println!("placement {}", counts.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}
