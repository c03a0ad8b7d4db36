"""Onyx: a portable ONNX inference runtime whose memory is the model's peak
live set. `InferenceSession` is shaped like onnxruntime's:

    import numpy as np, onyx
    s = onyx.InferenceSession("model.onnx", providers=["cuda", "cpu"])
    (y,) = s.run(None, {"x": np.zeros((1, 3), np.float32)})
"""

from dataclasses import dataclass

import numpy as np

from ._onyx import OnyxError, Session, __version__

__all__ = ["InferenceSession", "NodeArg", "OnyxError", "get_available_providers", "__version__"]

# onnxruntime's provider names, and Onyx's own, to Onyx's devices.
_DEVICES = {
    "cpu": "cpu", "CPUExecutionProvider": "cpu",
    "cuda": "cuda", "CUDAExecutionProvider": "cuda",
    "wgpu": "wgpu", "WebGpuExecutionProvider": "wgpu",
}

# numpy dtypes by Onyx's names (bfloat16 and the float8s have none in numpy).
_NUMPY = {
    "float32": np.float32, "float64": np.float64, "float16": np.float16,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "bool": np.bool_, "complex64": np.complex64, "complex128": np.complex128,
}
_ONNX_TYPES = {name: f"tensor({ {'float32': 'float', 'float64': 'double'}.get(name, name)})"
               for name in _NUMPY}


def get_available_providers():
    """The provider names this build accepts, most capable first."""
    return ["CUDAExecutionProvider", "WebGpuExecutionProvider", "CPUExecutionProvider"]


@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime describes it: `shape` holds ints,
    symbols' names, or None."""
    name: str
    type: str
    shape: list


class InferenceSession:
    """A model compiled for the first of `providers` that opens (CPU last).

    `path_or_bytes`: a model file's path or its bytes. `providers`: names
    such as "cuda" or "CUDAExecutionProvider"; the first opens the session,
    and nodes it cannot run fall back to the CPU unless `strict`. Errors are
    `OnyxError`s carrying the whole chain (node, op, opset, backend)."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, strict=False,
                 threads=None):
        del sess_options  # accepted for onnxruntime's signature; Onyx has no such options yet
        model = bytes(path_or_bytes) if isinstance(path_or_bytes, (bytes, bytearray)) \
            else str(path_or_bytes)
        names = list(providers or ["cpu"])
        for n in names:
            if n not in _DEVICES:
                raise ValueError(f"unknown provider {n!r}: one of {sorted(_DEVICES)}")
        for at, n in enumerate(names):
            last = at == len(names) - 1
            try:
                session = Session(model, _DEVICES[n], strict, threads)
            except OnyxError:
                # The next provider, as onnxruntime falls back; the last one's error is raised.
                if last:
                    raise
                continue
            # A device that did not open gives a CPU session: try the next one first.
            if last or session.device.split(":")[0] == _DEVICES[n]:
                self._session = session
                break
        self._inputs = [NodeArg(*_arg(i)) for i in self._session.inputs()]
        self._outputs = [NodeArg(*_arg(o)) for o in self._session.outputs()]
        self.last_memory = None

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_providers(self):
        return [self._session.device]

    def run(self, output_names, input_feed, run_options=None):
        """Runs on `input_feed` (name → numpy array); returns the outputs
        named in `output_names` (all when None) as numpy arrays, in that
        order. The run's memory figures are kept in `last_memory`."""
        del run_options
        feed = []
        for name, value in input_feed.items():
            a = np.ascontiguousarray(value)
            dtype = next((k for k, t in _NUMPY.items() if a.dtype == t), None)
            if dtype is None:
                raise TypeError(f"input {name}: numpy dtype {a.dtype} is not supported")
            feed.append((name, dtype, list(a.shape), a.tobytes()))
        values, memory = self._session.run(feed)
        self.last_memory = memory
        out = {}
        for name, (dtype, shape, data) in values:
            if dtype not in _NUMPY:
                raise OnyxError(f"output {name}: {dtype} has no numpy dtype")
            out[name] = np.frombuffer(data, dtype=_NUMPY[dtype]).reshape(shape)
        names = output_names or [o.name for o in self._outputs]
        missing = [n for n in names if n not in out]
        if missing:
            raise ValueError(f"no outputs named {missing}: the model has {list(out)}")
        return [out[n] for n in names]


def _arg(info):
    name, dtype, dims = info
    return name, _ONNX_TYPES.get(dtype, f"tensor({dtype})" if dtype else "unknown"), dims
