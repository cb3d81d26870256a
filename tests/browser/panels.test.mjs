// Planning panels in a real browser: ranked fixes with apply, myths, config.json import (paste,
// file, Hub by id from a local server with the Hub's layout, gated, malformed), length
// distribution and exports.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { serve, launch, openApp, openSections, plannerIs, cliPlan, gibOf, GIB, artifacts } from "./harness.mjs";

const MISTRAL = JSON.stringify({ model_type: "mistral", hidden_size: 4096, intermediate_size: 14336, num_hidden_layers: 32, num_attention_heads: 32, num_key_value_heads: 8, vocab_size: 32000 });
let server, browser, cfgFile;
before(async () => {
  server = await serve("/app/", {
    "hub/acme/tiny-mistral/resolve/main/config.json": { status: 200, body: MISTRAL },
    "hub/acme/gated/resolve/main/config.json": { status: 403, body: "" },
  });
  browser = await launch();
  cfgFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "lorafit-")), "config.json");
  fs.writeFileSync(cfgFile, MISTRAL);
});
after(async () => {
  await browser?.close();
  await server?.close();
});

const near = (a, b) => Math.abs(a - b) <= 0.006;

test("fixes appear when it does not fit, and applying one re-plans", async () => {
  const { page } = await openApp(browser, server.url + "?model=llama2-7b&gpu=rtx4090&b=4&s=2048");
  assert.equal(await page.getAttribute('[data-testid="verdict"]', "data-status"), "oom");
  await page.waitForSelector('[data-testid="fix-grad_ckpt"]');
  const first = await page.locator('[data-testid="fixes"] li').first().textContent();
  assert.match(first, /fits|tight/);
  await page.click('[data-testid="apply-grad_ckpt"]');
  assert.equal(await page.isChecked('[data-testid="toggle-gc"]'), true);
  const want = cliPlan(["--model", "llama2-7b", "--gpu", "rtx4090", "--batch", "4", "--seq", "2048", "--gc"]).plan.peak_allocated_bytes / GIB;
  assert.ok(near(await gibOf(page, "peak-allocated"), want));
  assert.notEqual(await page.getAttribute('[data-testid="verdict"]', "data-status"), "oom");
  await page.click('[data-testid="myths-toggle"]');
  // The details' toggle event is queued as a task: wait for the myths it computes.
  await page.waitForFunction(() => document.querySelector('[data-testid="myths"]').textContent.includes("empty_cache"));
  const myths = await page.textContent('[data-testid="myths"]');
  assert.match(myths, /empty_cache\(\).*\+0\.00 GiB/s);
  assert.match(myths, /KV cache/);
  await page.close();
});

test("paste, upload and bad config.json", async () => {
  const { page, errors } = await openApp(browser, server.url);
  await page.fill('[data-testid="config-input"]', MISTRAL);
  await page.click('[data-testid="config-apply"]');
  assert.match(await page.textContent('[data-testid="config-status"]'), /7\.242 B parameters/);
  fs.mkdirSync(path.dirname(cfgFile), { recursive: true });
  const want = JSON.parse(require_cli(["--config", cfgFile]));
  assert.ok(near(await gibOf(page, "peak-allocated"), want.plan.peak_allocated_bytes / GIB));
  await page.waitForFunction(() => location.search.includes("arch=mistral."), null, { timeout: 5000 });
  const shown = await gibOf(page, "peak-allocated");
  await page.fill('[data-testid="config-input"]', '{"model_type": "t5", "is_encoder_decoder": true}');
  await page.click('[data-testid="config-apply"]');
  assert.match(await page.textContent('[data-testid="config-status"]'), /encoder-decoder/);
  assert.equal(await gibOf(page, "peak-allocated"), shown, "a bad paste keeps the current plan");
  await page.click('[data-testid="config-clear"]');
  await page.setInputFiles('[data-testid="config-file"]', cfgFile);
  await page.waitForSelector('[data-testid="config-status"].ok');
  assert.equal(await gibOf(page, "peak-allocated"), shown);
  // A config whose every key shapes the model shows no list; keys that shape nothing are named,
  // as the CLI names them, and a new import or going back to the catalog clears the list.
  assert.equal(await page.isVisible('[data-testid="config-ignored"]'), false);
  await page.fill('[data-testid="config-input"]', JSON.stringify({ ...JSON.parse(MISTRAL), rope_theta: 10000.0, torch_dtype: "bfloat16" }));
  await page.click('[data-testid="config-apply"]');
  assert.match(await page.textContent('[data-testid="config-ignored"]'), /does not use: rope_theta, torch_dtype$/);
  assert.equal(await gibOf(page, "peak-allocated"), shown, "unused keys change nothing");
  await page.click('[data-testid="config-clear"]');
  assert.equal(await page.isVisible('[data-testid="config-ignored"]'), false);
  assert.deepEqual(errors, []);
  await page.close();
});

import { execFileSync } from "node:child_process";
function require_cli(args) {
  const bin = process.env.LORAFIT_BIN || path.resolve(import.meta.dirname, "../../target/debug/lorafit");
  return execFileSync(bin, ["plan", ...args, "--json"], { encoding: "utf8" });
}

test("config.json by model id from a Hub-layout server; gated and invalid ids explain", async () => {
  const { page } = await openApp(browser, server.url + "?hub=./hub");
  await page.fill('[data-testid="hub-id"]', "acme/tiny-mistral");
  await page.click('[data-testid="hub-fetch"]');
  // (the status is ".ok" already while it says "fetching …": wait for the fetch's own result)
  await page.waitForFunction(() => !/fetching/.test(document.querySelector('[data-testid="config-status"]')?.textContent || "fetching"));
  assert.match(await page.textContent('[data-testid="config-status"]'), /mistral config: 7\.242 B/);
  await page.fill('[data-testid="hub-id"]', "acme/gated");
  await page.click('[data-testid="hub-fetch"]');
  await page.waitForFunction(() => /gated/.test(document.querySelector('[data-testid="config-status"]')?.textContent || ""));
  await page.fill('[data-testid="hub-id"]', "../../etc/passwd");
  await page.click('[data-testid="hub-fetch"]');
  assert.match(await page.textContent('[data-testid="config-status"]'), /not a model id/);
  await page.close();
});

test("length distribution: typical vs longest batch and the expected OOM step", async () => {
  const { page } = await openApp(browser, server.url + "?model=llama2-7b&gpu=a100-40&b=4");
  await page.fill('[data-testid="lengths-input"]', Array(990).fill("300").concat(Array(10).fill("8000")).join("\n"));
  await page.click('[data-testid="lengths-analyze"]');
  await page.waitForSelector('[data-testid="lengths-report"]');
  const typical = await gibOf(page, "lengths-typical");
  const longest = await gibOf(page, "lengths-longest");
  assert.ok(longest > typical);
  assert.ok(near(typical, cliPlan(["--model", "llama2-7b", "--batch", "4", "--seq", "300"]).plan.peak_allocated_bytes / GIB));
  assert.match(await page.textContent('[data-testid="lengths-oom-step"]'), /10 of 1000 samples \(1\.00 %\) are longer than fits: in a shuffled epoch the first OOM comes at micro-batch 23 of 250 on average \(34 % within the first 10, .*\), and certainly within the first epoch/);
  await page.fill('[data-testid="lengths-input"]', "12\nabc");
  await page.click('[data-testid="lengths-analyze"]');
  assert.match(await page.textContent('[data-testid="lengths-error"]'), /item 2/);
  await page.close();
});

test("exports follow the plan", async () => {
  const { page } = await openApp(browser, server.url + "?b=3&r=32&gc=1");
  assert.match(await page.inputValue('[data-testid="export-output"]'), /LoraConfig\(\n    r=32,/);
  await page.selectOption('[data-testid="select-export"]', "axolotl");
  const ax = await page.inputValue('[data-testid="export-output"]');
  assert.match(ax, /micro_batch_size: 3/);
  assert.match(ax, /gradient_checkpointing: true/);
  await page.fill('[data-testid="input-batch"]', "5");
  assert.match(await page.inputValue('[data-testid="export-output"]'), /micro_batch_size: 5/);
  await page.close();
});

// A training config pasted as users write it: read as `lorafit plan --from` reads it, its model
// and settings planned, every key it did not use named (tests/data/configs: real examples).
test("a pasted LLaMA-Factory, axolotl or ms-swift config plans as plan --from", async () => {
  const configs = path.resolve(import.meta.dirname, "../data/configs");
  fs.mkdirSync(artifacts, { recursive: true });
  const { page, errors } = await openApp(browser, server.url);
  const lf = path.join(configs, "llama-factory/llama3_lora_sft.yaml");
  await page.fill('[data-testid="training-config-input"]', fs.readFileSync(lf, "utf8"));
  await page.click('[data-testid="training-config-apply"]');
  assert.match(await page.textContent('[data-testid="training-config-status"]'), /LLaMA-Factory YAML · meta-llama\/Meta-Llama-3-8B-Instruct/);
  assert.match(await page.textContent('[data-testid="training-config-used"]'), /lora_rank → lora_r = 8/);
  assert.match(await page.textContent('[data-testid="training-config-assumed"]'), /lora_alpha = 16/);
  assert.match(await page.textContent('[data-testid="training-config-ignored"]'), /learning_rate/);
  await page.waitForFunction(() => location.search.includes("model=llama3-8b"), null, { timeout: 5000 });
  const want = cliPlan(["--from", lf]);
  assert.ok(near(await gibOf(page, "peak-allocated"), want.plan.peak_allocated_bytes / GIB));
  assert.ok(near(await gibOf(page, "peak-reserved"), want.plan.peak_reserved_bytes / GIB));
  const shown = await gibOf(page, "peak-allocated");
  await page.locator("#config").screenshot({ path: path.join(artifacts, "training-config.png") });
  // axolotl's LoRA example loads its base in 8 bits (LLM.int8), planned as such; sample packing is
  // named as not modelled; the file input reads the same as a paste.
  await page.setInputFiles('[data-testid="training-config-file"]', path.join(configs, "axolotl/lora.yml"));
  await page.waitForSelector('[data-testid="training-config-not-modeled"]');
  assert.match(await page.textContent('[data-testid="training-config-used"]'), /load_in_8bit → quant = int8/);
  assert.match(await page.textContent('[data-testid="training-config-not-modeled"]'), /sample_packing/);
  const ax = cliPlan(["--from", path.join(configs, "axolotl/lora.yml")]);
  assert.ok(near(await gibOf(page, "peak-allocated"), ax.plan.peak_allocated_bytes / GIB));
  // A value it cannot use is an error naming the key, and the plan stays.
  await page.fill('[data-testid="training-config-input"]', fs.readFileSync(lf, "utf8"));
  await page.click('[data-testid="training-config-apply"]');
  assert.ok(near(await gibOf(page, "peak-allocated"), shown));
  await page.fill('[data-testid="training-config-input"]', "model_name_or_path: meta-llama/Meta-Llama-3-8B\nlora_rank: many\n");
  await page.click('[data-testid="training-config-apply"]');
  assert.match(await page.textContent('[data-testid="training-config-status"].error'), /lora_rank/);
  assert.equal(await gibOf(page, "peak-allocated"), shown, "a bad paste keeps the current plan");
  assert.deepEqual(errors, []);
  await page.close();
});

// A TRL script as lorafit exports it, then accelerate's config of its launch pasted after it:
// the page plans what `plan --from script.py --from accelerate.yaml` plans.
test("a pasted TRL script and its accelerate config plan as plan --from both", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "lorafit-"));
  const bin = process.env.LORAFIT_BIN || path.resolve(import.meta.dirname, "../../target/debug/lorafit");
  const exported = (format) => execFileSync(bin, ["export", "--format", format, "--model", "llama3-8b", "--quant", "nf4",
    "--gc", "--strategy", "fsdp", "--gpus", "4", "--batch", "2"], { encoding: "utf8" });
  const script = path.join(dir, "train.py");
  const launch = path.join(dir, "accelerate.yaml");
  fs.writeFileSync(script, exported("trl"));
  fs.writeFileSync(launch, exported("accelerate"));
  const { page, errors } = await openApp(browser, server.url);
  await page.fill('[data-testid="training-config-input"]', fs.readFileSync(script, "utf8"));
  await page.click('[data-testid="training-config-apply"]');
  // SFTTrainer's fused LM head is the full planner's (src/web/full.rs): the page reloads as it,
  // and the paste box lists the script's reading again.
  await plannerIs(page, "full");
  await openSections(page);
  assert.match(await page.textContent('[data-testid="training-config-status"]'), /Python training script · meta-llama\/Meta-Llama-3-8B/);
  assert.match(await page.textContent('[data-testid="training-config-used"]'), /SFTConfig\.per_device_train_batch_size → batch = 2/);
  assert.match(await page.textContent('[data-testid="training-config-assumed"]'), /fused LM head/);
  await page.fill('[data-testid="training-config-input"]', fs.readFileSync(launch, "utf8"));
  await page.click('[data-testid="training-config-apply"]');
  assert.match(await page.textContent('[data-testid="training-config-used"]'), /accelerate\.num_processes → gpus_per_node = 4/);
  await page.waitForFunction(() => location.search.includes("model=llama3-8b"), null, { timeout: 5000 });
  const want = cliPlan(["--from", script, "--from", launch]);
  assert.equal(want.settings.strategy, "fsdp");
  assert.ok(near(await gibOf(page, "peak-allocated"), want.plan.peak_allocated_bytes / GIB));
  assert.ok(near(await gibOf(page, "peak-reserved"), want.plan.peak_reserved_bytes / GIB));
  assert.deepEqual(errors, []);
  await page.close();
});
