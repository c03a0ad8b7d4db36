// The memory timeline as an SVG line chart: bytes held after each step with
// release on and off (measured by the providers), and the plan's live-set bound.

const SVG = 'http://www.w3.org/2000/svg';

/** `1.5 MiB`, `640 KiB`, `12 B`. */
export function formatBytes(n) {
  if (n == null) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i === 0 ? n : n.toFixed(n >= 100 ? 0 : n >= 10 ? 1 : 2)} ${units[i]}`;
}

function el(name, attrs = {}, parent = null) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

/** A "nice" axis step for a range. */
function niceStep(max, ticks) {
  const raw = max / ticks;
  const pow = 2 ** Math.floor(Math.log2(raw));
  for (const m of [1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8]) if (pow * m >= raw) return pow * m;
  return pow * 10;
}

/**
 * Draws into `container`.
 * - `on`, `off`: timelines (`[{ step, measuredBytes, liveBytes }]`) of a run
 *   with release on and one with release off; `off` may be null.
 * - `bound`: the plan's live-set bound in bytes.
 */
export function renderMemoryChart(container, { on, off, bound }) {
  container.replaceChildren();
  const value = (p) => p.measuredBytes ?? null;
  const onPts = on.map(value);
  const offPts = off ? off.map(value) : [];
  const n = on.length;
  const max = Math.max(bound, ...onPts.filter((v) => v != null), ...offPts.filter((v) => v != null), 1);
  const W = 960, H = 340, L = 76, R = 16, T = 34, B = 40;
  const x = (i) => L + (n <= 1 ? 0 : (i / (n - 1)) * (W - L - R));
  const step = niceStep(max, 4);
  const top = Math.ceil(max / step) * step;
  const y = (v) => T + (1 - v / top) * (H - T - B);
  const svg = el('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'memory timeline' });

  for (let v = 0; v <= top + 1e-9; v += step) {
    el('line', { class: v === 0 ? 'axis' : 'grid', x1: L, x2: W - R, y1: y(v), y2: y(v) }, svg);
    el('text', { x: L - 8, y: y(v) + 4, 'text-anchor': 'end' }, svg).textContent = formatBytes(v);
  }
  const xTicks = Math.min(n - 1, 8);
  for (let k = 0; k <= xTicks && n > 1; k++) {
    const i = Math.round((k / xTicks) * (n - 1));
    el('text', { x: x(i), y: H - B + 18, 'text-anchor': 'middle' }, svg).textContent = String(i);
  }
  el('text', { x: (L + W - R) / 2, y: H - 6, 'text-anchor': 'middle' }, svg).textContent =
    'step (0 = inputs bound)';

  const path = (pts) => {
    let d = '';
    pts.forEach((v, i) => { if (v != null) d += `${d ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)}`; });
    return d;
  };
  if (off) el('path', { class: 'off', d: path(offPts) }, svg);
  const onPath = path(onPts);
  const lastOn = onPts.reduce((a, v, i) => (v != null ? i : a), 0);
  el('path', { class: 'on-area', d: `${onPath}L${x(lastOn)},${y(0)}L${x(0)},${y(0)}Z` }, svg);
  el('path', { class: 'on', d: onPath }, svg);
  el('line', { class: 'bound', x1: L, x2: W - R, y1: y(bound), y2: y(bound) }, svg);

  // Hover: one transparent column per step, titled with its node and figures.
  const colW = Math.max((W - L - R) / Math.max(n, 1), 1);
  on.forEach((p, i) => {
    const r = el('rect', { class: 'hit', x: x(i) - colW / 2, y: T, width: colW, height: H - T - B }, svg);
    const offText = off && offPts[i] != null ? `\nrelease off: ${formatBytes(offPts[i])}` : '';
    el('title', {}, r).textContent =
      `step ${i}: ${p.step}\nrelease on: ${formatBytes(onPts[i])}${offText}\nplan: ${formatBytes(p.liveBytes)}`;
  });

  const legend = el('g', { class: 'legend' }, svg);
  const items = [['on', 'release on (measured)'], ['off', 'release off (measured)'], ['bound', 'live-set bound (plan)']]
    .filter(([k]) => k !== 'off' || off);
  let lx = L;
  for (const [cls, label] of items) {
    el('line', { class: cls, x1: lx, x2: lx + 22, y1: 14, y2: 14 }, legend);
    const t = el('text', { x: lx + 28, y: 18 }, legend);
    t.textContent = label;
    lx += 40 + label.length * 6.6;
  }
  container.appendChild(svg);
  return svg;
}
