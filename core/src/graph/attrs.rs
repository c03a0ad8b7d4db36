//! Typed accessors of node attributes, which carry the spec's defaults.

use std::sync::Arc;

use super::ir::{Attribute, Attributes, Graph};
use crate::error::OpError;
use crate::tensor::Tensor;

impl Attribute {
    /// The subgraphs held by this attribute (none for non-graph attributes).
    pub fn graphs(&self) -> Vec<&Graph> {
        match self {
            Attribute::Graph(g) => vec![g],
            Attribute::Graphs(gs) => gs.iter().map(|g| &**g).collect(),
            _ => vec![],
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Attribute::Float(_) => "float",
            Attribute::Int(_) => "int",
            Attribute::String(_) => "string",
            Attribute::Tensor(_) => "tensor",
            Attribute::Graph(_) => "graph",
            Attribute::Type(_) => "type",
            Attribute::Floats(_) => "floats",
            Attribute::Ints(_) => "ints",
            Attribute::Strings(_) => "strings",
            Attribute::Tensors(_) => "tensors",
            Attribute::Graphs(_) => "graphs",
            Attribute::Types(_) => "types",
        }
    }
}

fn wrong(name: &str, want: &str, got: &Attribute) -> OpError {
    OpError::BadAttribute {
        name: name.into(),
        reason: format!("expected {want}, found {}", got.kind()),
    }
}

macro_rules! getter {
    ($(#[$doc:meta])* $opt:ident, $req:ident, $or:ident, $variant:ident, $t:ty, $want:literal) => {
        $(#[$doc])*
        ///
        /// # Errors
        /// [`OpError::BadAttribute`] when the attribute has another type.
        pub fn $opt(&self, name: &str) -> Result<Option<$t>, OpError> {
            match self.get(name) {
                None => Ok(None),
                Some(Attribute::$variant(v)) => Ok(Some(v.clone())),
                Some(other) => Err(wrong(name, $want, other)),
            }
        }

        /// Like the optional getter, but the attribute must be present.
        ///
        /// # Errors
        /// [`OpError::MissingAttribute`] or [`OpError::BadAttribute`].
        pub fn $req(&self, name: &str) -> Result<$t, OpError> {
            self.$opt(name)?.ok_or_else(|| OpError::MissingAttribute(name.into()))
        }

        /// Like the optional getter, with the spec's default when absent.
        ///
        /// # Errors
        /// [`OpError::BadAttribute`] when the attribute has another type.
        pub fn $or(&self, name: &str, default: $t) -> Result<$t, OpError> {
            Ok(self.$opt(name)?.unwrap_or(default))
        }
    };
}

impl Attributes {
    /// The raw attribute.
    pub fn get(&self, name: &str) -> Option<&Attribute> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// Whether the attribute is present.
    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Iterates over `(name, value)` pairs.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Attribute)> {
        self.0.iter().map(|(n, a)| (n.as_str(), a))
    }

    getter!(
        /// An `int` attribute.
        int, req_int, int_or, Int, i64, "int"
    );
    getter!(
        /// A `float` attribute.
        float, req_float, float_or, Float, f32, "float"
    );
    getter!(
        /// A `string` attribute.
        string, req_string, string_or, String, String, "string"
    );
    getter!(
        /// An `ints` attribute.
        ints, req_ints, ints_or, Ints, Vec<i64>, "ints"
    );
    getter!(
        /// A `floats` attribute.
        floats, req_floats, floats_or, Floats, Vec<f32>, "floats"
    );
    getter!(
        /// A `strings` attribute.
        strings, req_strings, strings_or, Strings, Vec<String>, "strings"
    );
    getter!(
        /// A `tensor` attribute.
        tensor, req_tensor, tensor_or, Tensor, Tensor, "tensor"
    );
    getter!(
        /// A `graph` attribute.
        graph, req_graph, graph_or, Graph, Arc<Graph>, "graph"
    );

    /// A boolean flag stored as an int attribute (`0` or `1`).
    ///
    /// # Errors
    /// [`OpError::BadAttribute`] when the attribute has another type.
    pub fn flag_or(&self, name: &str, default: bool) -> Result<bool, OpError> {
        Ok(self.int(name)?.map(|v| v != 0).unwrap_or(default))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_getters_apply_defaults_and_reject_wrong_types() {
        let a = Attributes(vec![
            ("axis".into(), Attribute::Int(2)),
            ("alpha".into(), Attribute::Float(0.5)),
        ]);
        assert_eq!(a.int_or("axis", -1).unwrap(), 2);
        assert_eq!(a.int_or("missing", -1).unwrap(), -1);
        assert_eq!(a.float_or("alpha", 1.0).unwrap(), 0.5);
        assert!(a.int("alpha").is_err());
        assert!(matches!(a.req_ints("perm"), Err(OpError::MissingAttribute(_))));
    }
}
