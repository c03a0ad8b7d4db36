//! TypeScript declarations of the plain objects the API takes and returns,
//! appended to the generated `.d.ts`.

use wasm_bindgen::prelude::*;

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &'static str = r#"
/** Options of `InferenceSession.create`, in onnxruntime-web's spelling. */
export interface SessionOptions {
    /** Tried in order; `wasm` is a synonym of `cpu`. Default `['webgpu', 'cpu']`. */
    executionProviders?: Array<'webgpu' | 'cpu' | 'wasm' | string | { name: string }>;
    /** Release every intermediate at its last use (default true). */
    releaseDeadValues?: boolean;
    /** Files the model refers to as external data: bytes or a URL. */
    externalData?: Array<{ path: string; data: Uint8Array | ArrayBuffer | string }>;
    /** No fallback: neither to the next provider nor per node to the CPU. */
    strict?: boolean;
}

/** Options of `InferenceSession.run`. */
export interface RunOptions {
    /** Overrides the session's `releaseDeadValues` for this run. */
    releaseDeadValues?: boolean;
    /** Waits for the device after each step and records its time in the report (slower). */
    profile?: boolean;
}

/** Anything shaped like a tensor: Onyx's `Tensor` or onnxruntime-web's. */
export interface TensorLike {
    type: string;
    data: ArrayBufferView | ArrayLike<number | bigint | boolean> | string[];
    dims: readonly number[];
}

/** A model input or output, as onnxruntime-web's `inputMetadata`. */
export interface ValueMetadata {
    name: string;
    isTensor: boolean;
    type?: string;
    /** Numbers for fixed dims, names for symbolic ones, null for unknown ones. */
    shape?: Array<number | string | null>;
}

/** One point of the memory timeline, bytes. */
export interface TimelinePoint {
    /** `inputs`, a node name, or `outputs`. */
    step: string;
    /** Live with release at last use, from the plan. */
    liveBytes: number;
    /** Live with nothing released, from the plan. */
    allocatedBytes: number;
    /** Really held by the providers (null for the output hand-over). */
    measuredBytes: number | null;
    /** With `profile`: the step's wall time, device work included (null otherwise). */
    ms: number | null;
}

/** Memory figures of one device for the last run, bytes. */
export interface DeviceMemory {
    device: string;
    peakBytes: number;
    noReleaseBytes: number;
    liveSetBoundBytes: number;
    weightBytes: number;
}

/** `session.memoryReport()`: all devices together, then per device. */
export interface MemoryReport {
    peakBytes: number;
    noReleaseBytes: number;
    liveSetBoundBytes: number;
    releases: number;
    weightBytes: number;
    releaseDeadValues: boolean;
    latencyMs: number;
    devices: DeviceMemory[];
    timeline: TimelinePoint[];
}

/** `session.describe()`. */
export interface ModelDescription {
    executionProvider: 'webgpu' | 'cpu';
    adapter: { name: string; backend: string; deviceType: string; shaderF16: boolean; maxBindingBytes: number } | null;
    /** Providers tried before the one in use, with the reason. */
    skipped: string[];
    producer: string;
    opsets: Array<[string, number]>;
    inputs: ValueMetadata[];
    outputs: ValueMetadata[];
    /** `[op type, node count]`, most frequent first. */
    ops: Array<[string, number]>;
    nodes: Array<{ name: string; op: string; domain: string; device: string }>;
    devices: Array<{ device: string; kernels: number; weightBytes: number }>;
}
"#;
