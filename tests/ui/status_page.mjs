// Drives a real Chromium (Debian's, through playwright-core) at tokengate's /ui: the page must
// show the tenants and their limits, update its numbers after traffic without a reload, and
// log no console error. Prints one JSON line of what it saw; exits 1 on a failed check.
//   node status_page.mjs <playwright-core dir> <config.json>
// config: { admin, gateway, token, key, tenant, requests, screenshot, chromium, settle_ms }, or
//         with hold_ms: keep the page open that long (the benchmark's "one /ui open") and exit.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";

const [, , pwDir, configPath] = process.argv;
const cfg = JSON.parse(readFileSync(configPath, "utf8"));
const { chromium } = createRequire(import.meta.url)(pwDir);
const seen = { errors: [], checks: {} };
const fail = (why) => {
  seen.failed = why;
  console.log(JSON.stringify(seen));
  process.exit(1);
};

const browser = await chromium.launch({
  executablePath: cfg.chromium,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  // Without the token: 401, with the Basic challenge that makes a browser ask for it.
  // (A page would fail to navigate: headless Chromium has no prompt to show.)
  const anon = await browser.newContext();
  const refused = await anon.request.get(cfg.admin + "/ui");
  seen.checks.without_token = refused.status();
  seen.checks.challenge = refused.headers()["www-authenticate"] || "";
  await anon.close();

  const context = await browser.newContext({
    httpCredentials: { username: "admin", password: cfg.token },
    viewport: { width: 1400, height: 900 },
  });
  const page = await context.newPage();
  page.on("console", (m) => m.type() === "error" && seen.errors.push(m.text()));
  page.on("pageerror", (e) => seen.errors.push("page error: " + e.message));
  page.on("requestfailed", (r) => seen.errors.push("request failed: " + r.url()));
  const res = await page.goto(cfg.admin + "/ui");
  seen.checks.status = res.status();
  // (Under the benchmark's load any tenant may lead the page: there, any row will do.)
  const row = page.locator(cfg.tenant ? `#tenants tr[data-tenant="${cfg.tenant}"]` : "#tenants tr[data-tenant]").first();
  await row.waitFor({ timeout: 10000 });
  seen.checks.tenants = await page.locator("#tenants tr[data-tenant]").evaluateAll((rows) =>
    rows.map((r) => r.getAttribute("data-tenant")));
  seen.checks.limits = await row.locator(".bar span:first-child").allTextContents();
  const figure = async () => (await row.locator(".bar .figure").allTextContents()).join(" | ");
  const heat = async () =>
    page.locator("#heat rect title").evaluateAll((titles, tenant) =>
      titles.map((t) => t.textContent).filter((t) => t.startsWith(tenant + ": ") && !t.includes(": 0 tokens")).length,
    cfg.tenant).catch(() => 0);
  seen.checks.before = { figures: await figure(), heat_cells: await heat() };
  if (cfg.hold_ms) {
    // The benchmark's mode: the page stays open, polling, while load runs elsewhere.
    let polls = 0;
    page.on("response", (r) => r.url().includes("/admin/status") && ++polls);
    await page.waitForTimeout(cfg.hold_ms);
    seen.checks.polls = polls;
    await context.close();
    console.log(JSON.stringify(seen));
    process.exit(seen.errors.length ? 1 : 0);
  }

  // Traffic from a real client, over the gateway's socket.
  seen.checks.answers = {};
  for (let i = 0; i < cfg.requests; ++i) {
    const r = await fetch(cfg.gateway + "/v1/chat/completions", {
      method: "POST",
      headers: { authorization: "Bearer " + cfg.key, "content-type": "application/json" },
      body: JSON.stringify({ model: "llama3-8b", messages: [{ role: "user", content: "hello there" }], max_tokens: 16 }),
    });
    await r.arrayBuffer();
    seen.checks.answers[r.status] = (seen.checks.answers[r.status] || 0) + 1;
  }
  // The page polls every second: the numbers change with no reload.
  const deadline = Date.now() + 15000;
  let after = seen.checks.before;
  while (Date.now() < deadline) {
    after = { figures: await figure(), heat_cells: await heat() };
    if (after.figures !== seen.checks.before.figures && after.heat_cells > 0) break;
    await page.waitForTimeout(250);
  }
  seen.checks.after = after;
  seen.checks.navigations = await page.evaluate(() => performance.getEntriesByType("navigation").length);
  seen.checks.title = await page.title();
  if (cfg.settle_ms) await page.waitForTimeout(cfg.settle_ms);
  await page.screenshot({ path: cfg.screenshot, fullPage: true });
  await context.close();
} catch (e) {
  fail(String(e && e.stack || e));
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));
