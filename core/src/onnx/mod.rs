//! ONNX protobuf decoding and the model loader.

pub mod external;
mod load;
#[rustfmt::skip]
pub mod pb;
mod tensor;
mod types;

pub use load::{
    IR_VERSIONS, load_model_bytes, load_model_file, model_from_proto, normalize_domain,
};
pub use tensor::{sparse_to_dense, tensor_from_proto, tensor_to_proto};
pub use types::type_info;
