// The whole job in a real browser: the job section's settings and timeline against
// `lorafit plan --json`'s job phases, the verdict decided by the evaluation when it is the
// largest phase, the fix aimed at it first, and screenshots of the timeline (desktop and phone,
// light and dark, 中文).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import { serve, launch, openApp, openView, openSections, settled, plannerIs, cliPlan, artifacts } from "./harness.mjs";

let server, browser;
before(async () => {
  server = await serve("/app/");
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

// llama2-7b LoRA on an RTX 4090, micro-batch 1 × 512 tokens: the training step fits; the
// evaluation keeps every batch's logits of 256 samples for compute_metrics.
const EVAL_OOM = "?model=llama2-7b&gpu=rtx4090&b=1&s=512&eb=16&en=256&plo=0";
const EVAL_OOM_ARGS = ["--model", "llama2-7b", "--gpu", "rtx4090", "--batch", "1", "--seq", "512", "--eval-batch", "16", "--eval-samples", "256", "--no-prediction-loss-only"];

/** The timeline's phases as the page shows them: name, GPU and host bytes, status, deciding. */
async function phases(page) {
  await settled(page);
  return page.$$eval('[data-testid="job-timeline"] > li', (lis) => lis.map((li) => ({
    name: li.dataset.testid.replace("job-phase-", ""),
    gpu: Number(li.dataset.gpuBytes),
    host: Number(li.dataset.hostBytes),
    status: li.dataset.status,
    deciding: li.dataset.deciding === "true",
  })));
}

test("an evaluation that does not fit decides the verdict, phase by phase as the CLI plans it", async () => {
  const { page, errors } = await openApp(browser, server.url + EVAL_OOM);
  await page.waitForSelector('[data-testid="job-timeline"]');
  const want = cliPlan(EVAL_OOM_ARGS);
  assert.equal(want.verdict.phase, "eval");
  const shown = await phases(page);
  assert.deepEqual(shown.map((p) => p.name), want.job.phases.map((p) => p.name));
  for (const [i, p] of want.job.phases.entries()) {
    assert.equal(shown[i].gpu, p.gpu_peak_bytes, `${p.name} GPU`);
    assert.equal(shown[i].host, p.host_peak_bytes, `${p.name} host`);
  }
  assert.deepEqual(shown.filter((p) => p.deciding).map((p) => p.name), ["eval"]);
  assert.equal(shown.find((p) => p.name === "train").status === "oom", false, "the training step fits");
  // The hero: out of memory, decided by the evaluation (planned by the page's worker: until it
  // answers the page says its verdict is the training step's), with the CLI's headroom.
  await page.waitForSelector('[data-testid="verdict"][data-scope="job"]', { timeout: 30000 });
  assert.equal(await page.getAttribute('[data-testid="verdict"]', "data-status"), "oom");
  assert.equal(await page.getAttribute('[data-testid="verdict"]', "data-phase"), "eval");
  assert.equal(await page.isVisible('[data-testid="deciding-phase"]'), true);
  assert.match(await page.textContent('[data-testid="deciding-phase"]'), /decided by the evaluation/);
  const headroom = (await page.textContent('[data-testid="headroom"]')).trim();
  assert.equal(headroom, `${(want.verdict.headroom_bytes / 1024 ** 3).toFixed(2)} GiB`);
  // The fix aimed at the evaluation comes first, and applying it makes the job fit.
  await page.waitForSelector('[data-testid="fixes"] li');
  const first = await page.getAttribute('[data-testid="fixes"] li >> nth=0', "data-testid");
  assert.match(first, /^fix-(eval_accumulation|prediction_loss_only|smaller_eval_batch)$/);
  // Opened, a phase shows its terms with their formulas.
  await page.click('[data-testid="job-phase-eval"] summary');
  assert.match(await page.textContent('[data-testid="job-phase-eval"] table'), /evaluation outputs kept|logits/);
  await page.locator('[data-testid="job"]').screenshot({ path: path.join(artifacts, "job-eval-oom.png") });
  await page.click(`[data-testid="apply-${first.replace("fix-", "")}"]`);
  await settled(page);
  assert.notEqual(await page.getAttribute('[data-testid="verdict"]', "data-status"), "oom");
  assert.deepEqual(errors, []);
  await page.close();
});

test("generation during evaluation: the generated ids are kept instead of the logits, with the KV cache, as the CLI plans it", async () => {
  // The evaluation that keeps every batch's logits does not fit (above); with predict_with_generate
  // each batch generates 64 tokens from its prompts and keeps only their ids.
  const link = EVAL_OOM + "&pwg=1&mnt=64";
  const { page, errors } = await openApp(browser, server.url + link);
  await page.waitForSelector('[data-testid="job-phase-eval"]');
  const want = cliPlan([...EVAL_OOM_ARGS, "--predict-with-generate", "--max-new-tokens", "64"]);
  const shown = await phases(page);
  assert.deepEqual(shown.map((p) => p.name), want.job.phases.map((p) => p.name));
  for (const [i, p] of want.job.phases.entries()) {
    assert.equal(shown[i].gpu, p.gpu_peak_bytes, `${p.name} GPU`);
    assert.equal(shown[i].host, p.host_peak_bytes, `${p.name} host`);
  }
  const logits = cliPlan(EVAL_OOM_ARGS).job.phases.find((p) => p.name === "eval");
  assert.ok(shown.find((p) => p.name === "eval").gpu < logits.gpu_peak_bytes, "ids, not logits");
  assert.equal(await page.inputValue('[data-testid="max_new_tokens"]'), "64");
  await page.click('[data-testid="job-phase-eval"] summary');
  assert.match(await page.textContent('[data-testid="job-phase-eval"]'), /KV cache/);
  assert.match(await page.textContent('[data-testid="job-phase-eval"]'), /predict_with_generate/);
  assert.deepEqual(errors.filter((e) => !/favicon/.test(e)), []);
  await page.close();
});

test("the job's settings: a merge on the GPU adds its phase, a bad eval batch is refused with its reason", async () => {
  const { page, errors } = await openApp(browser, server.url + "?model=qwen2-7b&gpu=a100-80&gc=1");
  await page.waitForSelector('[data-testid="job-timeline"]');
  assert.deepEqual((await phases(page)).map((p) => p.name), ["train", "save"]);
  // Only with a merge is where it runs asked.
  assert.equal(await page.isVisible('[data-testid="export_device"]'), false);
  await page.check('[data-testid="merge"]');
  await page.waitForSelector('[data-testid="export_device"]');
  await page.selectOption('[data-testid="export_device"]', "gpu");
  await page.waitForSelector('[data-testid="job-phase-merge"]');
  const want = cliPlan(["--model", "qwen2-7b", "--gpu", "a100-80", "--gc", "--merge", "--export-device", "gpu"]);
  const merge = (await phases(page)).find((p) => p.name === "merge");
  assert.equal(merge.gpu, want.job.phases.find((p) => p.name === "merge").gpu_peak_bytes);
  // The eval batch is typed: a refused value keeps the plan and says why.
  await page.fill('[data-testid="eval_batch"]', "0");
  await page.press('[data-testid="eval_batch"]', "Enter");
  await page.dispatchEvent('[data-testid="eval_batch"]', "change");
  assert.equal(await page.isVisible('[data-testid="eval_batch-error"]'), true);
  assert.match(await page.textContent('[data-testid="eval_batch-error"]'), /\S/);
  assert.equal(await page.$('[data-testid="job-phase-eval"]'), null);
  await page.fill('[data-testid="eval_batch"]', "4");
  await page.dispatchEvent('[data-testid="eval_batch"]', "change");
  await page.waitForSelector('[data-testid="job-phase-eval"]');
  assert.equal(await page.isVisible('[data-testid="eval_batch-error"]'), false);
  assert.match(await page.evaluate(() => location.search), /eb=4/);
  assert.deepEqual(errors.filter((e) => !/favicon/.test(e)), []);
  await page.close();
});

test("screenshots of the timeline: phone and desktop, light and dark, 中文", async () => {
  for (const [name, width, height] of [["desktop", 1280, 900], ["phone", 390, 844]]) {
    for (const colorScheme of ["light", "dark"]) {
      for (const lang of ["en", "zh"]) {
        const { page, errors, close } = await openView(browser, server.url + EVAL_OOM + `&lang=${lang}`, { width, height, colorScheme });
        await openSections(page);
        await page.waitForSelector('[data-testid="job-timeline"]');
        await page.click('[data-testid="job-phase-eval"] summary');
        const job = page.locator('[data-testid="job"]');
        await job.scrollIntoViewIfNeeded();
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        assert.ok(overflow <= 0, `${name} ${colorScheme} ${lang}: the page scrolls sideways by ${overflow}px`);
        if (lang === "zh") {
          assert.match(await page.textContent('[data-testid="job"]'), /评估/);
        }
        await job.screenshot({ path: path.join(artifacts, `job-${name}-${colorScheme}-${lang}.png`) });
        assert.deepEqual(errors, [], `${name} ${colorScheme} ${lang}`);
        await close();
      }
    }
  }
});

test("GRPO with vLLM colocated at 0.9 of the card is out of memory, and its first fix fits", async () => {
  const { page, errors } = await openApp(browser, server.url + "?model=qwen2.5-7b&gpu=h100-80&stage=grpo&b=8&ng=8&gc=1&s=512&mcl=64&gen=vllm_colocate&vu=0.9");
  await plannerIs(page, "full");
  await settled(page);
  const want = cliPlan(["--model", "qwen2.5-7b", "--gpu", "h100-80", "--stage", "grpo", "--batch", "8", "--num-generations", "8", "--gc", "--seq", "512", "--max-completion-length", "64", "--generation", "vllm_colocate", "--vllm-gpu-memory-utilization", "0.9"]);
  assert.equal(want.verdict.status, "oom");
  // The job's verdict (the page's worker plans it) counts vLLM's share.
  await page.waitForSelector('[data-testid="verdict"][data-scope="job"]', { timeout: 30000 });
  assert.equal(await page.getAttribute('[data-testid="verdict"]', "data-status"), "oom");
  assert.match(await page.textContent('[data-testid="plan-notes"]'), /vLLM colocated: it takes vllm_gpu_memory_utilization 0\.9/);
  await page.waitForSelector('[data-testid="fixes"] li');
  const first = await page.getAttribute('[data-testid="fixes"] li >> nth=0', "data-testid");
  assert.match(first, /^fix-(vllm_share|vllm_sleep|vllm_server)$/);
  await page.locator('[data-testid="job"]').screenshot({ path: path.join(artifacts, "grpo-vllm-colocate.png") });
  await page.click(`[data-testid="apply-${first.replace("fix-", "")}"]`);
  await settled(page);
  assert.notEqual(await page.getAttribute('[data-testid="verdict"]', "data-status"), "oom");
  assert.deepEqual(errors, []);
  await page.close();
});
