// The GPU panel: loaded lazily from the planner, WebGPU benchmark on headless Chromium's
// SwiftShader adapter (--enable-unsafe-webgpu), a clear message without WebGPU, and the time
// estimate matching the CLI.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { serve, launch, openApp, cliPlan } from "./harness.mjs";

let server;
before(async () => {
  server = await serve("/site/");
});
after(async () => {
  await server?.close();
});

test("the panel loads on demand and its time estimate matches the CLI", async () => {
  const browser = await launch();
  const { page } = await openApp(browser, server.url + "?model=qwen2-7b&gpu=h100-80&ac=bf16&b=2");
  const before = await page.evaluate(() => performance.getEntriesByType("resource").map((e) => e.name).filter((n) => n.includes("gpubench")).length);
  assert.equal(before, 0, "the benchmark bundle is not loaded with the planner");
  await page.click('[data-testid="open-gpu-panel"]');
  const frame = page.frameLocator('[data-testid="gpu-panel"]');
  await frame.locator('[data-testid="tokens-per-second"]').waitFor({ timeout: 30000 });
  const want = cliPlan(["--model", "qwen2-7b", "--gpu", "h100-80", "--autocast", "bf16", "--batch", "2"]).time;
  assert.equal(Number(await frame.locator('[data-testid="tokens-per-second"]').textContent()), Math.round(want.tokens_per_second));
  // The H100 has a cited rental rate: the epoch's cost, as the CLI computes it.
  const cost = await frame.locator('[data-testid="epoch-cost"]').textContent();
  assert.ok(want.usd_per_epoch > 0, JSON.stringify(want));
  assert.ok(cost.startsWith(`$${want.usd_per_epoch.toFixed(2)} at $${want.usd_per_gpu_hour}/GPU-hour`), cost);
  // No WebGPU in this browser (--disable-gpu, no unsafe flag): one clear message, page keeps working.
  await frame.locator('[data-testid="gpu-measure"]').click();
  await frame.locator('[data-testid="gpu-status"]').filter({ hasText: /WebGPU|adapter|GPU/ }).waitFor({ timeout: 15000 });
  assert.match(await frame.locator('[data-testid="gpu-status"]').textContent(), /not available|no WebGPU|could not open/);
  assert.match(await frame.locator('[data-testid="step-time"]').textContent(), /s|min|h/);
  await browser.close();
});

test("WebGPU benchmark on SwiftShader: tiled and naive kernels measured, cancellable", async () => {
  const browser = await launch(["--enable-unsafe-webgpu"]);
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(server.url + "gpu/?model=llama3.2-1b&gpu=rtx4090&s=256");
  await page.click('[data-testid="gpu-measure"]');
  await page.waitForSelector('[data-testid="gpu-result-tiled-f32"]', { timeout: 60000 });
  for (const id of ["gpu-result-naive-f32", "gpu-result-tiled-f32"]) {
    const gflops = Number((await page.locator(`[data-testid="${id}"] td`).nth(2).textContent()).trim());
    assert.ok(gflops > 0 && Number.isFinite(gflops), `${id}: ${gflops}`);
  }
  assert.match(await page.textContent('[data-testid="gpu-status"]'), /done on/);
  assert.match(await page.textContent('[data-testid="gpu-speedup"]'), /tiled \/ naive: [0-9.]+×/);
  assert.match(await page.textContent('[data-testid="gpu-vs-catalog"]'), /% of the NVIDIA GeForce RTX 4090 peak/);
  // The planned step timed at the measured rate, beside the catalog card's estimate.
  const measured = await page.textContent('[data-testid="gpu-measured-step"]');
  const m = measured.match(/measured on your GPU: [0-9.]+ (s|min|h) per optimizer step, ([0-9.]+) tokens\/s — ([0-9.]+) × the catalog figure for NVIDIA GeForce RTX 4090/);
  assert.ok(m, measured);
  assert.ok(Number(m[2]) > 0 && Number(m[3]) > 0, measured);
  console.log("# swiftshader:", (await page.textContent('[data-testid="gpu-speedup"]')).trim(), "|", (await page.textContent('[data-testid="gpu-vs-catalog"]')).trim());
  // Cancel: a second run stops early with a message.
  await page.click('[data-testid="gpu-measure"]');
  await page.click('[data-testid="gpu-cancel"]');
  await page.waitForFunction(() => /cancelled|done on/.test(document.querySelector('[data-testid="gpu-status"]').textContent), null, { timeout: 30000 });
  assert.deepEqual(errors, []);
  await browser.close();
});
