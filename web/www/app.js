// The Onyx demo: load a model, show what is inside and where it runs, run it
// on generated inputs or an image, and chart memory step by step.
//
// URL parameters (used by the browser tests, handy for links):
//   ?model=URL&ep=webgpu|cpu&run=1&warm=N&seed=S

import init, { InferenceSession, Tensor } from '../pkg/onyx_web.js';
import { formatBytes, renderMemoryChart } from './chart.js';
import { imageTensor, visionInput } from './image.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const state = { session: null, files: null, image: null };
/** What the tests read: outputs, reports, latencies. */
window.onyxDemo = state;

function setStatus(id, text, error = false) {
  const e = $(id);
  e.textContent = text;
  e.classList.toggle('error', error);
}

function fail(id, err) {
  console.error(err);
  setStatus(id, err && err.message ? err.message : String(err), true);
  document.body.dataset.status = 'error';
}

function stat(k, v, sub = '') {
  const d = document.createElement('div');
  d.className = 'stat';
  d.innerHTML = `<div class="k"></div><div class="v"></div>`;
  d.querySelector('.k').textContent = k;
  d.querySelector('.v').textContent = v;
  if (sub) {
    const s = document.createElement('small');
    s.textContent = ` ${sub}`;
    d.querySelector('.v').appendChild(s);
  }
  return d;
}

function bars(container, rows, format = (v) => String(v)) {
  container.replaceChildren();
  const max = Math.max(...rows.map((r) => r[1]), 1e-30);
  for (const [label, value] of rows) {
    const row = document.createElement('div');
    row.className = 'bar';
    row.innerHTML = '<span class="label"></span><div class="track"><div class="fill"></div></div><span class="value"></span>';
    row.querySelector('.label').textContent = label;
    row.querySelector('.label').title = label;
    row.querySelector('.fill').style.width = `${Math.max((value / max) * 100, 0.5)}%`;
    row.querySelector('.value').textContent = format(value);
    container.appendChild(row);
  }
}

function table(el, head, rows) {
  el.replaceChildren();
  const tr = el.insertRow();
  for (const h of head) {
    const th = document.createElement('th');
    th.textContent = h;
    tr.appendChild(th);
  }
  for (const r of rows) {
    const row = el.insertRow();
    for (const c of r) {
      const td = row.insertCell();
      if (c instanceof Node) td.appendChild(c); else td.textContent = c;
    }
  }
}

const code = (text) => {
  const c = document.createElement('code');
  c.textContent = text;
  return c;
};
const shapeText = (shape) => (shape ? `[${shape.map((d) => (d === null ? '?' : d)).join(', ')}]` : '—');

async function environment() {
  const parts = [];
  if (navigator.gpu) {
    const adapter = await navigator.gpu.requestAdapter().catch(() => null);
    parts.push(adapter ? `WebGPU available${adapter.info?.description ? ` (${adapter.info.description})` : ''}` : 'WebGPU present, no adapter');
  } else {
    parts.push('no WebGPU in this browser: the CPU backend runs instead');
  }
  $('env').textContent = parts.join(' · ');
}

function modelSource() {
  if (state.files) {
    const model = state.files.find((f) => f.name.endsWith('.onnx')) ?? state.files[0];
    const external = state.files.filter((f) => f !== model);
    return { label: model.name, model, external };
  }
  const url = $('bundled').value;
  return { label: url.split('/').pop(), model: url, external: [] };
}

async function loadModel() {
  const source = modelSource();
  const ep = $('ep').value;
  document.body.dataset.status = 'loading';
  setStatus('model-status', `Loading ${source.label}…`);
  $('load').disabled = true;
  try {
    if (state.session) await state.session.release();
    state.session = null;
    const bytes = typeof source.model === 'string' ? source.model : new Uint8Array(await source.model.arrayBuffer());
    const externalData = await Promise.all(
      source.external.map(async (f) => ({ path: f.name, data: new Uint8Array(await f.arrayBuffer()) })),
    );
    const t0 = performance.now();
    const session = await InferenceSession.create(bytes, {
      executionProviders: ep === 'webgpu' ? ['webgpu', 'cpu'] : ['cpu'],
      releaseDeadValues: $('release').checked,
      externalData,
    });
    state.createMs = performance.now() - t0;
    state.session = session;
    state.modelLabel = source.label;
    const d = session.describe();
    state.description = d;
    const note = d.skipped.length ? ` — ${d.skipped.join('; ')}` : '';
    setStatus('model-status', `${source.label}: session created on ${d.executionProvider} in ${state.createMs.toFixed(0)} ms${note}`);
    showInfo(d);
    $('run-card').classList.remove('hidden');
    $('image-choice').classList.toggle('hidden', !visionInput(d.inputs));
    document.body.dataset.status = 'loaded';
  } catch (err) {
    fail('model-status', err);
  } finally {
    $('load').disabled = false;
  }
}

function showInfo(d) {
  $('info-card').classList.remove('hidden');
  const io = (list) => list.map((m) => [code(m.name), m.type ?? '?', shapeText(m.shape)]);
  table($('inputs'), ['name', 'type', 'shape'], io(d.inputs));
  table($('outputs'), ['name', 'type', 'shape'], io(d.outputs));
  const total = d.ops.reduce((a, [, n]) => a + n, 0);
  $('node-count').textContent = `· ${total} nodes, ${d.ops.length} op types`;
  bars($('ops'), d.ops.slice(0, 24));
  const place = $('placement');
  place.replaceChildren();
  const kind = d.adapter ? `${d.adapter.deviceType.toLowerCase()} adapter${d.adapter.shaderF16 ? ', shader-f16' : ''}` : '';
  const adapter = d.adapter ? `WebGPU: ${d.adapter.name ? `${d.adapter.name}, ` : ''}${kind}` : 'the CPU (wasm)';
  const p = document.createElement('p');
  p.className = 'muted';
  p.textContent = `Runs on ${adapter}.`;
  place.appendChild(p);
  for (const dev of d.devices) {
    const pill = document.createElement('span');
    pill.className = `pill ${dev.device === 'cpu' ? 'cpu' : ''}`;
    pill.textContent = `${dev.device}: ${dev.kernels} kernels, ${formatBytes(dev.weightBytes)} weights`;
    place.appendChild(pill);
  }
  const fallback = d.nodes.filter((n) => d.devices.length > 1 && n.device === d.devices[1].device);
  if (fallback.length) {
    const f = document.createElement('p');
    f.className = 'muted';
    const byOp = {};
    for (const n of fallback) byOp[n.op] = (byOp[n.op] ?? 0) + 1;
    f.textContent = `On the CPU fallback: ${Object.entries(byOp).map(([op, c]) => `${op} ×${c}`).join(', ')}`;
    place.appendChild(f);
  }
}

async function inputs() {
  const source = document.querySelector('input[name=source]:checked').value;
  const d = state.description;
  if (source === 'image') {
    if (!state.image) throw new Error('pick an image first');
    const { name, tensor } = await imageTensor(state.image, d.inputs);
    return { [name]: tensor };
  }
  return state.session.generateInputs({}, Number($('seed').value) || 0);
}

function summary(t) {
  const v = t.toNumbers();
  let min = Infinity, max = -Infinity, sum = 0;
  for (const x of v) { min = Math.min(min, x); max = Math.max(max, x); sum += x; }
  const first = Array.from(v.slice(0, 4), (x) => (Number.isInteger(x) ? x : x.toPrecision(4))).join(', ');
  return { values: v, text: v.length ? `min ${min.toPrecision(4)} · max ${max.toPrecision(4)} · mean ${(sum / v.length).toPrecision(4)}` : 'empty', first };
}

function topK(outputs) {
  // The first float output shaped [1, C] or [C] with 2 ≤ C ≤ 1000 is taken as class scores.
  for (const [name, t] of Object.entries(outputs)) {
    const classes = t.dims.length === 2 && t.dims[0] === 1 ? t.dims[1] : t.dims.length === 1 ? t.dims[0] : 0;
    if (!t.type.startsWith('float') || classes < 2 || classes > 1000) continue;
    let v = Array.from(t.toNumbers());
    const isProb = v.every((x) => x >= 0 && x <= 1) && Math.abs(v.reduce((a, b) => a + b, 0) - 1) < 1e-3;
    if (!isProb) {
      const m = Math.max(...v);
      const e = v.map((x) => Math.exp(x - m));
      const s = e.reduce((a, b) => a + b, 0);
      v = e.map((x) => x / s);
    }
    const top = v.map((p, i) => [i, p]).sort((a, b) => b[1] - a[1]).slice(0, 5);
    return { name, softmax: !isProb, top };
  }
  return null;
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function runModel() {
  const session = state.session;
  if (!session) return;
  document.body.dataset.status = 'running';
  $('run').disabled = true;
  setStatus('run-status', 'Running…');
  try {
    const feeds = await inputs();
    const warm = Math.max(1, Math.min(200, Number($('warm').value) || 10));
    let t0 = performance.now();
    let outputs = await session.run(feeds);
    const first = performance.now() - t0;
    const times = [];
    for (let i = 0; i < warm; i++) {
      setStatus('run-status', `Warm run ${i + 1} of ${warm}…`);
      t0 = performance.now();
      outputs = await session.run(feeds);
      times.push(performance.now() - t0);
    }
    // One run each way for the chart: release at last use, and none.
    await session.run(feeds, { releaseDeadValues: true });
    const on = session.memoryReport();
    await session.run(feeds, { releaseDeadValues: false });
    const off = session.memoryReport();
    // One profiled run: the device is synchronized after each step.
    await session.run(feeds, { profile: true });
    state.profile = session.memoryReport().timeline.filter((p) => p.ms != null);
    state.latency = { first, warmMedian: median(times), warmMin: Math.min(...times), warm: times };
    state.report = on;
    state.reportOff = off;
    state.outputs = Object.fromEntries(Object.entries(outputs).map(([k, t]) => [k, { type: t.type, dims: Array.from(t.dims), data: Array.from(t.toNumbers()) }]));
    showResults(outputs);
    showMemory(on, off);
    setStatus('run-status', `Ran ${warm + 4} times on ${state.description.executionProvider}.`);
    document.body.dataset.status = 'done';
  } catch (err) {
    fail('run-status', err);
  } finally {
    $('run').disabled = false;
  }
}

function showResults(outputs) {
  const l = state.latency;
  $('latency').replaceChildren(
    stat('session creation', state.createMs.toFixed(1), 'ms'),
    stat('first run', l.first.toFixed(1), 'ms'),
    stat(`warm median (${l.warm.length})`, l.warmMedian.toFixed(2), 'ms'),
    stat('warm best', l.warmMin.toFixed(2), 'ms'),
  );
  const rows = Object.entries(outputs).map(([name, t]) => {
    const s = summary(t);
    return [code(name), `${t.type} [${Array.from(t.dims).join(', ')}]`, s.text, s.first];
  });
  table($('results'), ['output', 'tensor', 'values', 'first'], rows);
  const top = topK(outputs);
  $('topk-title').textContent = top ? `Top classes of ${top.name}${top.softmax ? ' (softmax)' : ''}` : 'Top classes';
  if (top) bars($('topk'), top.top.map(([i, p]) => [`class ${i}`, p]), (p) => `${(p * 100).toFixed(1)}%`);
  else $('topk').textContent = 'No classifier-shaped output.';
  // Time by operator type, from the profiled run.
  const opOf = Object.fromEntries(state.description.nodes.map((n) => [n.name, n.op]));
  const byOp = {};
  for (const p of state.profile) {
    const op = opOf[p.step] ?? p.step;
    byOp[op] = (byOp[op] ?? 0) + p.ms;
  }
  const rowsByTime = Object.entries(byOp).sort((a, b) => b[1] - a[1]).slice(0, 8);
  bars($('profile'), rowsByTime, (ms) => `${ms.toFixed(ms < 10 ? 2 : 1)} ms`);
}

function showMemory(on, off) {
  $('memory-card').classList.remove('hidden');
  const saved = off.peakBytes > 0 ? (1 - on.peakBytes / off.peakBytes) * 100 : 0;
  $('memory-stats').replaceChildren(
    stat('peak, release on', formatBytes(on.peakBytes)),
    stat('peak, release off', formatBytes(off.peakBytes)),
    stat('live-set bound', formatBytes(on.liveSetBoundBytes)),
    stat('saved by release', `${saved.toFixed(0)}%`),
    stat('buffers released', String(on.releases)),
    stat('weights', formatBytes(on.weightBytes)),
  );
  renderMemoryChart($('chart'), { on: on.timeline, off: off.timeline, bound: on.liveSetBoundBytes });
}

function wireDrop() {
  const drop = $('drop');
  const take = (files) => {
    state.files = Array.from(files);
    if (state.files.length) loadModel();
  };
  drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (e) => {
    e.preventDefault();
    drop.classList.remove('over');
    take(e.dataTransfer.files);
  });
  $('file').addEventListener('change', (e) => take(e.target.files));
  $('bundled').addEventListener('change', () => { state.files = null; });
  $('image').addEventListener('change', (e) => {
    state.image = e.target.files[0] ?? null;
    if (state.image) {
      document.querySelector('input[name=source][value=image]').checked = true;
      $('preview').src = URL.createObjectURL(state.image);
      $('preview').classList.remove('hidden');
    }
  });
}

async function main() {
  await init();
  wireDrop();
  $('load').addEventListener('click', () => { state.files = null; loadModel(); });
  $('run').addEventListener('click', runModel);
  await environment();
  const model = params.get('model');
  if (model) {
    const option = document.createElement('option');
    option.value = model;
    option.textContent = model.split('/').pop();
    $('bundled').appendChild(option);
    $('bundled').value = model;
  }
  if (params.get('ep')) $('ep').value = params.get('ep');
  if (params.get('warm')) $('warm').value = params.get('warm');
  if (params.get('seed')) $('seed').value = params.get('seed');
  if (params.get('run')) {
    await loadModel();
    if (state.session) await runModel();
  }
}

main().catch((err) => fail('model-status', err));
