// The browser conformance run: a fixed sample of node-suite cases through the
// JavaScript API on WebGPU with no fallback, against native wgpu's manifest.

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const lines = (file) => readFileSync(file, 'utf8').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));

/** Runs the sample; resolves to a report `{ cases: [{ name, pass, expected, stage, message }] }`. */
export async function conformanceSample(page, url, check, { testdata, root }) {
  const sample = lines(join(root, 'web/tests/conformance-sample.txt'));
  const manifest = new Set(lines(join(root, 'tests/manifests/node-wgpu.txt')));
  const node = join(testdata, 'node');
  if (!existsSync(join(node, sample[0]))) {
    check('conformance: the node suite is generated (tests/scripts)', false, `missing ${node}`);
    return { cases: [] };
  }
  await page.goto(`${url}/tests/blank.html`);
  const cases = [];
  const t0 = Date.now();
  for (const name of sample) {
    const dir = join(node, name);
    const files = readdirSync(join(dir, 'test_data_set_0'));
    const inputs = files.filter((f) => f.startsWith('input_')).length;
    const outputs = files.filter((f) => f.startsWith('output_')).length;
    let tol = { rtol: 1e-3, atol: 1e-7 };
    if (existsSync(join(dir, 'meta.json'))) {
      const m = JSON.parse(readFileSync(join(dir, 'meta.json'), 'utf8'));
      tol = { rtol: m.rtol ?? tol.rtol, atol: m.atol ?? tol.atol };
    }
    const run = page.evaluate(
      async ([base, i, o, t]) => {
        const h = await import('/tests/harness.js');
        return h.runCase(base, i, o, { executionProviders: ['webgpu'], strict: true }, t);
      },
      [`/testdata/node/${name}`, inputs, outputs, tol],
    );
    let timer;
    const timeout = new Promise((ok) => { timer = setTimeout(() => ok({ pass: false, stage: 'timeout', message: 'no result in 120 s' }), 120_000); });
    const r = await Promise.race([run, timeout]);
    clearTimeout(timer);
    if (r.stage === 'timeout') await page.goto(`${url}/tests/blank.html`);
    cases.push({ name, expected: manifest.has(name), ...r });
  }
  const passed = cases.filter((c) => c.pass);
  const expected = cases.filter((c) => c.expected);
  const lost = expected.filter((c) => !c.pass);
  const gained = passed.filter((c) => !c.expected);
  const secs = ((Date.now() - t0) / 1000).toFixed(0);
  console.log(`conformance sample: ${passed.length} of ${cases.length} pass in the browser (${secs} s); native wgpu passes ${expected.length} of them`);
  for (const c of lost) console.log(`  lost   ${c.name}: [${c.stage}] ${c.message.slice(0, 300)}`);
  for (const c of gained) console.log(`  gained ${c.name}`);
  check(`conformance: the sample has at least 300 cases`, cases.length >= 300, cases.length);
  check(`conformance: the browser passes every sampled case native wgpu passes (${expected.length})`, lost.length === 0, lost.map((c) => c.name).join(', '));
  check('conformance: the browser pass rate equals native wgpu\'s on the sample', passed.length === expected.length, `${passed.length} vs ${expected.length}; gained: ${gained.map((c) => c.name).join(', ')}`);
  return { passed: passed.length, expected: expected.length, total: cases.length, cases };
}
