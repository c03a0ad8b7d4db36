//! The `onyx._onyx` extension: sessions over host bytes. `onyx/__init__.py`
//! wraps it in an `InferenceSession` shaped like onnxruntime's, turning numpy
//! arrays into `(dtype, shape, bytes)` and outputs' bytearrays back into
//! arrays, so this module needs no numpy headers and one abi3 wheel serves
//! every CPython.

use bytes::Bytes;
use onyx::{DType, Session, Tensor, Value};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict};

pyo3::create_exception!(_onyx, OnyxError, pyo3::exceptions::PyRuntimeError);

/// An Onyx error as a Python exception carrying the whole chain.
fn err(e: onyx::Error) -> PyErr {
    OnyxError::new_err(onyx::error_chain(&e))
}

/// A tensor as Python gets it: dtype name, shape, raw little-endian bytes
/// (a bytearray, so the numpy array over it is writable, as onnxruntime's are).
type HostTensor<'py> = (String, Vec<usize>, Bound<'py, PyByteArray>);

/// What a run gives Python: the outputs by name, and the memory figures.
type Ran<'py> = (Vec<(String, HostTensor<'py>)>, Bound<'py, PyDict>);

/// A compiled model on one device.
#[pyclass(name = "Session", module = "onyx._onyx")]
struct PySession {
    inner: Session,
}

#[pymethods]
impl PySession {
    /// Loads `model` (a path, or the model's bytes) onto `device` (`cpu`,
    /// `wgpu`, `cuda`); `strict` refuses the CPU fallback.
    #[new]
    #[pyo3(signature = (model, device="cpu", strict=false, threads=None))]
    fn new(
        py: Python<'_>,
        model: &Bound<'_, PyAny>,
        device: &str,
        strict: bool,
        threads: Option<usize>,
    ) -> PyResult<Self> {
        let mut b = Session::builder().with_device(device).with_strict(strict);
        if let Some(t) = threads {
            b = b.with_threads(t);
        }
        let inner = if let Ok(bytes) = model.downcast::<PyBytes>() {
            let data = bytes.as_bytes().to_vec();
            py.allow_threads(|| b.commit_from_bytes(data, None))
        } else {
            let path: std::path::PathBuf = model.extract()?;
            py.allow_threads(|| b.commit_from_file(path))
        }
        .map_err(err)?;
        Ok(PySession { inner })
    }

    /// The device the session runs on.
    #[getter]
    fn device(&self) -> &str {
        self.inner.device()
    }

    /// `(name, dtype name or None, dims with None or a name for symbolic ones)` per input.
    fn inputs(&self, py: Python<'_>) -> PyResult<Vec<PyObject>> {
        io_infos(py, self.inner.inputs())
    }

    /// The same for the outputs.
    fn outputs(&self, py: Python<'_>) -> PyResult<Vec<PyObject>> {
        io_infos(py, self.inner.outputs())
    }

    /// Runs on `feed` (name → `(dtype, shape, bytes)`); returns every output
    /// by name as the same triple, and the run's memory figures.
    fn run<'py>(
        &self,
        py: Python<'py>,
        feed: Vec<(String, String, Vec<usize>, Vec<u8>)>,
    ) -> PyResult<Ran<'py>> {
        let mut inputs = Vec::with_capacity(feed.len());
        for (name, dtype, shape, data) in feed {
            let d = DType::from_name(&dtype)
                .ok_or_else(|| PyValueError::new_err(format!("input {name}: no dtype {dtype}")))?;
            let t = Tensor::from_bytes(d, shape, Bytes::from(data))
                .map_err(|e| PyValueError::new_err(format!("input {name}: {e}")))?;
            inputs.push((name, Value::Tensor(t)));
        }
        let out = py.allow_threads(|| self.inner.run(inputs)).map_err(err)?;
        let mut values = Vec::with_capacity(out.values.len());
        for (name, v) in &out.values {
            let Some(t) = v.as_tensor() else {
                return Err(OnyxError::new_err(format!(
                    "output {name} is a sequence or an empty optional, which the Python \
                     package does not return yet"
                )));
            };
            let bytes = t.bytes().map_err(|e| OnyxError::new_err(format!("output {name}: {e}")))?;
            let host =
                (t.dtype().name().to_string(), t.shape().to_vec(), PyByteArray::new(py, bytes));
            values.push((name.clone(), host));
        }
        let m = &out.memory;
        let memory = PyDict::new(py);
        memory.set_item("peak_bytes", m.peak_bytes)?;
        memory.set_item("live_set_bound_bytes", m.live_set_bound_bytes)?;
        memory.set_item("no_release_bytes", m.no_release_bytes)?;
        memory.set_item("weight_bytes", m.weight_bytes)?;
        memory.set_item("releases", m.releases)?;
        memory.set_item("latency_ms", out.latency.as_secs_f64() * 1e3)?;
        Ok((values, memory))
    }
}

fn io_infos(py: Python<'_>, infos: Vec<onyx::IoInfo>) -> PyResult<Vec<PyObject>> {
    infos
        .into_iter()
        .map(|i| {
            let dtype = i.dtype().map(|d| d.name().to_string());
            let dims: Option<Vec<PyObject>> = i
                .shape()
                .map(|s| s.0.iter().map(|d| dim(py, d)).collect::<PyResult<_>>())
                .transpose()?;
            Ok((i.name, dtype, dims).into_pyobject(py)?.into_any().unbind())
        })
        .collect()
}

/// A dim as onnxruntime's `NodeArg.shape` gives it: an int, a symbol's
/// name, or None.
fn dim(py: Python<'_>, d: &onyx::core::shape::Dim) -> PyResult<PyObject> {
    use onyx::core::shape::Dim;
    Ok(match d {
        Dim::Known(v) => v.into_pyobject(py)?.into_any().unbind(),
        Dim::Sym(name) => name.as_ref().into_pyobject(py)?.into_any().unbind(),
        Dim::Unknown => py.None(),
    })
}

/// The `onyx._onyx` module.
#[pymodule]
fn _onyx(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySession>()?;
    m.add("OnyxError", m.py().get_type::<OnyxError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
