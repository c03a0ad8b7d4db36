//! Planner tests on small graphs loaded from protobuf.

use std::collections::HashMap;
use std::sync::Arc;

use prost::Message;

use super::*;
use crate::exec::{CompileOptions, compile};
use crate::graph::{Graph, ValueId};
use crate::onnx::external::NoExternalData;
use crate::onnx::{load_model_bytes, pb};
use crate::ops::OpRegistry;

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> pb::NodeProto {
    pb::NodeProto {
        op_type: Some(op.into()),
        name: Some(outputs[0].into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// `c` is a bool scalar (If conditions), `s` an int64 shape, everything else float[4].
fn tensor_value(name: &str) -> pb::ValueInfoProto {
    let (elem, dims): (i32, Vec<i64>) = match name {
        "c" => (9, vec![]),
        "s" => (7, vec![1]),
        _ => (1, vec![4]),
    };
    pb::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(pb::TensorShapeProto {
                    dim: dims
                        .into_iter()
                        .map(|d| pb::tensor_shape_proto::Dimension {
                            value: Some(pb::tensor_shape_proto::dimension::Value::DimValue(d)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn load(nodes: Vec<pb::NodeProto>, inputs: &[&str], outputs: &[&str], inits: &[&str]) -> Graph {
    let init = inits
        .iter()
        .map(|n| pb::TensorProto {
            name: Some(n.to_string()),
            data_type: Some(1),
            dims: vec![4],
            float_data: vec![1.0; 4],
            ..Default::default()
        })
        .collect();
    let m = pb::ModelProto {
        ir_version: Some(8),
        opset_import: vec![pb::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(13),
        }],
        graph: Some(pb::GraphProto {
            node: nodes,
            input: inputs.iter().map(|n| tensor_value(n)).collect(),
            output: outputs.iter().map(|n| tensor_value(n)).collect(),
            initializer: init,
            ..Default::default()
        }),
        ..Default::default()
    };
    load_model_bytes(m.encode_to_vec().into(), &NoExternalData).unwrap().graph
}

/// Plans a graph through compilation (which needs a provider for kernels).
fn plan_of(g: Graph) -> (Arc<Graph>, Plan) {
    let g = Arc::new(g);
    let cpu = crate::tests_support::NullProvider::default();
    let registry = OpRegistry::standard();
    let opts = CompileOptions { allow_fallback: false, ..CompileOptions::new(&registry) };
    let mut cg = compile(g, &HashMap::new(), &[&cpu], &opts).unwrap();
    cg.free_weights(&[&cpu]).unwrap();
    (cg.graph.clone(), cg.plan.clone())
}

fn id(g: &Graph, name: &str) -> ValueId {
    g.find(name).unwrap()
}

#[test]
fn each_value_is_released_once_at_its_last_use() {
    let (g, p) = plan_of(load(
        vec![
            node("Relu", &["x"], &["a"]),
            node("Neg", &["a"], &["b"]),
            node("Add", &["a", "b"], &["y"]),
        ],
        &["x"],
        &["y"],
        &[],
    ));
    assert_eq!(p.releases, vec![vec![], vec![], vec![id(&g, "a"), id(&g, "b")]]);
    assert_eq!(p.last_use[id(&g, "a").index()], Some(2));
}

#[test]
fn guards_cover_initializers_inputs_outputs_and_sequence_elements() {
    let (g, p) = plan_of(load(
        vec![
            node("Add", &["x", "w"], &["a"]),
            node("Relu", &["a"], &["y"]),
            node("SequenceConstruct", &["a", "y"], &["s"]),
            node("SequenceLength", &["s"], &["n"]),
        ],
        &["x"],
        &["y", "n"],
        &["w"],
    ));
    assert_eq!(p.guard(id(&g, "w")), Some(Guard::Initializer));
    assert_eq!(p.guard(id(&g, "x")), Some(Guard::GraphInput));
    assert_eq!(p.guard(id(&g, "y")), Some(Guard::SequenceElement));
    assert_eq!(p.guard(id(&g, "a")), Some(Guard::SequenceElement));
    assert_eq!(p.guard(id(&g, "n")), Some(Guard::GraphOutput));
    let released: Vec<ValueId> = p.releases.iter().flatten().copied().collect();
    for v in ["w", "x", "y", "a", "n"] {
        assert!(!released.contains(&id(&g, v)), "{v} is guarded but released");
    }
    // Relu would take a's buffer in place, but a is a sequence element.
    assert!(p.in_place.iter().all(|c| c.is_empty()));
}

#[test]
fn a_subgraph_guards_the_values_it_captures() {
    let then_branch = pb::GraphProto {
        node: vec![node("Neg", &["v"], &["r"])],
        output: vec![pb::ValueInfoProto { name: Some("r".into()), ..Default::default() }],
        ..Default::default()
    };
    let mut if_node = node("If", &["c"], &["y"]);
    for name in ["then_branch", "else_branch"] {
        if_node.attribute.push(pb::AttributeProto {
            name: Some(name.into()),
            r#type: Some(pb::attribute_proto::AttributeType::Graph as i32),
            g: Some(then_branch.clone()),
            ..Default::default()
        });
    }
    let g = load(vec![node("Relu", &["x"], &["v"]), if_node], &["x", "c"], &["y"], &[]);
    // The loader records the capture as an implicit input of the If node.
    assert_eq!(g.nodes[1].implicit_inputs, vec![id(&g, "v")]);
    let crate::graph::Attribute::Graph(branch) =
        g.nodes[1].attrs.get("then_branch").unwrap().clone()
    else {
        panic!()
    };
    let (bg, bp) = plan_of_with_outer(&branch, &g);
    assert_eq!(bp.guard(id(&bg, "v")), Some(Guard::Captured));
    assert!(bp.releases.iter().flatten().all(|&v| v != id(&bg, "v")));
    assert!(bp.in_place.iter().all(|c| c.is_empty()), "Neg must not overwrite a captured value");
    // In the outer plan, v lives until the If step, which reads it implicitly.
    let (g, p) = plan_of(g);
    assert_eq!(p.last_use[id(&g, "v").index()], Some(1));
}

fn plan_of_with_outer(branch: &Graph, outer: &Graph) -> (Arc<Graph>, Plan) {
    let g = Arc::new(branch.clone());
    let cpu = crate::tests_support::NullProvider::default();
    let registry = OpRegistry::standard();
    let fact = crate::ops::Fact::known(crate::dtype::DType::F32, &[4]);
    let scope: crate::exec::Scope = outer
        .values
        .iter()
        .enumerate()
        .map(|(i, v)| (v.name.clone(), (ValueId(i as u32), fact.clone(), Some(0))))
        .collect();
    let opts = CompileOptions { allow_fallback: false, ..CompileOptions::new(&registry) };
    let cg = compile(g, &scope, &[&cpu], &opts).unwrap();
    (cg.graph.clone(), cg.plan.clone())
}

#[test]
fn in_place_needs_a_dying_unguarded_input_of_the_same_dtype() {
    let (g, p) = plan_of(load(
        vec![
            node("Relu", &["x"], &["a"]),
            node("Neg", &["a"], &["b"]),
            node("Exp", &["b"], &["c"]),
            node("Add", &["b", "c"], &["y"]),
        ],
        &["x"],
        &["y"],
        &[],
    ));
    // Relu reads a guarded input; Neg may take a (dying); Exp may not take b (read later);
    // Add may take b or c (both die there).
    assert!(p.in_place[0].is_empty());
    assert_eq!(p.in_place[1], vec![(0, id(&g, "a"))]);
    assert!(p.in_place[2].is_empty());
    assert_eq!(p.in_place[3], vec![(0, id(&g, "b")), (1, id(&g, "c"))]);
}

#[test]
fn a_view_joins_its_source_group() {
    let mut shape = node("Reshape", &["a", "s"], &["v"]);
    shape.name = Some("v".into());
    let (g, p) = plan_of(load(
        vec![node("Relu", &["x"], &["a"]), shape, node("Neg", &["v"], &["y"])],
        &["x", "s"],
        &["y"],
        &[],
    ));
    assert_eq!(p.view_group[id(&g, "v").index()], p.view_group[id(&g, "a").index()]);
    assert_eq!(p.views[1], Some(0));
}
