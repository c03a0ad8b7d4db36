//! Errors as JavaScript `Error`s carrying the whole chain.

use wasm_bindgen::JsError;

/// `outer: cause: cause of cause`, like the CLI's `{:#}`.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

/// A JavaScript `Error` whose message is `context: chain of e`.
pub(crate) fn js_error(context: &str, e: &dyn std::error::Error) -> JsError {
    JsError::new(&format!("{context}: {}", chain(e)))
}
