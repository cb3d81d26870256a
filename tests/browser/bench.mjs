// Benchmark (not a test): time from a control's `input` event to the updated DOM, in headless
// Chromium over the release build; and the transferred size of the build (gzip and brotli).
// Run: node tests/browser/bench.mjs   (after `trunk build --release`); QUERY="?dora=1" times the
// slider with those settings (a link's parameters).
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";
import { serve, launch, openApp, dist } from "./harness.mjs";

const server = await serve("/");
const browser = await launch();
const { page } = await openApp(browser, server.url + (process.env.QUERY || ""));
const moves = Number(process.env.MOVES || 300);
const times = await page.evaluate(async (moves) => {
  const input = document.querySelector('[data-testid="input-seq"]');
  const shown = () => document.querySelector('[data-testid="peak-allocated"]').textContent;
  const samples = [];
  for (let i = 0; i < moves; i++) {
    // Alternate between two regions so every move changes the shown peak.
    const v = (i % 2 ? 4096 : 512) + i;
    const before = shown();
    const t0 = performance.now();
    input.value = String(v);
    input.dispatchEvent(new Event("input", { bubbles: true }));
    // Leptos runs effects on the microtask queue: wait until the DOM shows the new value.
    let spins = 0;
    while (shown() === before && spins < 100000) {
      await Promise.resolve();
      spins++;
      if (spins % 1000 === 0) await new Promise((r) => setTimeout(r, 0));
    }
    samples.push(performance.now() - t0);
    await new Promise((r) => setTimeout(r, 0));
  }
  return samples;
}, moves);
times.sort((a, b) => a - b);
const q = (p) => times[Math.min(times.length - 1, Math.floor(p * times.length))];
console.log(`slider input → DOM: ${moves} moves, median ${q(0.5).toFixed(2)} ms, p95 ${q(0.95).toFixed(2)} ms, max ${times[times.length - 1].toFixed(2)} ms`);
await browser.close();
await server.close();

// What a visit loads (the page; the service worker caches the same files), what a Chinese visit
// adds, the full planner, what the sections and the page's worker load when asked for, and the GPU benchmark page.
const worker = (f) => f === "analyse-worker.js" || f.startsWith("lorafit-analyse");
const sections = (f) => f.startsWith("lorafit-sections") || f === "sections.css";
const chinese = (f) => f.startsWith("lorafit-zh") || f === "zh.json";
// The full planner (src/web/full.rs): the page with every op, loaded instead of the first bundle
// once a state needs a vision tower, Gated DeltaNet, experts, DoRA, preference training…
const full = (f) => f.startsWith("lorafit-full");
const parts = [
  ["planner page, what a visit loads", dist, (f) => !worker(f) && !sections(f) && !chinese(f) && !full(f)],
  ["full planner (loaded when a state's step needs the extended ops)", dist, full],
  ["Chinese (loaded when the page is shown in Chinese: the table and its wasm)", dist, chinese],
  ["sections (loaded when one is opened)", dist, sections],
  ["page's worker (on demand)", dist, worker],
  ["GPU benchmark page (lazy)", path.join(dist, "gpu"), () => true],
];
for (const [name, dir, picked] of parts) {
  let raw = 0, gz = 0, br = 0;
  for (const f of fs.readdirSync(dir)) {
    if (!(/\.(wasm|js|css|html)$/.test(f) || f === "zh.json") || !picked(f)) continue;
    if (fs.statSync(path.join(dir, f)).isDirectory()) continue;
    const data = fs.readFileSync(path.join(dir, f));
    raw += data.length;
    gz += zlib.gzipSync(data, { level: 9 }).length;
    br += zlib.brotliCompressSync(data, { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 11 } }).length;
    console.log(`  ${f.padEnd(40)} ${String(data.length).padStart(8)} B raw`);
  }
  console.log(`${name} (wasm + js + css + html): ${(raw / 1024).toFixed(1)} KiB raw, ${(gz / 1024).toFixed(1)} KiB gzip, ${(br / 1024).toFixed(1)} KiB brotli`);
}
