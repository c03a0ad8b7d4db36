// Page-side helpers of the browser tests: run a node-suite case through the
// JavaScript API and compare its outputs the way the native harness does
// (numpy-style rtol/atol per dtype, NaN equals NaN, exact integers).

import init, { InferenceSession, Tensor } from '../pkg/onyx_web.js';

let ready = null;
/** Initializes the wasm module once. */
export function setup() {
  ready ??= init();
  return ready;
}

export { InferenceSession, Tensor };

async function bytes(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return new Uint8Array(await r.arrayBuffer());
}

/** The tolerance for a dtype, as `tests/src/compare.rs` picks it. */
function tolerance(type, tol) {
  if (type === 'float32' || type === 'float64') return tol;
  if (type === 'float16') return { rtol: Math.max(tol.rtol, 1e-3), atol: Math.max(tol.atol, 1e-3) };
  if (type === 'bfloat16') return { rtol: Math.max(tol.rtol, 1e-2), atol: Math.max(tol.atol, 1e-2) };
  return { rtol: 0, atol: 0 };
}

function close(x, y, t) {
  if (Number.isNaN(x) || Number.isNaN(y)) return Number.isNaN(x) && Number.isNaN(y);
  if (!Number.isFinite(x) || !Number.isFinite(y)) return x === y;
  return Math.abs(x - y) <= t.atol + t.rtol * Math.abs(x);
}

/** `null` when `actual` matches `expected`, else what differs. */
export function compare(expected, actual, tol = { rtol: 1e-3, atol: 1e-7 }) {
  if (expected.type !== actual.type) return `type ${actual.type}, expected ${expected.type}`;
  const [ed, ad] = [Array.from(expected.dims), Array.from(actual.dims)];
  if (ed.join() !== ad.join()) return `dims [${ad}], expected [${ed}]`;
  if (expected.type === 'string') {
    return JSON.stringify(expected.data) === JSON.stringify(actual.data) ? null : 'strings differ';
  }
  const t = tolerance(expected.type, tol);
  if (t.rtol === 0 && t.atol === 0) {
    // Exact types compare their raw values (BigInt for 64-bit integers).
    const [e, a] = [expected.data, actual.data];
    for (let i = 0; i < e.length; i++) {
      if (e[i] !== a[i]) return `element ${i}: ${a[i]} vs expected ${e[i]}`;
    }
    return null;
  }
  const [e, a] = [expected.toNumbers(), actual.toNumbers()];
  let bad = 0, worst = -1, worstErr = -1;
  for (let i = 0; i < e.length; i++) {
    if (close(e[i], a[i], t)) continue;
    bad++;
    const err = Number.isFinite(e[i]) && Number.isFinite(a[i]) ? Math.abs(e[i] - a[i]) : Infinity;
    if (err > worstErr) [worst, worstErr] = [i, err];
  }
  return bad ? `${bad} of ${e.length} elements differ; worst at ${worst}: ${a[worst]} vs expected ${e[worst]}` : null;
}

/**
 * Runs one node-suite case from `base` (a URL folder with model.onnx and
 * test_data_set_0/) with `inputs` and `outputs` .pb counts. Resolves to
 * `{ pass, stage, message }`; the session is released either way.
 */
export async function runCase(base, inputs, outputs, options, tol) {
  await setup();
  let session = null;
  let stage = 'load';
  try {
    const model = await bytes(`${base}/model.onnx`);
    session = await InferenceSession.create(model, options);
    stage = 'run';
    const names = new Set(session.inputNames);
    const feeds = {};
    for (let i = 0; i < inputs; i++) {
      const t = Tensor.fromProto(await bytes(`${base}/test_data_set_0/input_${i}.pb`));
      // Matched by the name the .pb carries, else by position.
      const name = names.has(t.name) ? t.name : session.inputNames[i];
      feeds[name] = t;
    }
    const got = await session.run(feeds);
    stage = 'compare';
    for (let i = 0; i < outputs; i++) {
      const expected = Tensor.fromProto(await bytes(`${base}/test_data_set_0/output_${i}.pb`));
      const name = expected.name && expected.name in got ? expected.name : session.outputNames[i];
      const diff = compare(expected, got[name], tol);
      if (diff) return { pass: false, stage, message: `${name}: ${diff}` };
    }
    return { pass: true, stage, message: '' };
  } catch (err) {
    return { pass: false, stage, message: err && err.message ? err.message : String(err) };
  } finally {
    if (session) await session.release().catch(() => {});
  }
}
