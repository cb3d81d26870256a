// The page by importance, at desktop, phone and embed sizes, in both colour schemes: no
// horizontal overflow, verdict + peak + breakdown bar in the first screen, the bar at least half
// the content width on desktop, axe-core clean; what fits first when it does not; keyboard-only
// use; plan() for JavaScript from dist/lib. Screenshots go to test-artifacts/.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { serve, launch, openView, openSections, settled, axeViolations, layoutOf, cliPlan, gibOf, GIB, artifacts } from "./harness.mjs";

let server, browser;
before(async () => {
  fs.mkdirSync(artifacts, { recursive: true });
  server = await serve("/");
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

const CASES = { fits: "?model=llama2-7b&gpu=a100-80", oom: "?model=llama2-7b&gpu=rtx4090&b=8&s=4096" };
const FIRST_SCREEN = ["verdict", "peak-allocated", "breakdown-bar"];

function inside(box, l, what) {
  assert.ok(box, `${what} missing`);
  assert.ok(box.top >= 0 && box.bottom <= l.height + 0.5, `${what} not in the first screen: ${JSON.stringify(box)} of ${l.width}×${l.height}`);
  assert.ok(box.left >= -0.5 && box.right <= l.width + 0.5, `${what} outside horizontally: ${JSON.stringify(box)}`);
}

for (const [name, width, height] of [["desktop", 1280, 800], ["phone", 390, 844], ["narrow", 360, 740]]) {
  for (const scheme of ["light", "dark"]) {
    for (const [status, query] of Object.entries(CASES)) {
      if (name === "narrow" && scheme === "dark") continue;
      test(`${name} ${width}×${height} ${scheme} ${status}: first screen, no overflow, axe clean`, async () => {
        const { page, errors, close } = await openView(browser, server.url + query, { width, height, colorScheme: scheme });
        try {
          assert.equal(await page.getAttribute('[data-testid="verdict"]', "data-status"), status);
          // What fits is worked out by the page's worker once the page is still.
          if (status === "oom") await page.waitForSelector('[data-testid="best-fix"]', { timeout: 30000 });
          const l = await layoutOf(page, [...FIRST_SCREEN, "select-model", "input-batch", "best-fix"]);
          assert.ok(l.overflow <= 0, `horizontal overflow of ${l.overflow}px`);
          for (const id of FIRST_SCREEN) inside(l[id], l, id);
          if (name === "desktop") {
            assert.ok(l["breakdown-bar"].width >= l.main.width / 2, `bar ${l["breakdown-bar"].width}px of ${l.main.width}px`);
            // The most used controls are in the first screen too.
            inside(l["select-model"], l, "select-model");
            inside(l["input-batch"], l, "input-batch");
          } else {
            assert.ok(l["select-model"].top > l["breakdown-bar"].bottom, "results come before the form");
          }
          // What fits starts in the first screen.
          if (status === "oom") assert.ok(l["best-fix"] && l["best-fix"].top < l.height - 40, `best-fix starts at ${l["best-fix"]?.top}`);
          await page.screenshot({ path: path.join(artifacts, `ui-${name}-${scheme}-${status}.png`) });
          assert.deepEqual(await axeViolations(page), []);
          // Then with the sections open (their own wasm): the whole page, overflow and axe again.
          await openSections(page);
          assert.ok((await layoutOf(page, [])).overflow <= 0, "horizontal overflow with the sections open");
          if (name !== "narrow") await page.screenshot({ path: path.join(artifacts, `ui-${name}-${scheme}-${status}-full.png`), fullPage: true });
          assert.deepEqual(await axeViolations(page), []);
          assert.deepEqual(errors, []);
        } finally {
          await close();
        }
      });
    }
  }
}

for (const [width, height] of [[640, 400], [480, 360], [800, 600]]) {
  for (const scheme of ["light", "dark"]) {
    for (const [status, query] of Object.entries(CASES)) {
      if (width === 800 && scheme === "dark") continue;
      test(`embed ${width}×${height} ${scheme} ${status}: everything inside the frame`, async () => {
        const { page, errors, close } = await openView(browser, server.url + query + "&embed=1", { width, height, colorScheme: scheme });
        try {
          // The picture first, so a failing layout can be looked at.
          await page.screenshot({ path: path.join(artifacts, `ui-embed-${width}x${height}-${scheme}-${status}.png`) });
          const ids = [...FIRST_SCREEN, "peak-reserved", "peak-smi", "input-batch", "input-seq", "input-rank", "open-full"];
          const l = await layoutOf(page, ids);
          assert.ok(l.overflow <= 0, `horizontal overflow of ${l.overflow}px`);
          for (const id of ids) inside(l[id], l, id);
          const scroll = await page.evaluate(() => document.documentElement.scrollHeight - window.innerHeight);
          assert.ok(scroll <= 0, `the embed scrolls by ${scroll}px`);
          // The link opens the full page with the same state.
          const href = await page.getAttribute('[data-testid="open-full"]', "href");
          assert.ok(!href.includes("embed=1") && href.includes(status === "oom" ? "b=8" : "model=llama2-7b"), href);
          assert.deepEqual(await axeViolations(page), []);
          assert.deepEqual(errors, []);
        } finally {
          await close();
        }
      });
    }
  }
}

test("the bar: grouped segments, allocator cache and CUDA context, capacity, formula on focus", async () => {
  const { page, close } = await openView(browser, server.url + CASES.fits, { width: 1280, height: 800 });
  try {
    // The CLI's plan is the settled one (reserved from the allocator simulation): so is the
    // page's once it has settled.
    await settled(page);
    const want = cliPlan(["--model", "llama2-7b", "--gpu", "a100-80"]).plan;
    const label = async (id) => page.getAttribute(`[data-testid="${id}"]`, "aria-label");
    const gibIn = (t) => Number(t.match(/(-?[0-9]+\.[0-9]{2}) GiB/)[1]);
    assert.ok(Math.abs(gibIn(await label("segment-allocator-cache")) - (want.peak_reserved_bytes - want.peak_allocated_bytes) / GIB) <= 0.006);
    assert.ok(Math.abs(gibIn(await label("segment-cuda-context")) - (want.nvidia_smi_bytes - want.peak_reserved_bytes) / GIB) <= 0.006);
    // Segments in group order: weights, trained + optimizer, activations, logits, cache, context.
    const order = await page.$$eval('[data-testid="breakdown-bar"] .seg', (els) => els.map((e) => [e.dataset.testid, e.getBoundingClientRect().left]));
    const lefts = order.map((o) => o[1]);
    assert.deepEqual([...lefts].sort((a, b) => a - b), lefts, "segments left to right in group order");
    assert.equal(order[0][0], "segment-frozen_weights");
    assert.equal(order[order.length - 1][0], "segment-cuda-context");
    // Every segment and every group is in the legend.
    const legend = await page.textContent('[data-testid="legend"]');
    for (const g of ["Weights", "Trained + optimizer", "Activations", "Logits & loss", "Allocator cache", "CUDA context"]) assert.ok(legend.includes(g), g);
    // The bar has a text alternative.
    assert.match(await page.getAttribute('[data-testid="breakdown-bar"]', "aria-label"), /Weights [0-9.]+ GiB/);
    await page.focus('[data-testid="segment-allocator-cache"]');
    assert.match(await page.textContent('[data-testid="segment-detail"]'), /reserved − allocated/);
    await page.keyboard.press("Escape");
    assert.equal(await page.locator('[data-testid="segment-detail"]').count(), 0);
    // Out of memory: the overflow is drawn past the capacity marker.
    await page.goto(server.url + CASES.oom);
    await page.waitForSelector(".over");
    const [cap, over] = await Promise.all([page.locator(".cap").first().boundingBox(), page.locator(".over").boundingBox()]);
    assert.ok(Math.abs(over.x - cap.x) < 4, `overflow starts at the capacity: ${over.x} vs ${cap.x}`);
  } finally {
    await close();
  }
});

test("what fits first: the cheapest combination, applied in one click", async () => {
  const { page, close } = await openView(browser, server.url + CASES.oom, { width: 1280, height: 800 });
  try {
    const bin = process.env.LORAFIT_BIN || path.resolve(import.meta.dirname, "../../target/debug/lorafit");
    const want = JSON.parse(execFileSync(bin, ["suggest", "--model", "llama2-7b", "--gpu", "rtx4090", "--batch", "8", "--seq", "4096", "--json"], { encoding: "utf8" })).best;
    await openSections(page);
    // Once the page is still, the advice is judged by the simulated allocator, as in the CLI.
    await page.waitForSelector('[data-testid="best-fix"][data-reserve="simulated"]', { timeout: 30000 });
    await page.waitForSelector('[data-testid="fixes"][data-reserve="simulated"]', { timeout: 30000 });
    assert.equal((await page.textContent('[data-testid="best-summary"]')).trim(), want.summary);
    assert.match(await page.textContent('[data-testid="best-fix"] .pill'), /fits/);
    assert.ok(want.changes.length > 1 && !want.changes.includes("shorter_seq"));
    assert.ok(Math.abs((await gibOf(page, "best-peak")) - want.peak_allocated_bytes / GIB) <= 0.006);
    assert.match(await page.textContent('[data-testid="best-speed"]'), /time per token/);
    // Each single change says its time per token and, on a card with a cited rate, its epoch's cost.
    const speeds = await page.locator('[data-testid="fixes"] [data-testid^="fix-speed-"]').allTextContents();
    assert.ok(speeds.length > 0 && speeds.every((t) => /time per token, ≈ \$[0-9.]+ per epoch/.test(t)), speeds.join(" | "));
    // Truncation is offered last, and said to be the last resort.
    const last = page.locator('[data-testid="fixes"] li').last();
    assert.equal(await last.getAttribute("data-testid"), "fix-shorter_seq");
    assert.match(await last.textContent(), /last resort/);
    await page.click('[data-testid="apply-best"]');
    // Settled: the simulated verdict of the applied combination is "fits".
    await page.waitForFunction(() => document.querySelector("main").dataset.reserve === "simulated"
      && document.querySelector('[data-testid="verdict"]').dataset.status === "fits", null, { timeout: 30000 });
    assert.ok(Math.abs((await gibOf(page, "peak-allocated")) - want.peak_allocated_bytes / GIB) <= 0.006);
    assert.equal(await page.inputValue('[data-testid="input-seq"]'), "4096", "the sequence length stays");
    assert.equal(await page.locator('[data-testid="best-fix"]').count(), 0, "nothing left to fix");
    // Irrelevant rows stay hidden: no offload, no CPU RAM row.
    assert.equal(await page.isVisible('[data-testid="cpu-ram"]'), false);
    assert.equal(await page.isVisible('[data-testid="select-strategy"]'), false);
  } finally {
    await close();
  }
});

test("keyboard only: Tab to a segment, read its formula, change the batch, apply the fix", async () => {
  const { page, close } = await openView(browser, server.url + CASES.oom, { width: 1280, height: 800 });
  try {
    const focusedId = () => page.evaluate(() => document.activeElement?.dataset?.testid || document.activeElement?.tagName);
    let seen = [];
    for (let i = 0; i < 40; i++) {
      await page.keyboard.press("Tab");
      const id = await focusedId();
      seen.push(id);
      if (id === "segment-frozen_weights") break;
    }
    assert.equal(seen.at(-1), "segment-frozen_weights", `Tab order: ${seen.join(", ")}`);
    assert.match(await page.textContent('[data-testid="segment-detail"]'), /Frozen weights/);
    await page.keyboard.press("Tab");
    assert.match(await focusedId(), /^segment-/);
    // On to the fix (worked out by the page's worker once the page is still) and apply it with
    // Enter.
    await page.waitForSelector('[data-testid="apply-best"]', { timeout: 30000 });
    for (let i = 0; i < 40 && (await focusedId()) !== "apply-best"; i++) await page.keyboard.press("Tab");
    assert.equal(await focusedId(), "apply-best");
    await page.keyboard.press("Enter");
    assert.equal(await page.getAttribute('[data-testid="verdict"]', "data-status"), "fits");
    // The batch slider moves with the arrow keys.
    for (let i = 0; i < 40 && (await focusedId()) !== "slider-input-batch"; i++) await page.keyboard.press("Tab");
    assert.equal(await focusedId(), "slider-input-batch");
    const before = await page.inputValue('[data-testid="input-batch"]');
    await page.keyboard.press("End");
    assert.notEqual(await page.inputValue('[data-testid="input-batch"]'), before);
  } finally {
    await close();
  }
});

test("plan() for JavaScript from dist/lib matches the CLI", async () => {
  const page = await browser.newPage();
  try {
    await page.goto(server.url + "lib/");
    const url = server.url + "lib/lorafit-js.js";
    const got = await page.evaluate(async (url) => {
      const m = await import(url);
      await m.default();
      const p = m.plan({ model: "llama2-7b", settings: { batch: 4, seq: 2048, grad_ckpt: true }, gpu: "rtx4090" });
      let error = "";
      try { m.plan({ model: "llama2-7b", settings: { batch: 0 } }); } catch (e) { error = String(e.message || e); }
      return { peak: p.peak_allocated_bytes, smi: p.nvidia_smi_bytes, status: p.verdict.status, plain: Object.getPrototypeOf(p) === Object.prototype, terms: p.terms.length, error, version: m.version() };
    }, url);
    const want = cliPlan(["--model", "llama2-7b", "--gpu", "rtx4090", "--batch", "4", "--seq", "2048", "--gc"]);
    assert.equal(got.peak, want.plan.peak_allocated_bytes);
    assert.equal(got.smi, want.plan.nvidia_smi_bytes);
    assert.equal(got.status, want.verdict.status);
    assert.ok(got.plain && got.terms > 5);
    assert.match(got.error, /batch/);
    assert.match(got.version, /^\d+\.\d+\.\d+$/);
    // A stable, unhashed path, and the planner page does not carry it.
    const planner = fs.readdirSync(path.join(path.resolve(import.meta.dirname, "../../dist"))).filter((f) => f.endsWith(".js"));
    for (const f of planner) assert.ok(!fs.readFileSync(path.resolve(import.meta.dirname, "../../dist", f), "utf8").includes("export function plan("), f);
  } finally {
    await page.close();
  }
});
