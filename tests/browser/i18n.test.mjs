// The page in 简体中文: chosen by the browser's language or `lang=zh`, switched in one click, kept
// in the link and in embeds, `<html lang>` following it; no English sentence left in the visible
// page (code identifiers, model and GPU names excepted); the same numbers as in English; layout
// holds at the UX tests' sizes; the forum's questions as one-click examples. Screenshots go to
// test-artifacts/.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { serve, launch, openView, openSections, layoutOf, gibOf, artifacts } from "./harness.mjs";

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

const OOM = "?model=llama2-7b&gpu=rtx4090&b=8&s=4096";
const FITS = "?model=qwen2-7b&gpu=a100-80&gc=1";

// Words that stay English in Chinese text: names of things users type or read in code and logs.
const KEEP = new Set(`LoRA QLoRA GPU GPUs CPU CUDA MLP MoE PyTorch peft transformers bitsandbytes AdamW
AdamW8bit Adam8bit Adam SGD Adafactor logits dropout token tokens nvidia smi GiB MiB KiB GB MB Hub Hugging
Face DDP FSDP ZeRO DeepSpeed NCCL cuBLAS cuDNN Liger RMSNorm SwiGLU SiLU Trainer BF16 FP16 FP32 bf16 fp16
fp32 nf4 fp4 eager sdpa flash autocast lorafit Llama Qwen Mistral Mixtral Gemma OLMoE DeepSeek gpt oss
NVIDIA GeForce RTX Ada Ampere Turing A100 H100 WebGPU FLOPs JSON JSONL CSV config json pickle gz rank
alpha memory summary stats snapshot README lib plan js KV Cache cos sin batch size text length`.split(/\s+/));

/** English runs of two or more words in the visible text, outside code, selects and names. */
async function englishLeft(page) {
  // Open every section's details, so collapsed texts are read too.
  await page.evaluate(() => document.querySelectorAll("details").forEach((d) => { d.open = true; }));
  await page.waitForTimeout(300);
  const texts = await page.evaluate(() => {
    const out = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const el = n.parentElement;
      if (!el || el.closest("code, select, option, script, style, textarea, [translate=no], q, .gpu-panel")) continue;
      const r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      if (getComputedStyle(el).visibility === "hidden") continue;
      const t = n.textContent.trim();
      if (t) out.push(t);
    }
    return out;
  });
  const bad = [];
  for (const t of texts) {
    // Identifiers (q_proj, use_cache=False, torch.cuda.x()), numbers and units are not words.
    const words = t.split(/[\s,;:·()（）“”"'—–+×→≈%|/]+/).filter(Boolean);
    let run = [];
    for (const w of words) {
      const english = /^[A-Za-z]{2,}$/.test(w) && !KEEP.has(w) && !/[A-Z].*[A-Z]/.test(w.slice(1));
      if (english) run.push(w);
      else { if (run.length >= 2) bad.push(`${run.join(" ")}  ⟵ ${t.slice(0, 120)}`); run = []; }
    }
    if (run.length >= 2) bad.push(`${run.join(" ")}  ⟵ ${t.slice(0, 120)}`);
  }
  return [...new Set(bad)];
}

for (const [status, query] of Object.entries({ oom: OOM, fits: FITS })) {
  test(`中文 ${status}: no English sentence left, the same numbers and status as English`, async () => {
    const en = await openView(browser, server.url + query, { width: 1280, height: 900 });
    const zh = await openView(browser, server.url + query + "&lang=zh", { width: 1280, height: 900 });
    try {
      assert.equal(await zh.page.evaluate(() => document.documentElement.lang), "zh-CN");
      assert.equal(await en.page.evaluate(() => document.documentElement.lang), "en");
      for (const id of ["peak-allocated", "peak-reserved", "peak-smi"]) {
        assert.equal(await gibOf(zh.page, id), await gibOf(en.page, id), id);
      }
      for (const id of ["verdict"]) {
        assert.equal(await zh.page.getAttribute(`[data-testid="${id}"]`, "data-status"), await en.page.getAttribute(`[data-testid="${id}"]`, "data-status"));
      }
      assert.equal(await zh.page.textContent('[data-testid="max-batch"]') !== null, true);
      // Open the sections (their own wasm, in the same language) and the myths (their texts are
      // built on opening).
      await openSections(zh.page);
      await zh.page.click('[data-testid="myths-toggle"]');
      await zh.page.waitForSelector('[data-testid="myths"] li');
      const left = await englishLeft(zh.page);
      await zh.page.screenshot({ path: path.join(artifacts, `i18n-zh-desktop-${status}-full.png`), fullPage: true });
      assert.deepEqual(left, [], "English left in the 中文 page");
      assert.deepEqual(zh.errors, []);
    } finally {
      await en.close();
      await zh.close();
    }
  });
}

test("the browser's language decides on the first visit; one click switches; the link and a reload keep it", async () => {
  const { page, close, errors } = await openView(browser, server.url + OOM, { width: 1280, height: 800, locale: "zh-CN" });
  try {
    assert.equal(await page.evaluate(() => document.documentElement.lang), "zh-CN");
    await page.waitForFunction(() => location.search.includes("lang=zh"), null, { timeout: 5000 });
    await page.click('[data-testid="lang-switch"]');
    await page.waitForFunction(() => document.documentElement.lang === "en");
    await page.waitForFunction(() => location.search.includes("lang=en"), null, { timeout: 5000 });
    assert.match(await page.textContent('[data-testid="verdict"]'), /Out of memory/);
    await page.reload();
    await page.waitForSelector('[data-testid="peak-allocated"]');
    assert.equal(await page.evaluate(() => document.documentElement.lang), "en");
    await page.click('[data-testid="lang-switch"]');
    await page.waitForFunction(() => document.documentElement.lang === "zh-CN");
    assert.match(await page.textContent('[data-testid="verdict"]'), /显存不足/);
    assert.equal(await page.getAttribute('[data-testid="verdict"]', "data-status"), "oom");
    // The share link and the embed code carry the language.
    await openSections(page);
    assert.match(await page.inputValue('[data-testid="share-url"]'), /lang=zh/);
    assert.match(await page.inputValue('[data-testid="embed-code"]'), /lang=zh/);
    assert.deepEqual(errors, []);
  } finally {
    await close();
  }
});

test("the Chinese table is fetched only for a Chinese page; without it the page is English and says so", async () => {
  const fetched = async (url) => {
    const { page, close, errors } = await openView(browser, url, { width: 1280, height: 800 });
    const zh = await page.evaluate(() => performance.getEntriesByType("resource").filter((r) => r.name.endsWith("/zh.json")).length);
    return { page, close, errors, zh };
  };
  const en = await fetched(server.url + OOM);
  assert.equal(en.zh, 0, "an English visit loads no Chinese table");
  await en.close();
  const zh = await fetched(server.url + OOM + "&lang=zh");
  assert.equal(zh.zh, 1);
  assert.match(await zh.page.textContent('[data-testid="verdict"]'), /显存不足/);
  await zh.close();
  // The table cannot be fetched: English texts, one notice, no error.
  const broken = await serve("/", { "zh.json": { status: 404, body: "" } });
  try {
    const { page, close, errors } = await openView(browser, broken.url + OOM + "&lang=zh", { width: 1280, height: 800 });
    assert.match(await page.textContent('[data-testid="verdict"]'), /Out of memory/);
    assert.match(await page.textContent('[data-testid="notices"]'), /Chinese texts could not be loaded/);
    assert.deepEqual(errors.filter((e) => !/404/.test(e)), []);
    await close();
  } finally {
    await broken.close();
  }
});

for (const [name, width, height] of [["desktop", 1280, 800], ["phone", 390, 844], ["narrow", 360, 740]]) {
  for (const scheme of ["light", "dark"]) {
    if (name === "narrow" && scheme === "dark") continue;
    test(`中文 ${name} ${width}×${height} ${scheme}: no overflow, verdict and bar in the first screen`, async () => {
      const { page, close, errors } = await openView(browser, server.url + OOM + "&lang=zh", { width, height, colorScheme: scheme });
      try {
        await page.waitForSelector('[data-testid="best-fix"]', { timeout: 30000 });
        const l = await layoutOf(page, ["verdict", "peak-allocated", "breakdown-bar", "best-fix"]);
        await page.screenshot({ path: path.join(artifacts, `i18n-zh-${name}-${scheme}.png`) });
        assert.ok(l.overflow <= 0, `horizontal overflow of ${l.overflow}px`);
        for (const id of ["verdict", "peak-allocated", "breakdown-bar"]) {
          assert.ok(l[id] && l[id].top >= 0 && l[id].bottom <= height && l[id].right <= width + 0.5, `${id} ${JSON.stringify(l[id])}`);
        }
        assert.deepEqual(errors, []);
      } finally {
        await close();
      }
    });
  }
}

for (const [width, height] of [[640, 400], [480, 360], [800, 600]]) {
  test(`中文 embed ${width}×${height}: everything inside the frame, the full page keeps the language`, async () => {
    const { page, close, errors } = await openView(browser, server.url + OOM + "&lang=zh&embed=1", { width, height, colorScheme: width === 480 ? "dark" : "light" });
    try {
      await page.screenshot({ path: path.join(artifacts, `i18n-zh-embed-${width}x${height}.png`) });
      assert.equal(await page.evaluate(() => document.documentElement.lang), "zh-CN");
      const ids = ["verdict", "peak-allocated", "peak-reserved", "peak-smi", "breakdown-bar", "input-batch", "input-seq", "input-rank", "open-full"];
      const l = await layoutOf(page, ids);
      assert.ok(l.overflow <= 0, `horizontal overflow of ${l.overflow}px`);
      for (const id of ids) assert.ok(l[id] && l[id].top >= 0 && l[id].bottom <= height + 0.5 && l[id].right <= width + 0.5, `${id} ${JSON.stringify(l[id])}`);
      const scroll = await page.evaluate(() => document.documentElement.scrollHeight - window.innerHeight);
      assert.ok(scroll <= 0, `the embed scrolls by ${scroll}px`);
      assert.match(await page.getAttribute('[data-testid="open-full"]', "href"), /lang=zh/);
      assert.deepEqual(await englishLeft(page), []);
      assert.deepEqual(errors, []);
    } finally {
      await close();
    }
  });
}

test("the forum's questions: the Qwen2-7B 32 GB guide planned row by row, the mid-training OOM analysed", async () => {
  const { page, close, errors } = await openView(browser, server.url + "?lang=zh", { width: 1280, height: 900 });
  try {
    await openSections(page);
    await page.click('[data-testid="example-qwen2-32gb"]');
    await page.waitForSelector('[data-testid="example-table"]');
    const rows = await page.$$eval('[data-testid^="example-row-"]', (rs) => rs.map((r) => r.getAttribute("data-status")));
    assert.equal(rows.length, 5);
    assert.ok(rows.every((s) => ["fits", "tight", "oom"].includes(s)), rows.join());
    // One click applied the first row: the page plans Qwen2-7B on the 32 GB V100.
    assert.match(await page.inputValue('[data-testid="select-gpu"]'), /v100-32/);
    await page.click('[data-testid="example-apply-4"]');
    await page.waitForFunction(() => location.search.includes("dt=nf4"), null, { timeout: 5000 });
    await page.screenshot({ path: path.join(artifacts, "i18n-zh-examples.png") });
    await page.click('[data-testid="example-mid-training"]');
    await page.waitForSelector('[data-testid="lengths-report"]');
    assert.match(await page.inputValue('[data-testid="lengths-input"]'), /max=7800/);
    assert.ok((await page.textContent('[data-testid="lengths-longest"]')).includes("GiB"));
    await page.click('[data-testid="example-7b-oom"]');
    await page.waitForFunction(() => document.querySelector('[data-testid="verdict"]')?.getAttribute("data-status") === "oom");
    await page.waitForSelector('[data-testid="best-fix"]');
    assert.deepEqual(errors, []);
  } finally {
    await close();
  }
});

test("中文 time panel: the GPU page follows the planner's language", async () => {
  const { page, close, errors } = await openView(browser, server.url + "?model=qwen2-7b&gpu=h100-80&gc=1&lang=zh", { width: 1280, height: 900 });
  try {
    await openSections(page);
    await page.click('[data-testid="open-gpu-panel"]');
    await page.frameLocator('[data-testid="gpu-panel"]').locator('[data-testid="tokens-per-second"]').waitFor({ timeout: 30000 });
    const frame = page.frames().find((f) => f.url().includes("/gpu/"));
    assert.equal(await frame.evaluate(() => document.documentElement.lang), "zh-CN");
    await frame.click('[data-testid="gpu-measure"]');
    await frame.waitForFunction(() => !document.querySelector('[data-testid="gpu-status"]').textContent.includes("尚未"), null, { timeout: 15000 });
    assert.deepEqual(await englishLeft(frame), []);
    assert.deepEqual(errors, []);
  } finally {
    await close();
  }
});
