//! `onyx info`.

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;

use anyhow::{Context, Result};
use onyx::core::graph::DEFAULT_DOMAIN;
use onyx::core::ops::OpRegistry;

use crate::args::InfoArgs;
use crate::io::{bytes, open};

pub fn info(a: InfoArgs) -> Result<ExitCode> {
    let requested: onyx::Device = a.session.device.parse()?;
    let Some(path) = &a.model else {
        let text = onyx::device::describe(requested)
            .with_context(|| format!("describing device {requested}"))?;
        println!("{text}");
        return Ok(ExitCode::SUCCESS);
    };
    let model = onyx::core::onnx::load_model_file(path)
        .with_context(|| format!("loading {}", path.display()))?;
    let g = &model.graph;
    println!("model     {}", path.display());
    if requested != onyx::Device::Cpu {
        match onyx::device::describe(requested) {
            Ok(text) => println!("device    {}", text.replace('\n', "\n          ")),
            Err(e) => println!("device    {requested}: unavailable ({e})"),
        }
    }
    println!("ir        {}", model.ir_version);
    println!("producer  {}", if model.producer.is_empty() { "-" } else { &model.producer });
    let opsets: Vec<String> = model.opsets.iter().map(|(d, v)| format!("{d} {v}")).collect();
    println!("opsets    {}", opsets.join(", "));
    println!("weights   {} in {} tensors", bytes(g.initializer_bytes()), g.initializer_count());
    println!("inputs");
    for &v in &g.inputs {
        let info = g.value(v);
        println!(
            "  {}: {}",
            info.name,
            info.declared.as_ref().map_or("?".into(), |t| t.to_string())
        );
    }
    // Every symbolic (or unnamed) input dimension, with the size generated
    // inputs give it: --dim's, else 1.
    let declared: Vec<_> = g.inputs.iter().map(|&v| g.value(v).clone()).collect();
    let every = onyx::core::inputs::defaulted_dims(&declared, &Default::default());
    if !every.is_empty() {
        let sizes: Vec<String> = every
            .iter()
            .map(|d| {
                let set = a.session.dims.iter().find(|(k, _)| k == d).map(|(_, v)| *v);
                format!("{d}={}", set.unwrap_or(1))
            })
            .collect();
        println!("dims      {} (generated inputs; set with --dim NAME=VALUE)", sizes.join(", "));
    }
    println!("outputs");
    for &v in &g.outputs {
        let info = g.value(v);
        println!(
            "  {}: {}",
            info.name,
            info.declared.as_ref().map_or("?".into(), |t| t.to_string())
        );
    }

    // Placement needs a session on the requested device; the op table shows it per op.
    let session = open(path, &a.session, true);
    let mut placed: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    if let Ok(s) = &session {
        for (node, device) in s.placement() {
            *placed
                .entry(op_key(&node.domain, &node.op_type))
                .or_default()
                .entry(device)
                .or_default() += 1;
        }
    }

    // Whether the CPU can run each op: the core must parse it, then either the
    // executor handles it (views, control flow, sequences) or the CPU has a kernel.
    let registry = OpRegistry::standard();
    let cpu = onyx_cpu::CpuProvider::default();
    let mut first_node: HashMap<String, &onyx::core::graph::Node> = HashMap::new();
    collect(g, &mut first_node);
    println!(
        "ops ({} nodes{})",
        g.op_histogram().values().sum::<usize>(),
        if g.folded_constants > 0 { ", Constant folded into weights" } else { "" }
    );
    println!(
        "  {:<32} {:>6}  {:<12} placed on ({} requested)",
        "op", "count", "cpu", a.session.device
    );
    for (op, count) in g.op_histogram() {
        let support = if op == "Constant" {
            "yes".to_string()
        } else {
            match first_node.get(&op) {
                Some(node) => match registry.build(node) {
                    Ok(parsed) if onyx::core::exec::handled_by_executor(&*parsed) => "yes".into(),
                    Ok(_)
                        if onyx::core::ep::ExecutionProvider::supports_op(
                            &cpu,
                            &node.domain,
                            &node.op_type,
                        ) =>
                    {
                        "yes".into()
                    }
                    Ok(_) => "no kernel".into(),
                    Err(e) => format!("no ({e})"),
                },
                None => "?".into(),
            }
        };
        let on: Vec<String> = placed
            .get(&op)
            .map(|m| m.iter().map(|(d, n)| format!("{d} {n}")).collect())
            .unwrap_or_default();
        let on = if on.is_empty() { "executor".to_string() } else { on.join(", ") };
        let on = if session.is_ok() { on } else { "-".into() };
        println!("  {op:<32} {count:>6}  {support:<12} {on}");
    }

    let session = match session {
        Ok(s) => s,
        Err(e) => {
            println!("placement on {}: unavailable: {e:#}", a.session.device);
            return Ok(ExitCode::SUCCESS);
        }
    };
    let counts = session.kernels_per_device();
    let summary: Vec<String> = counts.iter().map(|(d, n)| format!("{n} on {d}")).collect();
    println!(
        "placement ({} requested): kernel nodes {}",
        session.requested_device(),
        summary.join(", ")
    );
    if counts.len() > 1 {
        let primary = &counts[0].0;
        let fallen: Vec<_> =
            session.placement().into_iter().filter(|(_, d)| d != primary).collect();
        for (node, device) in fallen.iter().take(40) {
            println!("  {node} -> {device}");
        }
        if fallen.len() > 40 {
            println!("  … and {} more", fallen.len() - 40);
        }
    }
    if a.no_plan {
        return Ok(ExitCode::SUCCESS);
    }
    // Planned memory: the planner's figures for one run at the given dims.
    let dims: Vec<String> = a.session.dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let dims = if dims.is_empty() { String::new() } else { format!("{}, ", dims.join(" ")) };
    println!("planned memory (one run with generated inputs; symbolic dims {dims}others 1)");
    let planned = (|| -> Result<onyx::MemoryReport> {
        let values = crate::io::inputs(&session, &[], &a.session.dims, 0)?;
        Ok(session.run(values).context("planning run")?.memory)
    })();
    match planned {
        Ok(m) => {
            for d in &m.devices {
                println!("  {}", d.device);
                println!("    weights (resident)     {:>12}", bytes(d.weight_bytes));
                println!("    live-set bound         {:>12}", bytes(d.live_set_bound_bytes));
                println!("    without release        {:>12}", bytes(d.no_release_bytes));
                println!("    measured peak          {:>12}", bytes(d.peak_bytes));
            }
        }
        Err(e) => println!("  unavailable: {e:#}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// The op histogram's key: the op type, prefixed by its domain outside the default one.
fn op_key(domain: &str, op_type: &str) -> String {
    if domain == DEFAULT_DOMAIN || domain == "ai.onnx" {
        op_type.to_string()
    } else {
        format!("{domain}::{op_type}")
    }
}

fn collect<'g>(
    g: &'g onyx::core::graph::Graph,
    into: &mut HashMap<String, &'g onyx::core::graph::Node>,
) {
    for n in &g.nodes {
        into.entry(op_key(&n.domain, &n.op_type)).or_insert(n);
        for (_, attr) in n.attrs.iter() {
            for sub in attr.graphs() {
                collect(sub, into);
            }
        }
    }
}
