// Headless Chromium with WebGPU on SwiftShader, through playwright-core.
// Never add --enable-features=Vulkan with --use-angle=swiftshader and
// --disable-vulkan-surface: together they hang the GPU process.

import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';

export const FLAGS = [
  '--headless=new',
  '--no-sandbox',
  '--enable-unsafe-webgpu',
  '--use-webgpu-adapter=swiftshader',
  // No background connections: the CI machine's network is closed.
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

/** A browser and a page whose console errors are echoed with a prefix. */
export async function launch() {
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: FLAGS, headless: true });
  const page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') console.log(`  [page ${m.type()}] ${m.text()}`);
  });
  page.on('pageerror', (e) => console.log(`  [page exception] ${e.message}`));
  return { browser, page };
}
