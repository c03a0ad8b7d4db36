// The JavaScript API's contract, checked in the page: metadata, errors as
// `Error`s carrying the chain, nothing leaked on an error path, duck-typed
// feeds, one run at a time, release, external data, per-node fallback, and the
// CPU fallback when the browser has no WebGPU.

import { join } from 'node:path';

// The page functions below are serialized by playwright: each is self-contained.

/** Runs in the page: the contract on one WebGPU session of the bundled model. */
async function sessionContract() {
  const h = await import('/tests/harness.js');
  await h.setup();
  const { InferenceSession, Tensor } = h;
  const errorOf = async (f) => {
    try { await f(); return null; } catch (e) { return { isError: e instanceof Error, message: String(e && e.message) }; }
  };
  const r = {};
  r.malformed = await errorOf(() => InferenceSession.create(new Uint8Array([8, 1, 18, 3, 1, 2])));
  r.badProvider = await errorOf(() => InferenceSession.create('/www/models/tiny_cnn.onnx', { executionProviders: ['webnn'] }));
  r.notFound = await errorOf(() => InferenceSession.create('/www/models/missing.onnx'));
  const s = await InferenceSession.create('/www/models/tiny_cnn.onnx', { executionProviders: ['webgpu'] });
  r.ep = s.executionProvider;
  r.inputNames = s.inputNames;
  r.outputNames = s.outputNames;
  r.inputMetadata = s.inputMetadata;
  r.before = s.memoryReport();
  const base = JSON.stringify(s.bytesInUse());
  const feeds = s.generateInputs({}, 0);
  const good = await s.run(feeds);
  const data = feeds.input.data;
  r.missing = await errorOf(() => s.run({}));
  r.unknown = await errorOf(() => s.run({ input: feeds.input, bogus: feeds.input }));
  r.wrongShape = await errorOf(() => s.run({ input: new Tensor('float32', new Float32Array(2 * 64 * 64), [1, 2, 64, 64]) }));
  const add = await InferenceSession.create('/scratch/broadcast_add.onnx', { executionProviders: ['webgpu'] });
  const addBase = JSON.stringify(add.bytesInUse());
  r.nodeError = await errorOf(() => add.run({ a: new Tensor('float32', new Float32Array(3), [3]), b: new Tensor('float32', new Float32Array(4), [4]) }));
  r.nodeErrorInUse = JSON.stringify(add.bytesInUse()) === addBase;
  await add.release();
  r.afterErrorInUse = JSON.stringify(s.bytesInUse()) === base;
  r.shortData = await errorOf(() => s.run({ input: { type: 'float32', data: new Float32Array(5), dims: [1, 3, 64, 64] } }));
  r.badType = await errorOf(() => new Tensor('float31', new Float32Array(2), [2]));
  const plain = await s.run({ input: { type: 'float32', data, dims: [1, 3, 64, 64] } });
  r.duckTyped = Array.from(plain.probabilities.data).join() === Array.from(good.probabilities.data).join();
  const first = s.run(feeds);
  r.concurrent = await errorOf(() => s.run(feeds));
  r.releaseWhileRunning = await errorOf(() => s.release());
  await first;
  r.stillUsable = (await s.run(feeds)).probabilities.dims.join();
  r.afterRunsInUse = JSON.stringify(s.bytesInUse()) === base;
  r.weightsHeld = s.bytesInUse();
  r.report = s.memoryReport();
  r.release = await errorOf(() => s.release());
  r.afterRelease = await errorOf(() => s.run(feeds));
  r.releaseTwice = await errorOf(() => s.release());
  return r;
}

/** Runs in the page: external data from a URL and from bytes, and bad paths. */
async function externalData() {
  const h = await import('/tests/harness.js');
  await h.setup();
  const { InferenceSession } = h;
  const errorOf = async (f) => {
    try { await f(); return null; } catch (e) { return { isError: e instanceof Error, message: String(e && e.message) }; }
  };
  const cpu = { executionProviders: ['cpu'] };
  const inline = await InferenceSession.create('/www/models/tiny_cnn.onnx', cpu);
  const feeds = inline.generateInputs({}, 3);
  const want = Array.from((await inline.run(feeds)).probabilities.data).join();
  const r = {};
  const path = 'tiny_cnn_external.onnx.data';
  const byUrl = await InferenceSession.create('/scratch/tiny_cnn_external.onnx', { ...cpu, externalData: [{ path, data: `/scratch/${path}` }] });
  r.byUrl = Array.from((await byUrl.run(feeds)).probabilities.data).join() === want;
  const bytes = new Uint8Array(await (await fetch(`/scratch/${path}`)).arrayBuffer());
  const byBytes = await InferenceSession.create('/scratch/tiny_cnn_external.onnx', { executionProviders: ['webgpu'], externalData: [{ path, data: bytes }] });
  const gpu = Array.from((await byBytes.run(feeds)).probabilities.data);
  const cpuValues = want.split(',').map(Number);
  r.byBytesOnWebgpu = gpu.every((v, i) => Math.abs(v - cpuValues[i]) <= 1e-4 + 1e-3 * Math.abs(cpuValues[i]));
  r.missingFile = await errorOf(() => InferenceSession.create('/scratch/tiny_cnn_external.onnx', cpu));
  r.escaping = await errorOf(() => InferenceSession.create('/scratch/tiny_cnn_external.onnx', { ...cpu, externalData: [{ path: '../../etc/passwd', data: bytes }] }));
  for (const s of [inline, byUrl, byBytes]) await s.release();
  return r;
}

/** Runs in the page: a model with a node WebGPU cannot run. */
async function perNodeFallback() {
  const h = await import('/tests/harness.js');
  await h.setup();
  const { InferenceSession } = h;
  const errorOf = async (f) => {
    try { await f(); return null; } catch (e) { return { isError: e instanceof Error, message: String(e && e.message) }; }
  };
  const s = await InferenceSession.create('/scratch/fallback_gru.onnx', { executionProviders: ['webgpu'] });
  const d = s.describe();
  const out = await s.run(s.generateInputs({}, 0));
  const r = {
    nodes: d.nodes.map((n) => [n.name, n.device]),
    outputs: Object.fromEntries(Object.entries(out).map(([k, t]) => [k, { dims: Array.from(t.dims), data: Array.from(t.toNumbers()) }])),
    devices: s.memoryReport().devices.map((x) => x.device),
  };
  await s.release();
  r.strict = await errorOf(() => InferenceSession.create('/scratch/fallback_gru.onnx', { executionProviders: ['webgpu'], strict: true }));
  return r;
}

/** Runs in the page (where `navigator.gpu` is hidden). */
async function noWebgpu() {
  const h = await import('/tests/harness.js');
  await h.setup();
  const { InferenceSession } = h;
  const errorOf = async (f) => {
    try { await f(); return null; } catch (e) { return { isError: e instanceof Error, message: String(e && e.message) }; }
  };
  const s = await InferenceSession.create('/www/models/tiny_cnn.onnx');
  const r = { ep: s.executionProvider, skipped: s.describe().skipped };
  r.ran = (await s.run(s.generateInputs({}, 0))).probabilities.dims.join();
  await s.release();
  r.strict = await errorOf(() => InferenceSession.create('/www/models/tiny_cnn.onnx', { executionProviders: ['webgpu', 'cpu'], strict: true }));
  return r;
}

const has = (e, ...parts) => e && e.isError && parts.every((p) => e.message.includes(p));
const show = (x) => JSON.stringify(x);

export async function apiTests(browser, page, url, check, { nativeOutputs, compareOutputs, scratch }) {
  await page.goto(`${url}/tests/blank.html`);
  const c = await page.evaluate(sessionContract);
  check('api: a malformed model rejects with an Error naming the load', has(c.malformed, 'cannot load model'), show(c.malformed));
  check('api: an unknown execution provider list rejects with an Error', has(c.badProvider, 'no usable execution provider'), show(c.badProvider));
  check('api: a model URL that is not found rejects with the HTTP status', has(c.notFound, 'fetching the model', '404'), show(c.notFound));
  check('api: the session opens on webgpu', c.ep === 'webgpu', c.ep);
  check('api: input and output names are the model\'s', show(c.inputNames) === '["input"]' && show(c.outputNames) === '["probabilities"]', show([c.inputNames, c.outputNames]));
  check('api: inputMetadata has onnxruntime-web\'s shape with symbolic dims as names', show(c.inputMetadata) === show([{ name: 'input', isTensor: true, type: 'float32', shape: ['N', 3, 64, 64] }]), show(c.inputMetadata));
  check('api: memoryReport is null before the first run', c.before === null, show(c.before));
  check('api: a missing input throws an Error naming it', has(c.missing, "input 'input'", 'not provided'), show(c.missing));
  check('api: an unknown input throws an Error naming it', has(c.unknown, "'bogus'", 'no such input'), show(c.unknown));
  check('api: a shape against the declared one rejects naming the input and backend', has(c.wrongShape, "input 'input'", 'expected shape', 'wgpu'), show(c.wrongShape));
  check('api: a failing node rejects with the node, op and backend in the chain', has(c.nodeError, 'add_ab', 'Add', 'wgpu'), show(c.nodeError));
  check('api: nothing stays allocated after failed runs', c.afterErrorInUse && c.nodeErrorInUse, '');
  check('api: plain { type, data, dims } objects are accepted as feeds', c.duckTyped, '');
  check('api: data that does not fill its dims throws naming the input', has(c.shortData, "input 'input'", 'needs 49152 bytes, got 20'), show(c.shortData));
  check('api: an unknown tensor type throws naming it', has(c.badType, "unknown tensor type 'float31'"), show(c.badType));
  check('api: a second concurrent run is refused with an Error', has(c.concurrent, 'already in progress'), show(c.concurrent));
  check('api: release is refused while a run is in flight', has(c.releaseWhileRunning, 'in progress'), show(c.releaseWhileRunning));
  check('api: the session stays usable after refusals', c.stillUsable === '1,10', c.stillUsable);
  check('api: device memory returns to the weights after runs', c.afterRunsInUse, show(c.weightsHeld));
  check('api: the memory report has a timeline with measured points', c.report.timeline.length === 14 && c.report.timeline[1].measuredBytes > 0 && c.report.releases > 0, show(c.report.timeline.slice(0, 2)));
  check('api: release frees the weights and resolves', c.release === null, show(c.release));
  check('api: a run after release throws', has(c.afterRelease, 'released'), show(c.afterRelease));
  check('api: releasing twice is harmless', c.releaseTwice === null, show(c.releaseTwice));

  const x = await page.evaluate(externalData);
  check('api: external data given as a URL loads the same model', x.byUrl, '');
  check('api: external data given as bytes runs on webgpu', x.byBytesOnWebgpu, '');
  check('api: missing external data rejects naming the file', has(x.missingFile, 'tiny_cnn_external.onnx.data'), show(x.missingFile));
  check('api: an external-data path that escapes is refused', has(x.escaping, 'external data'), show(x.escaping));

  const f = await page.evaluate(perNodeFallback);
  const gru = f.nodes.find(([n]) => n === 'gru');
  check('api: a node WebGPU cannot run falls back to the CPU', gru && gru[1] === 'cpu' && f.nodes.filter(([, d]) => d.startsWith('wgpu')).length === 2, show(f.nodes));
  const native = nativeOutputs(join(scratch, 'fallback_gru.onnx'));
  const diff = compareOutputs(native, f.outputs);
  check('api: the fallback model matches the native CPU backend', !diff, diff);
  check('api: strict mode refuses the fallback, naming the op', has(f.strict, 'GRU'), show(f.strict));

  const context = await browser.newContext();
  await context.addInitScript(() => {
    Object.defineProperty(Navigator.prototype, 'gpu', { get: () => undefined, configurable: true });
  });
  const bare = await context.newPage();
  await bare.goto(`${url}/tests/blank.html`);
  const n = await bare.evaluate(noWebgpu);
  await context.close();
  check('api: without navigator.gpu the default providers fall back to the CPU', n.ep === 'cpu' && n.ran === '1,10', show(n));
  check('api: the skipped provider is reported with the reason', n.skipped.length === 1 && n.skipped[0].includes('navigator.gpu'), show(n.skipped));
  check('api: strict mode without WebGPU rejects with the reason', has(n.strict, 'navigator.gpu'), show(n.strict));
}

