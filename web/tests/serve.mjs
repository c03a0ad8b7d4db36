// A static file server on 127.0.0.1 for the demo and the browser tests.
//
//   node web/tests/serve.mjs [PORT]     # then open http://127.0.0.1:PORT/www/
//
// Mounts: /            -> web/            (the demo at /www/, the package at /pkg/)
//         /models/     -> $ONYX_MODELS or target/models       (real models, cached)
//         /testdata/   -> $ONYX_TESTDATA or target/onnx-testdata (node suite)
//         /scratch/    -> target/web-test (models web/tests/prepare.py builds)
//         /vendor/ort/ -> web/node_modules/onnxruntime-web/dist (the comparison)
// Cross-origin isolation headers are set so onnxruntime-web may use threads.

import { createServer } from 'node:http';
import { createReadStream, statSync } from 'node:fs';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const web = resolve(fileURLToPath(new URL('..', import.meta.url)));
const root = resolve(web, '..');

export const MOUNTS = [
  ['/vendor/ort/', join(web, 'node_modules/onnxruntime-web/dist')],
  ['/models/', process.env.ONYX_MODELS ? resolve(process.env.ONYX_MODELS) : join(root, 'target/models')],
  ['/scratch/', join(root, 'target/web-test')],
  ['/testdata/', process.env.ONYX_TESTDATA ? resolve(process.env.ONYX_TESTDATA) : join(root, 'target/onnx-testdata')],
  ['/', web],
];

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
};

/** The file a URL path names, or null when it escapes its mount. */
function locate(urlPath) {
  const path = decodeURIComponent(urlPath.split('?')[0]);
  for (const [prefix, dir] of MOUNTS) {
    if (!path.startsWith(prefix)) continue;
    const file = normalize(join(dir, path.slice(prefix.length)));
    return file === dir || file.startsWith(dir + sep) ? file : null;
  }
  return null;
}

/** Starts the server; resolves to `{ server, url }`. */
export function serve(port = 0) {
  const server = createServer((req, res) => {
    try {
      // A malformed %-escape throws in decodeURIComponent: a 404 like any other bad path.
      let file = locate(req.url);
      if (file && statSync(file).isDirectory()) file = join(file, 'index.html');
      const st = file && statSync(file);
      if (!st || !st.isFile()) throw new Error('not found');
      res.writeHead(200, {
        'Content-Type': TYPES[extname(file)] ?? 'application/octet-stream',
        'Content-Length': st.size,
        'Cross-Origin-Opener-Policy': 'same-origin',
        'Cross-Origin-Embedder-Policy': 'require-corp',
        'Cache-Control': 'no-store',
      });
      createReadStream(file).pipe(res);
    } catch {
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      res.end(`not found: ${req.url}\n`);
    }
  });
  return new Promise((ok) => {
    server.listen(port, '127.0.0.1', () => ok({ server, url: `http://127.0.0.1:${server.address().port}` }));
  });
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { url } = await serve(Number(process.argv[2] ?? 8080));
  console.log(`serving ${web} at ${url}/www/`);
}
