//! The kernel registry every backend keeps: `(domain, op_type)` → a builder
//! that prepares the backend's kernel for a node, or says why it cannot.
//! Written once; a backend instantiates it with its own kernel trait object
//! (`KernelRegistry<dyn CpuKernel>`, `<dyn GpuKernel>`, `<dyn CudaKernel>`).

use std::collections::HashMap;

use super::error::EpError;
use super::provider::KernelSpec;
use crate::graph::DEFAULT_DOMAIN;

/// Builds a backend's kernel `K` for a node.
pub type KernelBuilder<K> = fn(&KernelSpec<'_>) -> Result<Box<K>, EpError>;

/// A backend's builders by `(domain, op_type)`.
pub struct KernelRegistry<K: ?Sized> {
    backend: &'static str,
    builders: HashMap<(String, String), KernelBuilder<K>>,
}

impl<K: ?Sized> KernelRegistry<K> {
    /// An empty registry for `backend` (named in "no kernel" errors).
    pub fn new(backend: &'static str) -> Self {
        KernelRegistry { backend, builders: HashMap::new() }
    }

    /// Registers a builder for a default-domain op.
    pub fn register(&mut self, op_type: &str, builder: KernelBuilder<K>) {
        self.register_in(DEFAULT_DOMAIN, op_type, builder);
    }

    /// Registers a builder for an op of any domain.
    pub fn register_in(&mut self, domain: &str, op_type: &str, builder: KernelBuilder<K>) {
        self.builders.insert((domain.to_string(), op_type.to_string()), builder);
    }

    /// Whether an op has a builder.
    pub fn contains(&self, domain: &str, op_type: &str) -> bool {
        self.builders.contains_key(&(domain.to_string(), op_type.to_string()))
    }

    /// Builds the kernel for a node.
    ///
    /// # Errors
    /// [`EpError::Unsupported`] when no builder exists or the builder declines.
    pub fn build(&self, spec: &KernelSpec<'_>) -> Result<Box<K>, EpError> {
        let node = spec.node;
        let builder =
            self.builders.get(&(node.domain.clone(), node.op_type.clone())).ok_or_else(|| {
                EpError::Unsupported(format!(
                    "no {} kernel for {}::{}",
                    self.backend, node.domain, node.op_type
                ))
            })?;
        builder(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Node;
    use crate::ops::elementwise::Binary;
    use crate::ops::kinds::BinaryKind;

    trait Named {
        fn name(&self) -> &'static str;
    }

    struct Add;
    impl Named for Add {
        fn name(&self) -> &'static str {
            "add"
        }
    }

    fn node(op_type: &str) -> Node {
        Node {
            name: op_type.into(),
            op_type: op_type.into(),
            domain: DEFAULT_DOMAIN.into(),
            opset: 21,
            inputs: vec![],
            outputs: vec![],
            implicit_inputs: vec![],
            attrs: Default::default(),
        }
    }

    fn spec_for<'a>(node: &'a Node, op: &'a Binary) -> KernelSpec<'a> {
        KernelSpec { node, op, input_dtypes: &[], output_dtypes: &[], input_values: &[] }
    }

    #[test]
    fn a_registered_op_builds_and_an_unknown_one_names_the_backend() {
        let mut r = KernelRegistry::<dyn Named>::new("test");
        r.register("Add", |_| Ok(Box::new(Add)));
        let op = Binary { kind: BinaryKind::Add };
        let add = node("Add");
        assert!(r.contains(DEFAULT_DOMAIN, "Add"));
        assert_eq!(r.build(&spec_for(&add, &op)).unwrap().name(), "add");
        let sub = node("Sub");
        let err = r.build(&spec_for(&sub, &op)).err().unwrap().to_string();
        assert!(err.contains(&format!("no test kernel for {DEFAULT_DOMAIN}::Sub")), "{err}");
    }
}
