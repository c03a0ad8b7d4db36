//! Compilation, one pipeline per graph (subgraphs too): facts for the whole
//! graph are inferred (`passes::infer`), chains the primary provider runs
//! better fused are fused where the facts allow (`passes::fuse`), then every
//! node is placed (`place`): on the first provider with a kernel for it,
//! else as standard ops (`passes::decompose`), else on a fallback; a
//! half-precision node a provider runs only in f32 between casts
//! (`passes::widen`); explicit copies where a value crosses providers. Then
//! the release plan is made and the weights are uploaded where they are read.

use std::sync::Arc;

use super::Error;
use super::program::CompiledGraph;
use crate::ep::{ExecutionProvider, TensorArg};
use crate::graph::Graph;
use crate::ops::Fact;
use crate::passes::fuse;
use crate::passes::infer::{OuterFacts, infer};

mod options;
mod place;
mod subgraph;

pub use options::{CompileOptions, ONYX_DOMAIN, Scope, declared_fact};
use place::Pass;

/// Compiles a graph for `providers` (the first is the primary device; the
/// others are fallbacks in order). Graph inputs are expected on the primary.
///
/// On error, weights uploaded so far are freed again.
///
/// # Errors
/// [`Error`] naming the node that could not be built, inferred or prepared.
pub fn compile(
    graph: Arc<Graph>,
    outer: &Scope,
    providers: &[&dyn ExecutionProvider],
    opts: &CompileOptions<'_>,
) -> Result<CompiledGraph, Error> {
    compile_graph(graph, outer, providers, opts, None, &[])
}

/// Compiles a graph; `input_facts` (for loop bodies) stand in for the facts
/// of graph inputs whose types the model does not declare.
fn compile_graph(
    graph: Arc<Graph>,
    outer: &Scope,
    providers: &[&dyn ExecutionProvider],
    opts: &CompileOptions<'_>,
    outputs_on: Option<usize>,
    input_facts: &[Option<Fact>],
) -> Result<CompiledGraph, Error> {
    let outer_facts: OuterFacts =
        outer.iter().map(|(name, (_, f, _))| (name.clone(), f.clone())).collect();
    let mut inferred = infer(&graph, opts.registry, &outer_facts, input_facts)?;
    let fused = match (opts.fuse, providers.first()) {
        (true, Some(primary)) => fuse::all(&graph, &mut inferred, primary.fusions(), opts.registry),
        _ => None,
    };
    let graph = fused.as_ref().unwrap_or(&graph);
    let mut pass = Pass::new(graph, inferred, providers, opts);
    if let Err(e) = pass.run(outer, outputs_on) {
        // Subgraphs compiled so far hold uploaded weights.
        for step in &mut pass.steps {
            for g in step.action.subgraphs_mut() {
                let _ = g.free_weights(providers);
            }
        }
        return Err(e);
    }
    let captures = std::mem::take(&mut pass.captures);
    let mut cg = pass.finish(captures);
    match upload_weights(&mut cg, providers, opts) {
        Ok(()) => Ok(cg),
        Err(e) => {
            let _ = cg.free_weights(providers);
            Err(e)
        }
    }
}

/// Uploads every initializer that lives on a provider (shape-only constants stay on the host).
fn upload_weights(
    cg: &mut CompiledGraph,
    providers: &[&dyn ExecutionProvider],
    opts: &CompileOptions<'_>,
) -> Result<(), Error> {
    let graph = cg.graph.clone();
    for (&v, t) in &graph.initializers {
        let (Some(p), Ok(bytes)) = (cg.location[v.index()], t.bytes()) else { continue };
        let ep = providers[p];
        let provider_err = |source| Error::Provider {
            backend: ep.name(),
            action: format!("uploading weight '{}'", graph.value(v).name),
            source,
        };
        let buffer =
            ep.allocate(bytes.len() as u64, t.dtype().align() as u32).map_err(provider_err)?;
        cg.weights.push((v, p, TensorArg { buffer, dtype: t.dtype(), shape: t.shape().to_vec() }));
        ep.upload(buffer, bytes).map_err(provider_err)?;
        if let Some(cb) = opts.on_upload {
            cb(bytes.len() as u64);
        }
    }
    Ok(())
}
