// Shared browser-test harness: a static server for the release build (optionally under a
// sub-path), Debian's chromium driven by playwright-core, and the native CLI for expected values.
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { chromium } from "playwright-core";

const root = path.resolve(import.meta.dirname, "../..");
export const dist = process.env.LORAFIT_DIST || path.join(root, "dist");
export const artifacts = path.join(root, "test-artifacts");
const bin = process.env.LORAFIT_BIN || path.join(root, "target/debug/lorafit");

const TYPES = { ".html": "text/html", ".js": "text/javascript", ".wasm": "application/wasm", ".css": "text/css", ".json": "application/json", ".png": "image/png", ".webmanifest": "application/manifest+json" };

/** Serves `dist` at `prefix` (e.g. "/" or "/lorafit/") on a free loopback port; `routes` maps
 * extra paths (relative to the prefix) to `{ status, body }` (e.g. a fake Hub layout). */
export async function serve(prefix = "/", routes = {}) {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, "http://x");
    if (!url.pathname.startsWith(prefix)) { res.writeHead(404); res.end(); return; }
    const route = routes[url.pathname.slice(prefix.length)];
    if (route) { res.writeHead(route.status, { "content-type": "application/json" }); res.end(route.body || ""); return; }
    let rel = decodeURIComponent(url.pathname.slice(prefix.length));
    if (rel === "" || rel.endsWith("/")) rel += "index.html";
    const file = path.join(dist, path.normalize(rel).replace(/^(\.\.[/\\])+/, ""));
    fs.readFile(file, (err, data) => {
      if (err) { res.writeHead(404); res.end("not found"); return; }
      res.writeHead(200, { "content-type": TYPES[path.extname(file)] || "application/octet-stream" });
      res.end(data);
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${server.address().port}${prefix}`, close: () => new Promise((r) => server.close(r)) };
}

/** Launches headless Debian chromium. */
export async function launch(extra = ["--disable-gpu"]) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", ...extra],
  });
}

/** Opens the app and waits until the wasm has rendered a result; with `sections` (the default),
 * also opens the sections below the first screen (their own wasm, loaded on demand) and waits
 * until they are mounted. */
export async function openApp(browser, url, { sections = true } = {}) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1400 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await page.goto(url);
  await page.waitForSelector('[data-testid="peak-allocated"]', { timeout: 30000 });
  await handedOver(page);
  if (sections) await openSections(page);
  return { page, errors };
}

/** Waits until the page runs the planner build `which`: "first" (the page's first bundle) or
 * "full" (the full planner the first bundle reloads the page as when a state's step needs the
 * extended ops: src/web/full.rs), and is settled. */
export async function plannerIs(page, which) {
  await page.waitForSelector(`main[data-planner="${which}"]`, { timeout: 30000 });
  await settled(page);
}

/** Waits out a hand-over: when the page's first bundle reloads itself as the full planner
 * (its root marked `data-handover`, src/web/full.rs), until the full planner shows its plan. */
export async function handedOver(page) {
  for (let tries = 0; ; tries++) {
    try {
      await page.waitForFunction(() => document.querySelector("main[data-planner]") && !document.documentElement.dataset.handover, null, { timeout: 30000 });
      await page.waitForSelector('[data-testid="peak-allocated"]', { timeout: 30000 });
      return;
    } catch (e) {
      // The reload destroyed the context the check ran in: check the new page.
      if (tries > 3 || !/destroyed|navigat/i.test(String(e))) throw e;
    }
  }
}

/** Opens the page's sections (unless a link already did) and waits until they are mounted. */
export async function openSections(page) {
  if ((await page.getAttribute('[data-testid="sections"]', "data-state")) === "closed") {
    await page.click('[data-testid="open-sections"]');
  }
  await page.waitForSelector('[data-testid="sections"][data-state="ready"]', { timeout: 30000 });
  await settled(page);
}

/** Waits until the page is still and settled: its results simulated (or settled without a
 * sequence to simulate) and, when the sections are open, theirs too, for the same state. */
export async function settled(page) {
  await page.waitForFunction(() => {
    const main = document.querySelector("main");
    if (!main || main.dataset.reserve === "quick") return false;
    const body = document.querySelector('[data-testid="sections-body"]');
    return !body || (body.dataset.reserve !== "quick" && body.dataset.query === document.getElementById("sections-root").dataset.query);
  }, null, { timeout: 30000 });
}

/** `lorafit plan ... --json` parsed. */
export function cliPlan(args) {
  const out = execFileSync(bin, ["plan", ...args, "--json"], { encoding: "utf8" });
  return JSON.parse(out);
}

/** Reads a GiB figure shown as "22.82 GiB". */
export async function gibOf(page, testid) {
  // Reserved, nvidia-smi and the verdict settle on the allocator simulation a moment after a change
  // ("settled": still, but with nothing to simulate, e.g. transformers 4's per-expert layout).
  await settled(page);
  const t = (await page.textContent(`[data-testid="${testid}"]`)).trim();
  const m = t.match(/^(-?[0-9]+\.[0-9]{2}) GiB$/);
  if (!m) throw new Error(`${testid} shows ${JSON.stringify(t)}, not "N.NN GiB"`);
  return Number(m[1]);
}

export const GIB = 1024 ** 3;

/** Opens `url` in a fresh context with a viewport and colour scheme; waits for the plan. */
export async function openView(browser, url, { width, height, colorScheme = "light", locale = "en-US" }) {
  const context = await browser.newContext({ viewport: { width, height }, colorScheme, locale });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await page.goto(url);
  await page.waitForSelector('[data-testid="peak-allocated"]', { timeout: 30000 });
  return { page, errors, close: () => context.close() };
}

const AXE = path.join(root, "node_modules/axe-core/axe.min.js");

/** Runs axe-core in the page and returns its serious and critical violations as text. The page's
 * CSP forbids inline scripts, so the source is evaluated through the DevTools protocol. */
export async function axeViolations(page) {
  if (!(await page.evaluate(() => typeof window.axe === "object"))) {
    await page.evaluate(fs.readFileSync(AXE, "utf8"));
  }
  const result = await page.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.impact} ${v.id}: ${v.help} — ${v.nodes.slice(0, 4).map((n) => n.target.join(" ") + " " + (n.failureSummary || "").split("\n").slice(1, 2).join("")).join(" | ")}`);
}

/** Layout facts of the page: horizontal overflow and the box of each test id. */
export async function layoutOf(page, testids) {
  return page.evaluate((ids) => {
    const box = (el) => { const r = el.getBoundingClientRect(); return { top: r.top, bottom: r.bottom, left: r.left, right: r.right, width: r.width }; };
    const out = { overflow: document.documentElement.scrollWidth - window.innerWidth, width: window.innerWidth, height: window.innerHeight, main: box(document.querySelector("main")) };
    for (const id of ids) {
      const el = document.querySelector(`[data-testid="${id}"]`);
      out[id] = el ? box(el) : null;
    }
    return out;
  }, testids);
}
