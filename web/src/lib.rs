//! Onyx in the browser: an onnxruntime-web-shaped JavaScript API.
//!
//! ```js
//! import init, { InferenceSession, Tensor } from './pkg/onyx_web.js';
//! await init();
//! const session = await InferenceSession.create(bytesOrUrl, { executionProviders: ['webgpu', 'cpu'] });
//! const out = await session.run({ input: new Tensor('float32', data, [1, 3, 224, 224]) });
//! session.memoryReport();
//! await session.release();
//! ```
//!
//! Sessions run on WebGPU through the wgpu backend (its `webgpu` backend on
//! wasm32), with the CPU backend compiled to wasm as per-node fallback, or on
//! the CPU alone where there is no adapter. Everything is asynchronous (the
//! executor and the GPU readback are `async`), so nothing blocks the page and
//! nothing needs Asyncify. Errors reach JavaScript as `Error`s whose message
//! is the whole chain (node, op, backend).

#![warn(missing_docs)]

mod error;
mod js;
mod options;
mod report;
mod session;
mod tensor;
mod types;

use wasm_bindgen::prelude::*;

pub use session::InferenceSession;
pub use tensor::Tensor;

/// Sends Rust panics to the browser console with their message and location.
#[wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
}
