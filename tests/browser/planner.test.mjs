// The planner's features in a real browser: URL state, embed mode, malformed links, offline
// reload through the service worker, formula on focus, compare, curve, target modules, search.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { serve, launch, openApp, openSections, settled, plannerIs, cliPlan, gibOf, GIB, artifacts } from "./harness.mjs";

const root = path.resolve(import.meta.dirname, "../..");

let server, browser;
before(async () => {
  fs.mkdirSync(artifacts, { recursive: true });
  server = await serve("/app/");
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

test("settings round-trip through the URL", async () => {
  const { page } = await openApp(browser, server.url);
  await page.selectOption('[data-testid="select-model"]', "mistral-7b-v0.1");
  await page.fill('[data-testid="input-batch"]', "3");
  await page.fill('[data-testid="input-seq"]', "3000");
  await page.selectOption('[data-testid="select-optimizer"]', "paged_adamw_8bit");
  await page.uncheck('[data-testid="target-down"]');
  await page.check('[data-testid="toggle-gc"]');
  const shown = await gibOf(page, "peak-allocated");
  const link = await page.inputValue('[data-testid="share-url"]');
  // The address bar follows the state (debounced by 200 ms).
  await page.waitForFunction((q) => location.search === q, new URL(link).search, { timeout: 5000 });
  const again = await openApp(browser, link);
  assert.equal(await gibOf(again.page, "peak-allocated"), shown);
  assert.equal(await again.page.inputValue('[data-testid="input-seq"]'), "3000");
  assert.equal(await again.page.isChecked('[data-testid="target-down"]'), false);
  assert.equal(await again.page.isChecked('[data-testid="toggle-gc"]'), true);
  const want = cliPlan(["--model", "mistral-7b-v0.1", "--batch", "3", "--seq", "3000", "--optimizer", "paged_adamw_8bit", "--targets", "q,k,v,o,gate,up", "--gc"]).plan;
  assert.ok(Math.abs(shown - want.peak_allocated_bytes / GIB) <= 0.006);
  await page.reload();
  await page.waitForSelector('[data-testid="peak-allocated"]');
  assert.equal(await gibOf(page, "peak-allocated"), shown, "reload restores");
  await page.close();
  await again.page.close();
});

test("malformed parameters are ignored with a visible notice", async () => {
  const { page, errors } = await openApp(browser, server.url + "?b=abc&s=2048&zzz=%3Cscript%3Ealert(1)%3C/script%3E&model=nope&r=-4");
  const notices = await page.textContent('[data-testid="notices"]');
  assert.match(notices, /b=abc/);
  assert.match(notices, /zzz/);
  assert.match(notices, /model=nope/);
  assert.equal(await page.inputValue('[data-testid="input-seq"]'), "2048", "valid parameters still apply");
  assert.equal(await page.inputValue('[data-testid="input-batch"]'), "1");
  assert.equal(await page.locator("script:not([src])").count(), 0, "nothing was injected as markup");
  assert.deepEqual(errors, []);
  await page.close();
});

test("embed mode is a compact widget with an embed snippet", async () => {
  const main = await openApp(browser, server.url + "?model=qwen2.5-7b");
  const code = await main.page.inputValue('[data-testid="embed-code"]');
  assert.match(code, /^<iframe src="[^"]+embed=1[^"]*"/);
  const src = code.match(/src="([^"]+)"/)[1];
  const { page, errors } = await openApp(browser, src, { sections: false });
  assert.equal(await page.locator("h1").count(), 0, "no page chrome");
  assert.equal(await page.locator('[data-testid="sections"]').count(), 0, "no sections");
  assert.equal(await page.locator('[data-testid="curve"]').count(), 0);
  assert.match(await page.getAttribute('[data-testid="verdict"]', "data-status"), /^(fits|tight|oom)$/);
  assert.equal(await gibOf(page, "peak-allocated"), await gibOf(main.page, "peak-allocated"));
  await page.setViewportSize({ width: 720, height: 640 });
  await page.screenshot({ path: path.join(artifacts, "embed.png") });
  assert.deepEqual(errors, []);
  await page.close();
  await main.page.close();
});

test("focusing a segment shows its formula with numbers", async () => {
  const { page } = await openApp(browser, server.url + "?model=llama2-7b");
  // The settled plan: its terms are the tensors live at the step's peak, grouped.
  await settled(page);
  await page.focus('[data-testid="segment-act_dropout"]');
  const detail = await page.textContent('[data-testid="segment-detail"]');
  assert.match(detail, /LoRA dropout output \(attention\)/);
  // q, k, v and o_proj's dropouts in every layer: fp32 copies of hidden-wide inputs.
  assert.match(detail, /layers × per layer × tokens × hidden × 4 B/);
  assert.match(detail, /= 32 × 4 × 1024 × 4096 × 4 B/);
  await page.close();
});

test("pin and compare shows per-component deltas", async () => {
  const { page } = await openApp(browser, server.url + "?model=llama2-7b");
  await page.click('[data-testid="pin"]');
  await page.fill('[data-testid="input-batch"]', "2");
  await page.waitForSelector('[data-testid="compare"]');
  const delta = (await page.textContent('[data-testid="delta-total"]')).trim();
  const a = cliPlan(["--model", "llama2-7b"]).plan.peak_allocated_bytes;
  const b = cliPlan(["--model", "llama2-7b", "--batch", "2"]).plan.peak_allocated_bytes;
  assert.equal(delta, `+${((b - a) / GIB).toFixed(2)} GiB`);
  assert.equal((await page.textContent('[data-testid="delta-frozen_weights"]')).trim(), "+0.00 GiB");
  assert.equal(await page.locator('[data-testid="a-segment-frozen_weights"]').count(), 1);
  await page.click('[data-testid="unpin"]');
  assert.equal(await page.locator('[data-testid="compare"]').count(), 0);
  await page.close();
});

test("curve chart marks the largest fitting value and switches axis", async () => {
  const { page } = await openApp(browser, server.url);
  const maxSeq = (await page.textContent('[data-testid="max-seq"]')).trim();
  assert.equal((await page.textContent('[data-testid="curve-limit"]')).trim(), `fits up to ${maxSeq}`);
  await page.click('[data-testid="toggle-axis"]');
  await page.waitForFunction(() => location.search.includes("axis=batch"), null, { timeout: 5000 });
  const maxBatch = (await page.textContent('[data-testid="max-batch"]')).trim();
  assert.equal((await page.textContent('[data-testid="curve-limit"]')).trim(), `fits up to ${maxBatch}`);
  assert.match(page.url(), /axis=batch/);
  await page.close();
});

test("target modules, modules_to_save, autocast and mask controls reach the model", async () => {
  const { page } = await openApp(browser, server.url + "?model=llama2-7b");
  const cases = [
    [(p) => p.uncheck('[data-testid="target-all"]'), ["--targets", "q,v"]],
    [(p) => p.check('[data-testid="target-o"]'), ["--targets", "q,v,o"]],
    [(p) => p.check('[data-testid="mts-lm_head"]'), ["--targets", "q,v,o", "--modules-to-save", "lm_head"]],
    [(p) => p.selectOption('[data-testid="select-autocast"]', "bf16"), ["--targets", "q,v,o", "--modules-to-save", "lm_head", "--autocast", "bf16"]],
    [(p) => p.check('[data-testid="toggle-mask"]'), ["--targets", "q,v,o", "--modules-to-save", "lm_head", "--autocast", "bf16", "--padded-mask"]],
  ];
  for (const [act, args] of cases) {
    await act(page);
    const want = cliPlan(["--model", "llama2-7b", ...args]).plan.peak_allocated_bytes / GIB;
    assert.ok(Math.abs((await gibOf(page, "peak-allocated")) - want) <= 0.006, args.join(" "));
  }
  await page.close();
});

test("model search filters the picker", async () => {
  const { page } = await openApp(browser, server.url);
  await page.fill('[data-testid="search-model"]', "gemma");
  const values = await page.$$eval('[data-testid="select-model"] option', (os) => os.map((o) => o.value));
  assert.ok(values.length >= 3 && values.every((v) => v.startsWith("gemma") || v === "qwen3-8b"), values.join(","));
  await page.selectOption('[data-testid="select-model"]', "gemma2-9b");
  assert.match(await page.textContent('[data-testid="peak-allocated"]'), /GiB$/);
  await page.close();
});

test("works offline after the first visit (service worker)", async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(server.url + "?model=qwen2-7b");
  await page.waitForSelector('[data-testid="peak-allocated"]');
  await page.evaluate(() => navigator.serviceWorker.ready);
  await page.waitForFunction(() => navigator.serviceWorker.controller !== null, null, { timeout: 15000 });
  const online = await gibOf(page, "peak-allocated");
  // What only the sections and the page's worker load is cached when first used, not on the
  // first visit.
  const cached = () => page.evaluate(async () => (await Promise.all((await caches.keys()).map(async (k) => (await (await caches.open(k)).keys()).map((r) => r.url)))).flat());
  assert.ok(!(await cached()).some((u) => /analyse|validation|sections/.test(u)), (await cached()).join(" "));
  await openSections(page);
  await page.setInputFiles('[data-testid="measured-file"]', path.join(root, "tests/data/unplanned/logits-fp32.pickle.gz"));
  await page.waitForSelector('[data-testid="measured-report"]', { timeout: 30000 });
  await page.click('[data-testid="evidence-run"]');
  await page.waitForSelector('[data-testid="evidence-summary"]', { timeout: 60000 });
  assert.ok((await cached()).some((u) => /lorafit-analyse_bg\.wasm$/.test(u)), (await cached()).join(" "));
  assert.ok((await cached()).some((u) => /lorafit-sections_bg\.wasm$/.test(u)), (await cached()).join(" "));
  await context.setOffline(true);
  await page.reload();
  await page.waitForSelector('[data-testid="peak-allocated"]', { timeout: 15000 });
  // The sections, opened once online, open offline too.
  await openSections(page);
  assert.equal(await gibOf(page, "peak-allocated"), online);
  // The page's worker (its own script and wasm, and validation.json it fetches), used once
  // online, works offline too: a snapshot is read and the evidence is planned.
  await page.setInputFiles('[data-testid="measured-file"]', path.join(root, "tests/data/unplanned/logits-fp32.pickle.gz"));
  await page.waitForSelector('[data-testid="measured-report"]', { timeout: 30000 });
  await page.click('[data-testid="evidence-run"]');
  await page.waitForSelector('[data-testid="evidence-summary"]', { timeout: 60000 });
  await context.close();
});

test("GPUs, strategy and offload plan per GPU and travel in the link", async () => {
  const { page } = await openApp(browser, server.url + "?model=llama2-70b&gc=1");
  await page.fill('[data-testid="input-gpus"]', "8");
  assert.equal(await page.inputValue('[data-testid="select-strategy"]'), "fsdp", "several GPUs pick FSDP");
  await page.selectOption('[data-testid="select-strategy"]', "zero3");
  await page.check('[data-testid="toggle-offload-params"]');
  const want = cliPlan(["--model", "llama2-70b", "--gc", "--gpus", "8", "--strategy", "zero3", "--offload", "params"]).plan;
  assert.ok(Math.abs((await gibOf(page, "peak-allocated")) - want.peak_allocated_bytes / GIB) <= 0.006);
  // Per GPU, said plainly, with the job's total across the GPUs beside it.
  const total = ((want.nvidia_smi_bytes * 8) / GIB).toFixed(2);
  assert.equal(await page.textContent('[data-testid="per-gpu"]'), `per GPU · 8 GPUs (${total} GiB across them) · effective batch 8`);
  assert.match(await page.textContent('[data-testid="cpu-ram"]'), new RegExp(`^${(want.cpu_bytes_per_rank / GIB).toFixed(2)} GiB per GPU`));
  await page.waitForFunction(() => /g=8.*st=zero3.*off=params/.test(location.search), null, { timeout: 5000 });
  await page.selectOption('[data-testid="select-export"]', "accelerate");
  assert.match(await page.inputValue('[data-testid="export-output"]'), /distributed_type: DEEPSPEED[\s\S]*zero_stage: 3[\s\S]*offload_param_device: cpu/);
  await page.close();
});

test("FSDP2 is planned per GPU as Trainer wraps a LoRA model, with the fix and the note that say so", async () => {
  const { page } = await openApp(browser, server.url + "?model=llama2-7b&s=1024");
  await page.fill('[data-testid="input-gpus"]', "2");
  assert.equal(await page.inputValue('[data-testid="select-strategy"]'), "fsdp");
  await page.selectOption('[data-testid="select-fsdp-version"]', "2");
  const want = cliPlan(["--model", "llama2-7b", "--seq", "1024", "--gpus", "2", "--strategy", "fsdp", "--fsdp-version", "2"]).plan;
  assert.ok(Math.abs((await gibOf(page, "peak-allocated")) - want.peak_allocated_bytes / GIB) <= 0.006);
  await page.waitForFunction(() => /fv=2/.test(location.search), null, { timeout: 5000 });
  assert.match(await page.textContent('[data-testid="plan-notes"]'), /FSDP2 \(fully_shard\) under transformers' Trainer/);
  await page.screenshot({ path: path.join(artifacts, "fsdp2-trainer-lora.png"), fullPage: false });
  await page.close();
});

test("a visit loads the page only; the sections load when one is opened and follow the page both ways", async () => {
  const { page, errors } = await openApp(browser, server.url + "?model=llama2-7b&gpu=rtx4090&b=4&s=2048", { sections: false });
  const loaded = () => page.evaluate(() => performance.getEntriesByType("resource").map((r) => r.name.split("/").pop()));
  assert.equal(await page.getAttribute('[data-testid="sections"]', "data-state"), "closed");
  assert.ok(!(await loaded()).some((f) => f.startsWith("lorafit-sections")), (await loaded()).join(" "));
  assert.equal(await page.locator('[data-testid="fixes"]').count(), 0);
  // The hero's "single changes ↓" opens them at the single changes.
  await page.click('[data-testid="best-fix"] a[href="#fixes"]');
  await page.waitForSelector('[data-testid="sections"][data-state="ready"]', { timeout: 30000 });
  assert.ok((await loaded()).includes("lorafit-sections_bg.wasm"));
  // Every entry of the contents names a section that is there now.
  const missing = await page.$$eval(".toc a", (as) => as.map((a) => a.getAttribute("href").slice(1)).filter((id) => !document.getElementById(id)));
  assert.deepEqual(missing, []);
  await page.waitForFunction(() => { const r = document.getElementById("fixes").getBoundingClientRect(); return r.top >= -1 && r.top < innerHeight; }, null, { timeout: 5000 });
  // Page → sections: the batch moved in the first screen reaches the share link and the terms.
  await page.fill('[data-testid="input-batch"]', "2");
  await gibOf(page, "peak-allocated");
  assert.match(await page.inputValue('[data-testid="share-url"]'), /b=2(&|$)/);
  // Sections → page: a fix applied below re-plans the hero, as the CLI does.
  await page.click('[data-testid="apply-grad_ckpt"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="toggle-gc"]').checked, null, { timeout: 5000 });
  const want = cliPlan(["--model", "llama2-7b", "--gpu", "rtx4090", "--batch", "2", "--seq", "2048", "--gc"]).plan.peak_allocated_bytes / GIB;
  assert.ok(Math.abs((await gibOf(page, "peak-allocated")) - want) <= 0.006);
  await page.waitForFunction(() => location.search.includes("gc=1"), null, { timeout: 5000 });
  assert.deepEqual(errors, []);
  await page.close();
  // A link to a section opens the sections by itself.
  const linked = await openApp(browser, server.url + "?model=qwen2-7b#lengths", { sections: false });
  await linked.page.waitForSelector('[data-testid="sections"][data-state="ready"]', { timeout: 30000 });
  await linked.page.waitForSelector("#lengths");
  await linked.page.close();
});

test("full fine-tuning and DoRA are planned as the CLI plans them, each visibly", async () => {
  const { page, errors } = await openApp(browser, server.url + "?model=llama3.2-1b");
  const lora = await gibOf(page, "peak-allocated");
  // Full fine-tuning: the adapter's settings go, every weight is trained.
  await page.selectOption('[data-testid="select-finetuning"]', "full");
  const full = await gibOf(page, "peak-allocated");
  assert.equal(await page.isVisible('[data-testid="input-rank"]'), false, "no LoRA rank for full fine-tuning");
  const wantFull = cliPlan(["--model", "llama3.2-1b", "--finetuning-type", "full"]).plan;
  assert.ok(Math.abs(full - wantFull.peak_allocated_bytes / GIB) <= 0.006, `${full} vs CLI`);
  assert.ok(full > lora + 3, `full ${full} GiB vs LoRA ${lora} GiB`);
  await page.screenshot({ path: path.join(artifacts, "method-full.png") });
  // Freeze tuning (LLaMA-Factory's default: the last 2 layers).
  await page.selectOption('[data-testid="select-finetuning"]', "freeze");
  const freeze = await gibOf(page, "peak-allocated");
  const wantFreeze = cliPlan(["--model", "llama3.2-1b", "--finetuning-type", "freeze"]).plan;
  assert.ok(Math.abs(freeze - wantFreeze.peak_allocated_bytes / GIB) <= 0.006, `${freeze} vs CLI`);
  assert.ok(freeze < full, `freeze ${freeze} GiB vs full ${full} GiB`);
  // DoRA through the link (the control is with the training settings).
  await page.selectOption('[data-testid="select-finetuning"]', "lora");
  const dora = await openApp(browser, server.url + "?model=llama3.2-1b&dora=1");
  const shown = await gibOf(dora.page, "peak-allocated");
  const wantDora = cliPlan(["--model", "llama3.2-1b", "--use-dora"]).plan;
  assert.ok(Math.abs(shown - wantDora.peak_allocated_bytes / GIB) <= 0.006, `${shown} vs CLI`);
  assert.ok(shown > lora, `DoRA ${shown} GiB vs LoRA ${lora} GiB`);
  assert.deepEqual(errors, []);
  assert.deepEqual(dora.errors, []);
  await page.close();
  await dora.page.close();
});

test("Liger's kernels are switched on in the training settings and planned as the CLI plans them", async () => {
  const { page, errors } = await openApp(browser, server.url + "?model=llama2-7b&s=2048");
  const plain = await gibOf(page, "peak-allocated");
  // The three toggles sit with the training settings; Liger's kernels are the full planner's
  // (src/web/full.rs): the page reloads as it after the first one.
  await page.check('[data-testid="toggle-liger-rms_norm"]');
  await plannerIs(page, "full");
  await openSections(page);
  await page.check('[data-testid="toggle-liger-swiglu"]');
  await page.check('[data-testid="toggle-liger-rope"]');
  await page.waitForFunction(() => /lk=rms_norm(%2C|,)swiglu(%2C|,)rope/.test(location.search), null, { timeout: 5000 });
  await settled(page);
  const liger = await gibOf(page, "peak-allocated");
  const want = cliPlan(["--model", "llama2-7b", "--seq", "2048", "--liger-kernel", "true"]).plan;
  assert.ok(Math.abs(liger - want.peak_allocated_bytes / GIB) <= 0.006, `${liger} vs CLI`);
  assert.ok(liger < plain - 1, `Liger ${liger} GiB vs without ${plain} GiB`);
  await page.locator('[data-testid="toggle-liger-rope"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(artifacts, "liger-kernels.png") });
  assert.deepEqual(errors, []);
  await page.close();
});

test("TRL's SFTTrainer (its fused LM head) is picked in the training settings and planned as the CLI plans it", async () => {
  const { page, errors } = await openApp(browser, server.url + "?model=qwen2.5-7b&s=4096&gc=1&dt=nf4");
  const full = await gibOf(page, "peak-allocated");
  // "Loss from" sits with the training settings for every stage; the fused head is the full
  // planner's (src/web/full.rs): the page reloads as it.
  await openSections(page);
  await page.selectOption('[data-testid="logits"]', "fused");
  await plannerIs(page, "full");
  await page.waitForFunction(() => location.search.includes("plg=fused"), null, { timeout: 5000 });
  await settled(page);
  const fused = await gibOf(page, "peak-allocated");
  const want = cliPlan(["--model", "qwen2.5-7b", "--seq", "4096", "--gc", "--quant", "nf4", "--logits", "fused"]).plan;
  assert.ok(Math.abs(fused - want.peak_allocated_bytes / GIB) <= 0.006, `${fused} vs CLI`);
  assert.ok(fused < full - 1, `TRL's head ${fused} GiB vs Trainer's logits ${full} GiB`);
  assert.match(await page.textContent('[data-testid="plan-notes"]'), /SFTTrainer scores the 4095 next-token positions/);
  await openSections(page);
  await page.locator('[data-testid="logits"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(artifacts, "trl-sft.png") });
  assert.deepEqual(errors, []);
  await page.close();
});

test("a preference stage is planned as the CLI plans it, and says what it runs", async () => {
  const { page, errors } = await openApp(browser, server.url + "?model=llama3.2-1b");
  const sft = await gibOf(page, "peak-allocated");
  // DPO from the first screen: two sequences per pair and the reference pass.
  await page.selectOption('[data-testid="select-stage"]', "dpo");
  // Preference training is the full planner's (src/web/full.rs): the page reloads as it.
  await plannerIs(page, "full");
  const dpo = await gibOf(page, "peak-allocated");
  const want = cliPlan(["--model", "llama3.2-1b", "--stage", "dpo"]).plan;
  assert.ok(Math.abs(dpo - want.peak_allocated_bytes / GIB) <= 0.006, `${dpo} vs CLI`);
  assert.ok(dpo > sft, `DPO ${dpo} GiB vs SFT ${sft} GiB`);
  const notes = await page.textContent('[data-testid="plan-notes"]');
  assert.match(notes, /counts preference pairs/);
  assert.match(notes, /adapters disabled/);
  assert.match(await page.textContent('[data-testid="peak-phase"]'), new RegExp(want.peak_phase));
  await page.waitForFunction(() => location.search.includes("stage=dpo"), null, { timeout: 5000 });
  await page.screenshot({ path: path.join(artifacts, "method-dpo.png") });
  // Precomputed reference log-probs through the link: no reference pass in the step.
  const pre = await openApp(browser, server.url + "?model=llama3.2-1b&stage=dpo&pre=1");
  const shown = await gibOf(pre.page, "peak-allocated");
  const wantPre = cliPlan(["--model", "llama3.2-1b", "--stage", "dpo", "--precompute-ref-log-probs"]).plan;
  assert.ok(Math.abs(shown - wantPre.peak_allocated_bytes / GIB) <= 0.006, `${shown} vs CLI`);
  assert.match(await pre.page.textContent('[data-testid="plan-notes"]'), /computed once before training/);
  assert.deepEqual(errors, []);
  assert.deepEqual(pre.errors, []);
  await page.close();
  await pre.page.close();
});

test("GRPO is picked on the first screen, gets a generation batch TRL accepts, and shows its scoring phase beside the step's", async () => {
  const { page, errors } = await openApp(browser, server.url + "?model=qwen2.5-0.5b&b=4&s=256");
  await page.selectOption('[data-testid="select-stage"]', "grpo");
  // GRPO is the full planner's (src/web/full.rs): the page reloads as it. Four rows cannot be
  // one prompt's eight generations: num_generations follows the batch (src/web/layout.rs).
  await plannerIs(page, "full");
  await page.waitForFunction(() => location.search.includes("stage=grpo") && location.search.includes("ng=4"), null, { timeout: 5000 });
  await settled(page);
  const plain = await gibOf(page, "peak-allocated");
  const want = cliPlan(["--model", "qwen2.5-0.5b", "--batch", "4", "--seq", "256", "--stage", "grpo", "--num-generations", "4"]).plan;
  assert.ok(Math.abs(plain - want.peak_allocated_bytes / GIB) <= 0.006, `${plain} vs CLI`);
  assert.match(await page.textContent('[data-testid="plan-notes"]'), /GRPOTrainer\): each step trains on 4 generated sequences of 256 tokens/);
  // β ≠ 0 adds the reference pass, two iterations the old policy's: the scoring phase's peak.
  await openSections(page);
  await page.fill('[data-testid="beta"]', "0.04");
  await page.press('[data-testid="beta"]', "Enter");
  await page.fill('[data-testid="num_iterations"]', "2");
  await page.press('[data-testid="num_iterations"]', "Enter");
  await page.waitForFunction(() => location.search.includes("beta=0.04") && location.search.includes("ni=2"), null, { timeout: 5000 });
  await settled(page);
  const both = cliPlan(["--model", "qwen2.5-0.5b", "--batch", "4", "--seq", "256", "--stage", "grpo", "--num-generations", "4", "--beta", "0.04", "--num-iterations", "2"]).plan;
  const score = both.phases.find((p) => p.phase === "score");
  assert.ok(score, "the CLI's plan has a score phase");
  const row = page.locator('[data-testid="phase-peaks"] tr[data-phase="score"] td.num');
  assert.ok(Math.abs(parseFloat(await row.textContent()) - score.bytes / GIB) <= 0.006, "the page's score phase vs the CLI's");
  const notes = await page.textContent('[data-testid="plan-notes"]');
  assert.match(notes, /old policy's log-probs/);
  assert.match(notes, /adapters disabled \(β 0\.04\)/);
  await page.locator('[data-testid="phase-peaks"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(artifacts, "grpo.png") });
  assert.deepEqual(errors, []);
  await page.close();
});

test("padding-free packing is the full planner's: the batch planned as one row, with its mask's note and its link", async () => {
  const { page, errors } = await openApp(browser, server.url + "?model=llama3-8b&b=4&s=1024");
  await openSections(page);
  await page.check('[data-testid="toggle-packing"]');
  await plannerIs(page, "full");
  await page.waitForFunction(() => location.search.includes("pf=1"), null, { timeout: 5000 });
  await settled(page);
  const want = cliPlan(["--model", "llama3-8b", "--batch", "4", "--seq", "1024", "--packing"]).plan;
  assert.ok(Math.abs((await gibOf(page, "peak-allocated")) - want.peak_allocated_bytes / GIB) <= 0.006);
  assert.match(await page.textContent('[data-testid="plan-notes"]'), /run as one row of 4096 tokens/);
  await openSections(page);
  await page.locator('[data-testid="toggle-packing"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(artifacts, "packing.png") });
  assert.deepEqual(errors, []);
  await page.close();
});
