// Reading a real run in the browser: a genuine PyTorch snapshot of a run that deliberately differs
// from its plan (tests/data/unplanned: an fp32 logits copy kept from forward) is parsed in the page
// and the unplanned tensor is named with its phase and size; the evidence view shows the model
// against every measured case; the results settle on the allocator simulation.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { serve, launch, openApp, gibOf, cliPlan, GIB } from "./harness.mjs";

const root = path.resolve(import.meta.dirname, "../..");
const expected = JSON.parse(fs.readFileSync(path.join(root, "tests/data/unplanned/expected.json"), "utf8"))["logits-fp32"];
let server, browser;
before(async () => {
  fs.mkdirSync(path.join(root, "test-artifacts"), { recursive: true });
  server = await serve("/");
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

test("a snapshot of a run that differs from its plan names the unplanned tensor, its phase and size", async () => {
  const { page, errors } = await openApp(browser, server.url + "?model=qwen2.5-0.5b&b=4&s=2048&gc=1");
  // The file is decompressed and parsed in slices, the page showing how far it is between them.
  await page.evaluate(() => {
    window.__statuses = [];
    new MutationObserver(() => {
      const s = document.querySelector('[data-testid="measured-status"]');
      if (s && window.__statuses.at(-1) !== s.textContent) window.__statuses.push(s.textContent);
    }).observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  await page.setInputFiles('[data-testid="measured-file"]', path.join(root, "tests/data/unplanned/logits-fp32.pickle.gz"));
  await page.waitForSelector('[data-testid="measured-report"]', { timeout: 60000 });
  const statuses = await page.evaluate(() => window.__statuses);
  const parsed = statuses.map((s) => /^parsing .* (\d+) %$/.exec(s)?.[1]).filter(Boolean).map(Number);
  assert.ok(parsed.length >= 2 && parsed.every((p, i) => i === 0 || p > parsed[i - 1]), statuses.join(" | "));
  assert.ok(statuses.some((s) => /^decompressing .* \d+ %$/.test(s)), statuses.join(" | "));
  assert.ok(statuses.includes("comparing with the plan…"), statuses.join(" | "));
  const item = page.locator('[data-testid="measured-unplanned-item"]').first();
  const bytes = Number(await item.getAttribute("data-bytes"));
  assert.ok(Math.abs(bytes - expected.unplanned_bytes) / expected.unplanned_bytes <= 0.05, `${bytes}`);
  assert.equal(await item.getAttribute("data-phase"), expected.unplanned_phase);
  assert.match(await item.textContent(), /unplanned: 1 × 4\.64 GiB allocated in forward/);
  assert.match(await page.textContent('[data-testid="measured-findings"]'), /fp32 copy of the logits/);
  const reserved = await page.textContent('[data-testid="measured-peak-reserved"]');
  assert.ok(reserved.startsWith((expected.max_reserved / GIB).toFixed(2)), reserved);
  // The run's bar beside the plan's: the part the plan does not have is its own segment.
  const seg = Number(await page.getAttribute('[data-testid="bar-unplanned"]', "data-bytes"));
  assert.ok(Math.abs(seg - expected.unplanned_bytes) / expected.unplanned_bytes <= 0.05, `unplanned segment ${seg}`);
  const planned = Number(await page.getAttribute('[data-testid="bar-planned-allocated"]', "data-bytes"));
  const measured = Number(await page.getAttribute('[data-testid="bar-measured-allocated"]', "data-bytes"));
  assert.ok(Math.abs(measured - planned) / planned <= 0.05, `as planned ${measured} vs plan ${planned}`);
  // The timeline: measured and planned memory over the step with the plan's phases marked.
  const tl = page.locator('[data-testid="measured-timeline"]');
  assert.ok((await tl.locator("path.tl-measured").getAttribute("d")).split("L").length > 50);
  assert.ok((await tl.locator("path.tl-planned").getAttribute("d")).split("L").length > 50);
  const phases = await tl.locator("text.phase-label").allTextContents();
  for (const p of ["forward", "backward", "optimizer"]) assert.ok(phases.includes(p), phases.join());
  await page.locator('[data-testid="measured-panel"]').screenshot({ path: path.join(root, "test-artifacts", "measured-panel.png") });
  // "Use my measured overhead": the difference becomes its own segment of the plan and the link.
  const before = await gibOf(page, "peak-allocated");
  const keep = Number(await page.getAttribute('[data-testid="use-measured-overhead"]', "data-bytes"));
  assert.ok(Math.abs(keep - expected.unplanned_bytes) / expected.unplanned_bytes <= 0.05, `kept ${keep}`);
  await page.click('[data-testid="use-measured-overhead"]');
  await page.waitForSelector('[data-testid="segment-measured_overhead"]');
  await page.waitForFunction(() => location.search.includes("mo="), null, { timeout: 5000 });
  const after = await gibOf(page, "peak-allocated");
  assert.ok(Math.abs(after - before - keep / GIB) <= 0.011, `${before} → ${after} for ${keep}`);
  assert.deepEqual(errors, []);
  await page.close();
});

test("a file that is not a report gets one clear message", async () => {
  const { page } = await openApp(browser, server.url);
  await page.setInputFiles('[data-testid="measured-file"]', { name: "x.pickle", mimeType: "application/octet-stream", buffer: Buffer.from([0x80, 4, 0x63, 0x6f, 0x73]) });
  await page.waitForSelector('[data-testid="measured-error"]');
  assert.match(await page.textContent('[data-testid="measured-error"]'), /not a PyTorch memory snapshot|pickle/);
  await page.close();
});

test("the file chosen last wins: a report of an earlier file still being read does not replace it", async () => {
  const { page, errors } = await openApp(browser, server.url);
  // A 7B snapshot (the worker takes a moment), then at once a file that fails at the first byte.
  await page.setInputFiles('[data-testid="measured-file"]', path.join(root, "tests/data/reference/snapshots/llama2-7b_nf4+bf16+autocast_bf16_s2048_b4_r16_all-linear_do0.05_sdpa_gc.pickle.gz"));
  await page.setInputFiles('[data-testid="measured-file"]', { name: "x.pickle", mimeType: "application/octet-stream", buffer: Buffer.from([0x80, 4, 0x63, 0x6f, 0x73]) });
  await page.waitForSelector('[data-testid="measured-error"]');
  // Long enough for the first file's report to come back (it reads in well under this).
  await page.waitForTimeout(4000);
  assert.equal(await page.$('[data-testid="measured-report"]'), null, "the earlier file's report replaced the later one's");
  assert.ok(await page.$('[data-testid="measured-error"]'));
  assert.equal(await page.$('[data-testid="measured-status"]'), null);
  assert.deepEqual(errors, []);
  await page.close();
});

test("results settle on the simulated allocator and match the CLI", async () => {
  const { page } = await openApp(browser, server.url + "?model=llama2-7b&gpu=rtx4090&b=2&s=2048&dt=nf4&gc=1");
  await page.waitForSelector('[data-reserve="simulated"]');
  const cli = cliPlan(["--model", "llama2-7b", "--gpu", "rtx4090", "--batch", "2", "--seq", "2048", "--quant", "nf4", "--gc"]).plan;
  assert.ok(Math.abs(await gibOf(page, "peak-reserved") - cli.peak_reserved_bytes / GIB) <= 0.006);
  assert.ok(cli.reserve_simulated);
  await page.close();
});

test("the evidence view lists the model against every measured case", async () => {
  const { page } = await openApp(browser, server.url);
  await page.click('[data-testid="evidence-run"]');
  await page.waitForSelector('[data-testid="evidence-summary"]', { timeout: 120000 });
  assert.match(await page.textContent('[data-testid="evidence-reserved"]'), /peak reserved vs PyTorch's allocator: 174 cases, median \|error\| 0\.00 %/);
  assert.match(await page.textContent('[data-testid="evidence-allocated"]'), /cases, median/);
  await page.close();
});
