//! The op registry: builder functions that parse a node's attributes (with the
//! spec's defaults) into a typed [`Op`], which declares shape and dtype
//! inference, in-place reuse and views. Backends downcast the typed op to read
//! its parameters, so attribute parsing happens once, here.

pub mod attention;
pub mod axes;
mod broadcast;
pub mod causal;
pub mod codes;
pub mod control;
pub mod conv;
pub mod defaults;
pub mod domains;
pub mod einsum;
pub mod elementwise;
mod fact;
pub mod fold;
pub mod generate;
pub mod indexing;
pub mod kinds;
pub mod linalg;
pub mod looping;
pub mod microsoft;
pub mod movement;
pub mod nn;
pub mod norm;
mod op;
pub mod pad;
pub mod quant;
pub mod recurrent;
pub mod reduce;
mod registry;
pub mod resize;
pub mod scatter;
pub mod select;
pub mod sequence;
pub mod shape;
pub mod signal;
pub mod spatial;
mod standard;
pub mod stats;
pub mod strings;
pub mod vision;

pub use broadcast::{broadcast_dims, broadcast_shapes};
pub use fact::{Fact, InferInputs};
pub use op::{Folding, Op, check_inputs, downcast};
pub use registry::{OpBuilder, OpRegistry};
