// Benchmark (not a test): reading a ~100 MB memory snapshot in the page, in headless Chromium
// over the release build — from choosing the file to the report shown (read, parse, replay the
// trace through the allocator port, compare with the plan) — and the same through the CLI.
// Run: node tests/browser/bench-snapshot.mjs [MEGABYTES]   (after `trunk build --release`)
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { serve, launch, openApp } from "./harness.mjs";

const root = path.resolve(import.meta.dirname, "../..");
const mb = Number(process.argv[2] || 100);
const file = path.join(root, "target", `big-snapshot-${mb}mb.pickle`);
if (!fs.existsSync(file)) {
  console.log(execFileSync("python3", [path.join(root, "scripts/make_big_snapshot.py"), file, String(mb)], { encoding: "utf8" }).trim());
}
const size = fs.statSync(file).size;
const config = "?model=llama2-7b&b=4&s=2048&dt=nf4&ac=bf16&gc=1&t=all-linear";

const bin = process.env.LORAFIT_BIN || path.join(root, "target/release/lorafit");
if (fs.existsSync(bin)) {
  const t0 = performance.now();
  execFileSync(bin, ["inspect", file, "--model", "llama2-7b", "--batch", "4", "--seq", "2048", "--quant", "nf4", "--gc", "--json"], { maxBuffer: 1 << 28 });
  console.log(`CLI inspect (native, release): ${((performance.now() - t0) / 1000).toFixed(2)} s for ${(size / 1e6).toFixed(1)} MB`);
}

const server = await serve("/");
const browser = await launch();
const runs = [];
for (let i = 0; i < 3; i++) {
  const { page } = await openApp(browser, server.url + config);
  // The longest main-thread task and the progress texts shown while the file is read.
  await page.evaluate(() => {
    window.__longest = 0;
    window.__statuses = new Set();
    new PerformanceObserver((l) => l.getEntries().forEach((e) => { window.__longest = Math.max(window.__longest, e.duration); }))
      .observe({ type: "longtask" });
    new MutationObserver(() => {
      const s = document.querySelector('[data-testid="measured-status"]');
      if (s) window.__statuses.add(s.textContent);
    }).observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  const t0 = Date.now();
  await page.setInputFiles('[data-testid="measured-file"]', file);
  const progress = await page.waitForSelector('[data-testid="measured-status"]', { timeout: 60000 }).then(() => Date.now() - t0).catch(() => null);
  await page.waitForSelector('[data-testid="measured-report"], [data-testid="measured-error"]', { timeout: 300000 });
  const total = Date.now() - t0;
  const error = await page.$('[data-testid="measured-error"]');
  runs.push(total);
  const [longest, updates] = await page.evaluate(() => [window.__longest, window.__statuses.size]);
  console.log(`page: progress shown after ${progress} ms, report after ${(total / 1000).toFixed(2)} s, ${updates} progress texts, longest main-thread task ${Math.round(longest)} ms${error ? " (error: " + (await error.textContent()) + ")" : ""}`);
  await page.close();
}
runs.sort((a, b) => a - b);
console.log(`page: ${(size / 1e6).toFixed(1)} MB snapshot, median ${(runs[1] / 1000).toFixed(2)} s (file chosen → report, incl. setInputFiles)`);
await browser.close();
await server.close();
