// Untrusted input stays inert and degrades gracefully: script/handler/javascript: strings
// through every door (URL, pasted config.json, lengths, Hub id, search), oversized files,
// offline Hub, no service worker.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { serve, launch, openApp, openSections, gibOf } from "./harness.mjs";

export const INJECTED = [
  "<script>window.__pwned=1</script>",
  '<img src=x onerror="window.__pwned=1">',
  "javascript:window.__pwned=1",
  '" onmouseover="window.__pwned=1" x="',
  "'><svg onload=window.__pwned=1>",
];

let server, browser;
before(async () => {
  server = await serve("/");
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

async function assertInert(page, where) {
  const bad = await page.evaluate(() => {
    const found = [];
    if (window.__pwned) found.push("window.__pwned set");
    for (const el of document.querySelectorAll("*")) {
      for (const a of el.attributes) {
        if (a.name.startsWith("on")) found.push(`${el.tagName} has ${a.name}`);
        if (/^\s*javascript:/i.test(a.value) && (a.name === "href" || a.name === "src")) found.push(`${el.tagName} ${a.name}=${a.value}`);
      }
    }
    if (document.querySelectorAll("script:not([src])").length) found.push("inline script element");
    if (document.querySelectorAll("img, iframe, object, embed").length) found.push("injected media element");
    return found;
  });
  assert.deepEqual(bad, [], where);
}

test("strings injected through the URL are shown as text, never markup", async () => {
  for (const s of INJECTED) {
    const e = encodeURIComponent(s);
    const { page, errors } = await openApp(browser, server.url + `?model=${e}&${e}=1&t=${e}&arch=${e}&hub=${e}`);
    const notices = await page.textContent('[data-testid="notices"]');
    assert.ok(notices.includes(s.slice(0, 20)) || notices.includes("ignored"), notices);
    await page.hover('[data-testid="segment-frozen_weights"]');
    await assertInert(page, `url ${s}`);
    assert.deepEqual(errors, []);
    await page.close();
  }
});

test("strings injected through config.json, lengths, Hub id and search stay inert", async () => {
  const { page } = await openApp(browser, server.url);
  for (const s of INJECTED) {
    await page.fill('[data-testid="config-input"]', JSON.stringify({ model_type: s, _name_or_path: s, [s]: s, hidden_size: 64 }));
    await page.click('[data-testid="config-apply"]');
    assert.match(await page.textContent('[data-testid="config-status"]'), /not supported/);
    await page.fill('[data-testid="config-input"]', JSON.stringify({ model_type: "llama", _name_or_path: s, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, vocab_size: 100 }));
    await page.click('[data-testid="config-apply"]');
    await page.fill('[data-testid="lengths-input"]', JSON.stringify({ text: s }) + "\n" + s);
    await page.click('[data-testid="lengths-analyze"]');
    await page.fill('[data-testid="hub-id"]', s);
    await page.click('[data-testid="hub-fetch"]');
    await page.fill('[data-testid="search-model"]', s);
    await assertInert(page, `panels ${s}`);
  }
  await page.close();
});

test("oversized files get one clear message and the plan stays", async () => {
  const { page } = await openApp(browser, server.url);
  const before = await gibOf(page, "peak-allocated");
  const huge = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "lorafit-")), "huge.jsonl");
  fs.writeFileSync(huge, Buffer.alloc(100 * 1024 * 1024, 0x31));
  await page.setInputFiles('[data-testid="lengths-file"]', huge);
  await page.waitForSelector('[data-testid="lengths-error"]', { timeout: 30000 });
  assert.match(await page.textContent('[data-testid="lengths-error"]'), /100\.0 MiB; the limit is 64 MiB/);
  await page.setInputFiles('[data-testid="config-file"]', { name: "config.json", mimeType: "application/json", buffer: Buffer.alloc(2 * 1024 * 1024, 0x20) });
  await page.waitForSelector('[data-testid="config-status"].error');
  assert.match(await page.textContent('[data-testid="config-status"]'), /limit is 1 MiB/);
  assert.equal(await gibOf(page, "peak-allocated"), before);
  await page.close();
  fs.rmSync(huge);
});

test("offline Hub fetch explains and keeps the catalog working; no service worker is fine", async () => {
  const context = await browser.newContext({ serviceWorkers: "block" });
  const page = await context.newPage();
  await page.goto(server.url + "?model=qwen2-7b");
  await page.waitForSelector('[data-testid="peak-allocated"]');
  await openSections(page);
  const before = await gibOf(page, "peak-allocated");
  await context.setOffline(true);
  await page.fill('[data-testid="hub-id"]', "meta-llama/Llama-2-7b-hf");
  await page.click('[data-testid="hub-fetch"]');
  await page.waitForFunction(() => /could not reach/.test(document.querySelector('[data-testid="config-status"]')?.textContent || ""), null, { timeout: 15000 });
  assert.equal(await gibOf(page, "peak-allocated"), before);
  await context.close();
});
