//! ModelProto → [`Model`]: names resolved to ids, constants folded to initializers,
//! subgraphs loaded with their outer-scope references.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;

use super::external::{DirExternalData, ExternalData, map_file};
use super::pb;
use super::pb::attribute_proto::AttributeType as AT;
use super::tensor::{sparse_to_dense, tensor_from_proto};
use super::types::type_info;
use crate::error::{LoadError, NodeDesc};
use crate::graph::{Attribute, Attributes, DEFAULT_DOMAIN, Graph, Model, Node, ValueId, ValueInfo};
use crate::tensor::Tensor;

/// The IR versions Onyx reads: 3 (opset imports) through 14 (what onnx 1.23 writes).
pub const IR_VERSIONS: std::ops::RangeInclusive<i64> = 3..=14;

/// Loads a model file, memory-mapping it and resolving external data next to it.
///
/// # Errors
/// [`LoadError`] describing what is wrong with the file.
pub fn load_model_file(path: &Path) -> Result<Model, LoadError> {
    let io = |source| LoadError::Io { path: path.display().to_string(), source };
    let bytes = map_file(path).map_err(io)?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let dir = if dir.as_os_str().is_empty() { ".".into() } else { dir };
    load_model_bytes(bytes, &DirExternalData::new(dir))
}

/// Loads a model from bytes; external data comes from `external`.
///
/// # Errors
/// [`LoadError`] describing what is wrong with the model.
pub fn load_model_bytes(bytes: Bytes, external: &dyn ExternalData) -> Result<Model, LoadError> {
    if bytes.is_empty() {
        return Err(LoadError::Empty);
    }
    let proto = pb::ModelProto::decode(bytes)?;
    if proto.ir_version.is_none() && proto.graph.is_none() {
        return Err(LoadError::NotAModel);
    }
    model_from_proto(&proto, external)
}

/// Converts a decoded ModelProto.
///
/// # Errors
/// [`LoadError`] describing what is wrong with the model.
pub fn model_from_proto(
    proto: &pb::ModelProto,
    external: &dyn ExternalData,
) -> Result<Model, LoadError> {
    let ir_version = proto.ir_version.unwrap_or(0);
    if !IR_VERSIONS.contains(&ir_version) {
        return Err(LoadError::IrVersion(ir_version));
    }
    let mut opsets = BTreeMap::new();
    for o in &proto.opset_import {
        opsets.insert(normalize_domain(o.domain.as_deref().unwrap_or("")), o.version.unwrap_or(1));
    }
    let graph = proto.graph.as_ref().ok_or(LoadError::NoGraph)?;
    let cx = Ctx { opsets: &opsets, external };
    let graph = cx.graph(graph, &|_| false)?;
    let producer = format!(
        "{} {}",
        proto.producer_name.as_deref().unwrap_or(""),
        proto.producer_version.as_deref().unwrap_or("")
    )
    .trim()
    .to_string();
    Ok(Model { ir_version, opsets, producer, graph })
}

/// The domain as Onyx spells it: the empty default domain becomes `ai.onnx`.
pub fn normalize_domain(domain: &str) -> String {
    if domain.is_empty() { DEFAULT_DOMAIN.to_string() } else { domain.to_string() }
}

struct Ctx<'a> {
    opsets: &'a BTreeMap<String, i64>,
    external: &'a dyn ExternalData,
}

/// The graph under construction: values by name, in SSA form.
struct Builder {
    graph: Graph,
    names: HashMap<String, ValueId>,
}

impl Builder {
    fn define(&mut self, name: &str) -> Result<ValueId, LoadError> {
        if self.names.contains_key(name) {
            return Err(LoadError::DuplicateValue(name.into()));
        }
        let id = ValueId(self.graph.values.len() as u32);
        self.graph.values.push(ValueInfo { name: name.into(), declared: None });
        self.names.insert(name.into(), id);
        Ok(id)
    }

    /// Resolves a name locally, or as a capture from an enclosing graph.
    fn resolve(&mut self, name: &str, outer: &dyn Fn(&str) -> bool) -> Option<ValueId> {
        if let Some(&id) = self.names.get(name) {
            return Some(id);
        }
        if !outer(name) {
            return None;
        }
        let id = self.define(name).ok()?;
        self.graph.captures.push((id, name.into()));
        Some(id)
    }
}

impl Ctx<'_> {
    fn graph(&self, g: &pb::GraphProto, outer: &dyn Fn(&str) -> bool) -> Result<Graph, LoadError> {
        let mut b = Builder {
            graph: Graph { name: g.name.clone().unwrap_or_default(), ..Graph::default() },
            names: HashMap::new(),
        };
        for t in &g.initializer {
            let id = b.define(t.name.as_deref().unwrap_or(""))?;
            b.graph.initializers.insert(id, tensor_from_proto(t, self.external)?);
        }
        for s in &g.sparse_initializer {
            let name = s.values.as_ref().and_then(|v| v.name.clone()).unwrap_or_default();
            let id = b.define(&name)?;
            b.graph.initializers.insert(id, sparse_to_dense(s, self.external)?);
        }
        for vi in &g.input {
            let name = vi.name.as_deref().unwrap_or("");
            let declared = vi.r#type.as_ref().and_then(type_info);
            // IR >= 4 lists initializers among inputs as overridable defaults; Onyx
            // treats them as constants, so they are not inputs a caller must feed.
            let id = match b.names.get(name) {
                Some(&id) if b.graph.initializers.contains_key(&id) => id,
                _ => {
                    let id = b.define(name)?;
                    b.graph.inputs.push(id);
                    id
                }
            };
            b.graph.values[id.index()].declared = declared;
        }
        // Every node output is defined before any input is resolved, so node order in
        // the file does not matter and subgraphs may refer to any outer value.
        for n in &g.node {
            for o in n.output.iter().filter(|o| !o.is_empty()) {
                b.define(o)?;
            }
        }
        for (index, n) in g.node.iter().enumerate() {
            self.node(&mut b, n, index, outer)?;
        }
        for vi in &g.output {
            let name = vi.name.as_deref().unwrap_or("");
            let id =
                b.resolve(name, outer).ok_or_else(|| LoadError::UndefinedOutput(name.into()))?;
            b.graph.outputs.push(id);
            if let Some(t) = vi.r#type.as_ref().and_then(type_info) {
                b.graph.values[id.index()].declared = Some(t);
            }
        }
        for vi in &g.value_info {
            if let Some(&id) = b.names.get(vi.name.as_deref().unwrap_or("")) {
                let v = &mut b.graph.values[id.index()];
                if v.declared.is_none() {
                    v.declared = vi.r#type.as_ref().and_then(type_info);
                }
            }
        }
        Ok(b.graph)
    }

    fn node(
        &self,
        b: &mut Builder,
        n: &pb::NodeProto,
        index: usize,
        outer: &dyn Fn(&str) -> bool,
    ) -> Result<(), LoadError> {
        let op_type = n.op_type.clone().unwrap_or_default();
        let domain = normalize_domain(n.domain.as_deref().unwrap_or(""));
        let name = match n.name.as_deref() {
            Some(s) if !s.is_empty() => s.to_string(),
            _ => format!("{op_type}_{index}"),
        };
        let opset = match self.opsets.get(&domain) {
            Some(&v) => v,
            None if domain == DEFAULT_DOMAIN => {
                return Err(LoadError::MissingOpset { node: name, domain });
            }
            None => {
                log::warn!(
                    "node '{name}' uses domain '{domain}' without an opset import; assuming 1"
                );
                1
            }
        };
        let desc = Box::new(NodeDesc {
            name: name.clone(),
            op_type: op_type.clone(),
            domain: domain.clone(),
            opset,
        });

        let mut inputs = Vec::with_capacity(n.input.len());
        for (i, input) in n.input.iter().enumerate() {
            if input.is_empty() {
                inputs.push(None);
                continue;
            }
            let id = b.resolve(input, outer).ok_or_else(|| LoadError::UndefinedInput {
                node: desc.clone(),
                index: i,
                name: input.clone(),
            })?;
            inputs.push(Some(id));
        }
        let outputs: Vec<Option<ValueId>> = n
            .output
            .iter()
            .map(|o| if o.is_empty() { None } else { b.names.get(o).copied() })
            .collect();

        let mut attrs = Vec::with_capacity(n.attribute.len());
        let mut implicit = Vec::new();
        for a in &n.attribute {
            let attr_name = a.name.clone().unwrap_or_default();
            let names = &b.names;
            let scope = |s: &str| names.contains_key(s) || outer(s);
            let value = self.attribute(a, &scope).map_err(|e| match e {
                AttrError::Subgraph(e) => LoadError::Subgraph {
                    node: desc.clone(),
                    attribute: attr_name.clone(),
                    source: Box::new(e),
                },
                AttrError::Value(e) => LoadError::Attribute {
                    node: desc.clone(),
                    attribute: attr_name.clone(),
                    source: Box::new(e),
                },
            })?;
            for g in value.graphs() {
                for (_, outer_name) in &g.captures {
                    let id = b.resolve(outer_name, outer).ok_or_else(|| {
                        LoadError::Invalid(format!("subgraph capture '{outer_name}' vanished"))
                    })?;
                    if !implicit.contains(&id) {
                        implicit.push(id);
                    }
                }
            }
            attrs.push((attr_name, value));
        }
        let attrs = Attributes(attrs);

        if op_type == "Constant" && domain == DEFAULT_DOMAIN {
            let out =
                outputs.first().copied().flatten().ok_or_else(|| {
                    LoadError::Invalid(format!("{desc}: Constant without an output"))
                })?;
            let value = constant_value(&attrs).map_err(|reason| LoadError::Attribute {
                node: desc.clone(),
                attribute: "value".into(),
                source: Box::new(LoadError::Invalid(reason)),
            })?;
            b.graph.initializers.insert(out, value);
            b.graph.folded_constants += 1;
            return Ok(());
        }
        b.graph.nodes.push(Node {
            name,
            op_type,
            domain,
            opset,
            inputs,
            outputs,
            implicit_inputs: implicit,
            attrs,
        });
        Ok(())
    }

    /// Converts one attribute; subgraph failures are told apart so the caller
    /// can give them the subgraph context.
    fn attribute(
        &self,
        a: &pb::AttributeProto,
        scope: &dyn Fn(&str) -> bool,
    ) -> Result<Attribute, AttrError> {
        if a.ref_attr_name.is_some() {
            return Err(LoadError::Invalid(
                "attribute references (ref_attr_name) are only valid inside functions".into(),
            )
            .into());
        }
        let string = |s: &[u8]| String::from_utf8_lossy(s).into_owned();
        let kind = match a.r#type {
            Some(t) => AT::try_from(t).unwrap_or(AT::Undefined),
            None => AT::Undefined,
        };
        let kind = if kind == AT::Undefined { guess_kind(a) } else { kind };
        Ok(match kind {
            AT::Float => Attribute::Float(a.f.unwrap_or_default()),
            AT::Int => Attribute::Int(a.i.unwrap_or_default()),
            AT::String => Attribute::String(string(a.s.as_deref().unwrap_or_default())),
            AT::Tensor => Attribute::Tensor(tensor_from_proto(
                a.t.as_ref()
                    .ok_or_else(|| LoadError::Invalid("tensor attribute is empty".into()))?,
                self.external,
            )?),
            AT::SparseTensor => Attribute::Tensor(sparse_to_dense(
                a.sparse_tensor
                    .as_ref()
                    .ok_or_else(|| LoadError::Invalid("sparse tensor attribute is empty".into()))?,
                self.external,
            )?),
            AT::Graph => {
                let g = a.g.as_ref().ok_or_else(|| LoadError::Invalid("graph is empty".into()))?;
                Attribute::Graph(Arc::new(self.graph(g, scope).map_err(AttrError::Subgraph)?))
            }
            AT::TypeProto => Attribute::Type(
                a.tp.as_ref()
                    .and_then(type_info)
                    .ok_or_else(|| LoadError::Invalid("type attribute is empty".into()))?,
            ),
            AT::Floats => Attribute::Floats(a.floats.clone()),
            AT::Ints => Attribute::Ints(a.ints.clone()),
            AT::Strings => Attribute::Strings(a.strings.iter().map(|s| string(s)).collect()),
            AT::Tensors => Attribute::Tensors(
                a.tensors
                    .iter()
                    .map(|t| tensor_from_proto(t, self.external))
                    .collect::<Result<_, _>>()?,
            ),
            AT::SparseTensors => Attribute::Tensors(
                a.sparse_tensors
                    .iter()
                    .map(|t| sparse_to_dense(t, self.external))
                    .collect::<Result<_, _>>()?,
            ),
            AT::Graphs => {
                let mut gs = Vec::with_capacity(a.graphs.len());
                for g in &a.graphs {
                    gs.push(Arc::new(self.graph(g, scope).map_err(AttrError::Subgraph)?));
                }
                Attribute::Graphs(gs)
            }
            AT::TypeProtos => {
                Attribute::Types(a.type_protos.iter().filter_map(type_info).collect())
            }
            AT::Undefined => return Err(LoadError::Invalid("attribute has no value".into()).into()),
        })
    }
}

/// Why an attribute could not be converted.
enum AttrError {
    /// The value itself is malformed.
    Value(LoadError),
    /// A subgraph inside it failed to load.
    Subgraph(LoadError),
}

impl From<LoadError> for AttrError {
    fn from(e: LoadError) -> Self {
        AttrError::Value(e)
    }
}

/// Old models omit `AttributeProto.type`; infer it from the populated field.
fn guess_kind(a: &pb::AttributeProto) -> AT {
    if a.f.is_some() {
        AT::Float
    } else if a.i.is_some() {
        AT::Int
    } else if a.s.is_some() {
        AT::String
    } else if a.t.is_some() {
        AT::Tensor
    } else if a.g.is_some() {
        AT::Graph
    } else if a.sparse_tensor.is_some() {
        AT::SparseTensor
    } else if a.tp.is_some() {
        AT::TypeProto
    } else if !a.floats.is_empty() {
        AT::Floats
    } else if !a.ints.is_empty() {
        AT::Ints
    } else if !a.strings.is_empty() {
        AT::Strings
    } else if !a.tensors.is_empty() {
        AT::Tensors
    } else if !a.graphs.is_empty() {
        AT::Graphs
    } else {
        AT::Undefined
    }
}

/// The tensor a `Constant` node produces, from whichever `value*` attribute it carries.
fn constant_value(attrs: &Attributes) -> Result<Tensor, String> {
    let (name, attr) = match attrs.0.as_slice() {
        [(n, a)] => (n.as_str(), a),
        [] => return Err("Constant has no value attribute".into()),
        _ => return Err("Constant must have exactly one value attribute".into()),
    };
    let t = match (name, attr) {
        ("value" | "sparse_value", Attribute::Tensor(t)) => t.clone(),
        ("value_float", Attribute::Float(f)) => Tensor::scalar(*f),
        ("value_floats", Attribute::Floats(f)) => {
            Tensor::from_vec(vec![f.len()], f.clone()).map_err(|e| e.to_string())?
        }
        ("value_int", Attribute::Int(i)) => Tensor::scalar(*i),
        ("value_ints", Attribute::Ints(i)) => {
            Tensor::from_vec(vec![i.len()], i.clone()).map_err(|e| e.to_string())?
        }
        ("value_string", Attribute::String(s)) => {
            Tensor::from_strings(vec![], vec![s.clone()]).map_err(|e| e.to_string())?
        }
        ("value_strings", Attribute::Strings(s)) => {
            Tensor::from_strings(vec![s.len()], s.clone()).map_err(|e| e.to_string())?
        }
        (n, a) => return Err(format!("unsupported Constant attribute '{n}' ({a:?})")),
    };
    Ok(t)
}
