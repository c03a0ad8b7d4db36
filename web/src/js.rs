//! Small readers of JavaScript values shared by the API's modules.

use js_sys::{Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};

/// `obj[key]`, or `undefined` where `obj` has no properties to read.
pub(crate) fn get(obj: &JsValue, key: &str) -> JsValue {
    Reflect::get(obj, &key.into()).unwrap_or(JsValue::UNDEFINED)
}

/// A copy of the bytes an `ArrayBuffer` view (a typed array, a `DataView`) shows.
pub(crate) fn view_bytes(view: &JsValue) -> Vec<u8> {
    let offset = get(view, "byteOffset").as_f64().unwrap_or(0.0) as u32;
    let len = get(view, "byteLength").as_f64().unwrap_or(0.0) as u32;
    Uint8Array::new_with_byte_offset_and_length(&get(view, "buffer").unchecked_into(), offset, len)
        .to_vec()
}
