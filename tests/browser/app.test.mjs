// The release build in a real headless Chromium: numbers match the CLI, every control reaches
// the model, and the page works under a sub-path. Screenshots go to test-artifacts/.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { serve, launch, openApp, openSections, plannerIs, settled, cliPlan, gibOf, GIB, artifacts } from "./harness.mjs";

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

async function expectMatchesCli(page, args) {
  const want = cliPlan(args).plan;
  for (const [testid, key] of [["peak-allocated", "peak_allocated_bytes"], ["peak-reserved", "peak_reserved_bytes"], ["peak-smi", "nvidia_smi_bytes"]]) {
    const shown = await gibOf(page, testid);
    assert.ok(Math.abs(shown - want[key] / GIB) <= 0.006, `${testid}: page ${shown} vs CLI ${(want[key] / GIB).toFixed(3)} for ${args.join(" ")}`);
  }
}

test("default view matches the CLI and has every output", async () => {
  const { page, errors } = await openApp(browser, server.url);
  // The first screen opens on Qwen3-8B, a dense model people fine-tune now.
  assert.equal(await page.inputValue('[data-testid="select-model"]'), "qwen3-8b");
  await expectMatchesCli(page, ["--model", "qwen3-8b", "--gpu", "a100-80"]);
  assert.match(await page.getAttribute('[data-testid="verdict"]', "data-status"), /^(fits|tight|oom)$/);
  assert.match(await page.textContent('[data-testid="max-batch"]'), /^\d+$/);
  assert.match(await page.textContent('[data-testid="max-seq"]'), /^\d+$/);
  assert.ok(await page.locator('[data-testid="segment-frozen_weights"]').count() === 1);
  assert.ok(await page.locator('[data-testid="segment-logits_loss"]').count() === 1);
  await page.screenshot({ path: path.join(artifacts, "default.png"), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

test("the first bundle plans a dense step alone, and reloads the page as the full planner, state and open sections kept, for a step that needs more", async () => {
  const { page, errors } = await openApp(browser, server.url + "?model=llama3.2-1b&gpu=l4&s=1024");
  const fetched = () => page.evaluate(() => performance.getEntriesByType("resource").map((e) => e.name.split("/").pop()));
  assert.equal(await page.getAttribute("main", "data-planner"), "first");
  assert.ok(!(await fetched()).some((f) => f.startsWith("lorafit-full")), "a dense step loads no full planner");
  await expectMatchesCli(page, ["--model", "llama3.2-1b", "--gpu", "l4", "--seq", "1024"]);
  // Preference training is one of the extended ops: the page hands over, with its state and
  // its open sections, and the full planner plans it.
  await page.selectOption('[data-testid="select-stage"]', "dpo");
  await plannerIs(page, "full");
  assert.ok((await fetched()).includes("lorafit-full_bg.wasm"));
  assert.equal(await page.getAttribute('[data-testid="sections"]', "data-state"), "ready", "the sections reopened");
  assert.match(page.url(), /model=llama3\.2-1b/);
  await expectMatchesCli(page, ["--model", "llama3.2-1b", "--gpu", "l4", "--seq", "1024", "--stage", "dpo"]);
  // The tab stays on the full planner: a dense SFT step there is the first bundle's plan.
  await page.goto(server.url + "?model=llama2-7b&gpu=l4&s=1024");
  await plannerIs(page, "full");
  await expectMatchesCli(page, ["--model", "llama2-7b", "--gpu", "l4", "--seq", "1024"]);
  assert.deepEqual(errors, []);
  await page.close();
});

test("offline without the full planner cached, the first bundle says which ops it leaves out, and reloads no more", async () => {
  // boot.js marks the tab so when lorafit-full cannot be loaded (src/web/full.rs).
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.addInitScript(() => sessionStorage.setItem("lorafit-planner", "full-failed"));
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  let loads = 0;
  page.on("load", () => loads++);
  await page.goto(server.url + "?model=llama3.2-1b&gpu=l4&dora=1");
  await page.waitForSelector('[data-testid="error"]:not(.hidden)', { timeout: 30000 });
  assert.equal(await page.getAttribute("main", "data-planner"), "first");
  assert.match(await page.textContent('[data-testid="error"]'), /first bundle does not plan DoRA: the full planner does; the full planner could not be loaded \(offline\?\)/);
  assert.match(await page.getAttribute('[data-testid="error"]', "class"), /handover/, "shown as a hand-over, not as an error");
  await page.waitForTimeout(1000);
  assert.equal(loads, 1, "no reload loop");
  await page.screenshot({ path: path.join(artifacts, "handover-offline.png") });
  // In Chinese, each part translated.
  await page.goto(server.url + "?model=llama3.2-1b&gpu=l4&dora=1&lang=zh");
  await page.waitForFunction(() => /首个程序包不估算DoRA（权重分解 LoRA）：.*；完整的估算器无法加载/.test(document.querySelector('[data-testid="error"]')?.textContent || ""), null, { timeout: 30000 });
  await page.screenshot({ path: path.join(artifacts, "handover-offline-zh.png") });
  assert.deepEqual(errors, []);
  await context.close();
});

test("a mixture-of-experts model shows its experts, its settings group, and matches the CLI", async () => {
  const { page, errors } = await openApp(browser, server.url);
  await page.selectOption('[data-testid="select-model"]', "qwen3-30b-a3b");
  // Experts are the full planner's (src/web/full.rs): the page reloads as it, with its state.
  await page.waitForSelector('main[data-planner="full"]', { timeout: 30000 });
  // all-linear names gate_proj, up_proj and down_proj: peft 0.21 maps them onto the fused
  // experts, whose ParamWrapper refuses the default dropout: the page says so and how to fix it.
  await page.waitForSelector('[data-testid="error"]:not(.hidden)', { timeout: 30000 });
  assert.match(await page.textContent('[data-testid="error"]'), /lora_dropout.*ParamWrapper.*set it to 0/);
  await page.waitForSelector('[data-testid="input-dropout"]', { timeout: 30000 });
  await page.fill('[data-testid="input-dropout"]', "0");
  await page.waitForSelector('[data-testid="error"].hidden', { state: "attached", timeout: 30000 });
  await plannerIs(page, "full");
  await page.selectOption('[data-testid="select-gpu"]', "h200");
  await page.fill('[data-testid="input-seq"]', "2048");
  await page.check('[data-testid="toggle-gc"]');
  await page.waitForSelector('[data-testid="moe-settings"]');
  assert.ok(await page.locator('[data-testid="segment-frozen_experts"]').count() === 1);
  assert.match(await page.textContent('[data-testid="params"]'), /active per token/);
  await expectMatchesCli(page, ["--model", "qwen3-30b-a3b", "--gpu", "h200", "--seq", "2048", "--gc", "--dropout", "0"]);
  await page.check('[data-testid="expert-lora-gate_up_proj"]');
  await page.check('[data-testid="expert-lora-down_proj"]');
  await expectMatchesCli(page, ["--model", "qwen3-30b-a3b", "--gpu", "h200", "--seq", "2048", "--gc", "--dropout", "0", "--target-parameters", "gate_up_proj,down_proj"]);
  await page.screenshot({ path: path.join(artifacts, "moe.png"), fullPage: true });
  await page.selectOption('[data-testid="select-model"]', "gpt-oss-20b");
  assert.match(await page.textContent('[data-testid="plan-notes"]'), /Mxfp4Config\(dequantize=True\)/);
  // transformers 4's layout (the published Mixtral QLoRA runs): experts quantized as Linear layers.
  await page.goto(server.url + "?model=mixtral-8x7b&gpu=a100-80&b=4&s=4096&gc=1&dt=nf4&ac=bf16&t=q,k,v,o&el=per_expert");
  await page.waitForSelector('main[data-reserve="simulated"]', { timeout: 30000 });
  await openSections(page);
  assert.equal(await page.inputValue('[data-testid="select-experts-layout"]'), "per_expert");
  assert.equal(await page.isVisible('[data-testid="select-experts"]'), false, "no experts_implementation in transformers 4");
  assert.match(await page.textContent('[data-testid="plan-notes"]'), /transformers 4 layout/);
  await expectMatchesCli(page, ["--model", "mixtral-8x7b", "--gpu", "a100-80", "--batch", "4", "--seq", "4096", "--gc", "--quant", "nf4", "--autocast", "bf16", "--targets", "q,k,v,o", "--experts-layout", "per_expert"]);
  await page.selectOption('[data-testid="select-model"]', "llama2-7b");
  assert.equal(await page.locator('[data-testid="moe-settings"]').count(), 0);
  assert.deepEqual(errors, []);
  await page.close();
});

test("vision-language models show their image settings and the tower as its own group, and match the CLI", async () => {
  const { page, errors } = await openApp(browser, server.url);
  assert.equal(await page.locator('[data-testid="image-settings"]').count(), 0);
  await page.selectOption('[data-testid="select-model"]', "qwen3.5-4b");
  await plannerIs(page, "full");
  await page.selectOption('[data-testid="select-gpu"]', "h200");
  await page.waitForSelector('[data-testid="image-settings"]');
  await page.fill('[data-testid="input-seq"]', "2048");
  await page.fill('[data-testid="input-images"]', "2");
  await page.fill('[data-testid="input-image-width"]', "1280");
  await page.fill('[data-testid="input-image-height"]', "720");
  await page.waitForFunction(() => document.querySelector('[data-testid="plan-notes"]')?.textContent.includes("576 visual tokens"));
  assert.ok(await page.locator('[data-testid="segment-vision_tower"]').count() === 1);
  assert.match(await page.textContent('[data-testid="plan-notes"]'), /flash-linear-attention/);
  await expectMatchesCli(page, ["--model", "qwen3.5-4b", "--gpu", "h200", "--seq", "2048", "--images-per-sample", "2", "--image-width", "1280", "--image-height", "720"]);
  await page.screenshot({ path: path.join(artifacts, "vision.png"), fullPage: true });
  // Qwen3-VL-8B on a 24 GB card ("24G 微调 8B 多模态够吗"): its deepstack features are named.
  await page.selectOption('[data-testid="select-model"]', "qwen3-vl-8b");
  await page.selectOption('[data-testid="select-gpu"]', "rtx4090");
  await page.waitForSelector('[data-testid="image-settings"]');
  await page.fill('[data-testid="input-images"]', "1");
  await page.check('[data-testid="toggle-gc"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="plan-notes"]')?.textContent.includes("deepstack mergers"));
  assert.ok(await page.locator('[data-testid="segment-vision_tower"]').count() === 1);
  await expectMatchesCli(page, ["--model", "qwen3-vl-8b", "--gpu", "rtx4090", "--seq", "2048", "--gc", "--images-per-sample", "1", "--image-width", "1280", "--image-height", "720"]);
  await page.screenshot({ path: path.join(artifacts, "vision-qwen3vl.png"), fullPage: true });
  // Qwen2.5-VL-7B with checkpointing: its windowed tower builds a graph (the patch embedding hook).
  await page.selectOption('[data-testid="select-model"]', "qwen2.5-vl-7b");
  await page.waitForFunction(() => document.querySelector('[data-testid="plan-notes"]')?.textContent.includes("within windows"));
  assert.match(await page.textContent('[data-testid="plan-notes"]'), /hooks its patch embedding/);
  assert.ok(await page.locator('[data-testid="segment-vision_tower"]').count() === 1);
  await expectMatchesCli(page, ["--model", "qwen2.5-vl-7b", "--gpu", "rtx4090", "--seq", "2048", "--gc", "--images-per-sample", "1", "--image-width", "1280", "--image-height", "720"]);
  await page.screenshot({ path: path.join(artifacts, "vision-qwen25vl.png"), fullPage: true });
  await page.selectOption('[data-testid="select-model"]', "llama2-7b");
  assert.equal(await page.locator('[data-testid="image-settings"]').count(), 0);
  assert.deepEqual(errors, []);
  await page.close();
});

test("changed settings match the CLI", async () => {
  const { page } = await openApp(browser, server.url);
  await page.selectOption('[data-testid="select-model"]', "qwen2-7b");
  await page.selectOption('[data-testid="select-gpu"]', "a100-40");
  await page.fill('[data-testid="input-batch"]', "4");
  await page.fill('[data-testid="input-seq"]', "2048");
  await page.fill('[data-testid="input-rank"]', "64");
  await page.check('[data-testid="toggle-gc"]');
  await expectMatchesCli(page, ["--model", "qwen2-7b", "--gpu", "a100-40", "--batch", "4", "--seq", "2048", "--rank", "64", "--gc"]);
  await page.selectOption('[data-testid="select-dtype"]', "nf4");
  await page.selectOption('[data-testid="select-attn"]', "eager");
  await page.selectOption('[data-testid="select-optimizer"]', "adamw_8bit");
  await page.fill('[data-testid="input-dropout"]', "0");
  await expectMatchesCli(page, ["--model", "qwen2-7b", "--gpu", "a100-40", "--batch", "4", "--seq", "2048", "--rank", "64", "--gc", "--quant", "nf4", "--attn", "eager", "--optimizer", "adamw_8bit", "--dropout", "0"]);
  // An 8-bit base (LLM.int8), planned by the first bundle like the 4-bit one.
  await page.selectOption('[data-testid="select-dtype"]', "int8");
  await expectMatchesCli(page, ["--model", "qwen2-7b", "--gpu", "a100-40", "--batch", "4", "--seq", "2048", "--rank", "64", "--gc", "--quant", "int8", "--attn", "eager", "--optimizer", "adamw_8bit", "--dropout", "0"]);
  await page.close();
});

test("every memory control changes the plan", async () => {
  const { page } = await openApp(browser, server.url);
  const snapshot = async () => (await page.textContent('[data-testid="breakdown"]')) + (await page.textContent('[data-testid="peak-allocated"]'));
  const steps = [
    ["input-batch", (p) => p.fill('[data-testid="input-batch"]', "3")],
    ["input-seq", (p) => p.fill('[data-testid="input-seq"]', "4096")],
    ["input-rank", (p) => p.fill('[data-testid="input-rank"]', "128")],
    ["input-dropout", (p) => p.fill('[data-testid="input-dropout"]', "0")],
    ["select-dtype", (p) => p.selectOption('[data-testid="select-dtype"]', "fp32")],
    ["select-attn", (p) => p.selectOption('[data-testid="select-attn"]', "eager")],
    ["select-optimizer", (p) => p.selectOption('[data-testid="select-optimizer"]', "sgd")],
    ["toggle-gc", (p) => p.check('[data-testid="toggle-gc"]')],
    ["select-model", (p) => p.selectOption('[data-testid="select-model"]', "gemma2-2b")],
  ];
  for (const [name, act] of steps) {
    const before = await snapshot();
    await act(page);
    assert.notEqual(await snapshot(), before, `${name} did not change the plan`);
  }
  // Accumulation changes no memory, only the effective batch.
  const eff = await page.textContent('[data-testid="per-gpu"]');
  await page.fill('[data-testid="input-grad-accum"]', "8");
  assert.notEqual(await page.textContent('[data-testid="per-gpu"]'), eff, "input-grad-accum did not reach the plan");
  const verdictBefore = (await page.textContent(".verdict")) + (await page.textContent('[data-testid="max-batch"]'));
  await page.selectOption('[data-testid="select-gpu"]', "t4");
  assert.notEqual((await page.textContent(".verdict")) + (await page.textContent('[data-testid="max-batch"]')), verdictBefore, "select-gpu did not change the verdict");
  await page.close();
});

test("extreme values never crash the page", async () => {
  const { page, errors } = await openApp(browser, server.url);
  await page.selectOption('[data-testid="select-model"]', "llama3.1-405b");
  await page.fill('[data-testid="input-batch"]', "999999");
  await page.fill('[data-testid="input-seq"]', "99999999");
  await page.fill('[data-testid="input-rank"]', "-5");
  await page.fill('[data-testid="input-dropout"]', "1e309");
  await page.selectOption('[data-testid="select-attn"]', "eager");
  // A step past what an allocation sequence holds (its memory past an exbibyte) is refused,
  // naming the setting, in the page's alert.
  assert.match(await page.textContent('[data-testid="error"]'), /seq.*too large a step to plan/);
  assert.equal(await page.isVisible('[data-testid="error"]'), true);
  // Back within what a step holds, it plans again: out of memory on any GPU.
  await page.fill('[data-testid="input-batch"]', "8");
  await page.fill('[data-testid="input-seq"]', "131072");
  assert.equal(await page.getAttribute('[data-testid="verdict"]', "data-status"), "oom");
  await gibOf(page, "peak-allocated");
  assert.deepEqual(errors, []);
  await page.close();
});

test("release build works under a sub-path", async () => {
  const sub = await serve("/docs/lorafit/");
  try {
    const { page, errors } = await openApp(browser, sub.url);
    await expectMatchesCli(page, ["--model", "qwen3-8b", "--gpu", "a100-80"]);
    assert.deepEqual(errors, []);
    await page.close();
  } finally {
    await sub.close();
  }
});
