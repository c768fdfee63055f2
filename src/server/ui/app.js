// tokengate's status page: polls /admin/status every second and redraws in place. Names come
// from the config and clients, so they are set as text, never as HTML.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const view = { offset: 0, limit: 20, sort: "tokens", q: "" };
let total = 0;

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

function fmt(x) {
  if (x === null || x === undefined) return "—";
  const a = Math.abs(x);
  if (a >= 1e9) return (x / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (x / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (x / 1e3).toFixed(1) + "k";
  if (a >= 100 || Number.isInteger(x)) return String(Math.round(x));
  return x.toFixed(a >= 10 ? 1 : 2);
}

// A limit's remaining against its capacity: green, amber under 20% (the alert line), red at 0.
function bar(limit) {
  const ratio = limit.capacity > 0 ? Math.max(0, Math.min(1, limit.remaining / limit.capacity)) : 0;
  const row = el("div", { class: "bar", title: `${limit.level} ${limit.algorithm}, unit ${limit.unit}` });
  row.append(el("span", {}, `${limit.level}:${limit.name}`));
  const track = el("div", { class: "track" });
  const fill = el("div", { class: "fill" + (ratio <= 0 ? " empty" : ratio < 0.2 ? " low" : "") });
  fill.style.width = (ratio * 100).toFixed(1) + "%";
  track.append(fill);
  row.append(track, el("span", { class: "figure" }, `${fmt(limit.remaining)} / ${fmt(limit.capacity)}`));
  return row;
}

function bars(limits) {
  const box = el("div", { class: "bars" });
  if (limits === null) box.append(el("span", { class: "dim" }, "limiter unavailable"));
  else if (limits.length === 0) box.append(el("span", { class: "dim" }, "no limits"));
  else for (const l of limits) box.append(bar(l));
  return box;
}

// Tokens per 5 s bin as a line, rejections as red ticks under it.
function sparkline(spark) {
  const w = 180, h = 30;
  const box = svg("svg", { width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img" });
  if (!spark) return box;
  const tokens = spark.prompt.map((p, i) => p + spark.completion[i]);
  const top = Math.max(1, ...tokens);
  const step = w / Math.max(1, tokens.length - 1);
  const points = tokens.map((t, i) => `${(i * step).toFixed(1)},${(h - 8 - (t / top) * (h - 10)).toFixed(1)}`);
  box.append(svg("polyline", { points: points.join(" "), fill: "none", stroke: "#7dd3fc", "stroke-width": 1.5 }));
  spark.rejections.forEach((r, i) => {
    if (r > 0) box.append(svg("rect", { x: i * step - 1.5, y: h - 6, width: 3, height: 6, fill: "#f87171" }));
  });
  const title = svg("title");
  title.textContent = `peak ${fmt(top / spark.bin_s)} tok/s; ${spark.rejections.reduce((a, b) => a + b, 0)} rejected`;
  box.append(title);
  return box;
}

function tenants(data) {
  const body = document.querySelector("#tenants tbody");
  body.replaceChildren();
  for (const t of data.items) {
    const row = el("tr", { "data-tenant": t.id });
    row.append(el("td", {}, t.id));
    const cell = el("td");
    cell.append(bars(t.limits));
    row.append(cell);
    row.append(el("td", { class: "num rejected" }, fmt(t.rejections_per_s)));
    row.append(el("td", { class: "num prompt" }, fmt(t.prompt_tokens_per_s)));
    row.append(el("td", { class: "num completion" }, fmt(t.completion_tokens_per_s)));
    const spark = el("td");
    spark.append(sparkline(t.spark));
    row.append(spark);
    body.append(row);
  }
  total = data.total;
  document.getElementById("tenant-count").textContent =
    `${data.total} shown of ${data.configured}` + (data.q ? ` matching “${data.q}”` : "");
  const last = Math.min(data.total, data.offset + data.items.length);
  document.getElementById("page").textContent = data.total ? `${data.offset + 1}–${last} of ${data.total}` : "none";
  document.getElementById("prev").disabled = data.offset === 0;
  document.getElementById("next").disabled = last >= data.total;
}

// Tenants × minutes, the colour on a square-root scale: a super-consumer stands out, and a
// light user still shows.
function heatmap(data, now) {
  const rows = data.rows;
  const box = document.getElementById("heatmap");
  box.replaceChildren();
  if (rows.length === 0) {
    box.append(el("span", { class: "dim" }, "no tokens in the last hour"));
    return;
  }
  const label = 130, cell = 12, gap = 1, w = label + data.minutes * (cell + gap), h = rows.length * (cell + gap) + 16;
  const map = svg("svg", { width: w, height: h, viewBox: `0 0 ${w} ${h}`, id: "heat" });
  const top = Math.max(1, ...rows.flatMap((r) => r.tokens));
  rows.forEach((r, y) => {
    const text = svg("text", { x: label - 6, y: y * (cell + gap) + cell - 2, "text-anchor": "end" });
    text.textContent = r.tenant.length > 18 ? r.tenant.slice(0, 17) + "…" : r.tenant;
    map.append(text);
    r.tokens.forEach((tokens, x) => {
      const level = tokens > 0 ? Math.sqrt(tokens / top) : 0;
      const rect = svg("rect", {
        x: label + x * (cell + gap), y: y * (cell + gap), width: cell, height: cell, rx: 2,
        fill: tokens > 0 ? `hsl(${38 - 38 * level}, 95%, ${22 + 40 * level}%)` : "#1e293b",
      });
      const title = svg("title");
      title.textContent = `${r.tenant}: ${tokens} tokens, ${data.minutes - 1 - x} min ago`;
      rect.append(title);
      map.append(rect);
    });
  });
  const axis = svg("text", { x: label, y: h - 2 });
  axis.textContent = `60 min ago … now (${new Date(now * 1000).toLocaleTimeString()})`;
  map.append(axis);
  box.append(map);
}

function upstreams(list) {
  const body = document.querySelector("#upstreams tbody");
  body.replaceChildren();
  for (const u of list) {
    const row = el("tr");
    row.append(el("td", { title: u.url }, u.name));
    row.append(el("td", { class: u.healthy ? "health-up" : "health-down" }, u.healthy ? "up" : "ejected"));
    row.append(el("td", { class: "num" }, fmt(u.in_flight)));
    row.append(el("td", { class: "num" }, fmt(u.queue)));
    row.append(el("td", { class: "num" }, u.kv_cache === null ? "—" : (u.kv_cache * 100).toFixed(0) + "%"));
    const ms = (x) => (u.ttfb_samples ? fmt(x) + " ms" : "—");
    row.append(el("td", { class: "num" }, ms(u.ttfb_p50_ms)), el("td", { class: "num" }, ms(u.ttfb_p99_ms)));
    body.append(row);
  }
}

function queues(list) {
  const body = document.querySelector("#queues tbody");
  body.replaceChildren();
  if (list.length === 0) {
    const row = el("tr");
    row.append(el("td", { class: "dim", colspan: 2 }, "none waiting"));
    body.append(row);
  }
  for (const q of list) {
    const row = el("tr");
    row.append(el("td", {}, q.key), el("td", { class: "num" }, String(q.depth)));
    body.append(row);
  }
}

function render(s) {
  const state = document.getElementById("state");
  const trouble = s.draining ? "draining" : s.limiter_unavailable ? "limiter unavailable" : "";
  state.textContent = trouble || "serving";
  state.className = "pill " + (trouble ? "bad" : "ok");
  document.getElementById("updated").textContent = "updated " + new Date(s.now * 1000).toLocaleTimeString();
  tenants(s.tenants);
  heatmap(s.heatmap, s.now);
  upstreams(s.upstreams);
  const global = document.getElementById("global");
  global.replaceChildren(bars(s.global));
  queues(s.queues);
}

async function poll() {
  const query = new URLSearchParams({ offset: view.offset, limit: view.limit, sort: view.sort, q: view.q });
  try {
    const res = await fetch("/admin/status?" + query, { cache: "no-store" });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    render(await res.json());
  } catch (e) {
    const state = document.getElementById("state");
    state.textContent = "unreachable: " + e.message;
    state.className = "pill bad";
  }
  setTimeout(poll, 1000);
}

document.getElementById("filter").addEventListener("input", (e) => {
  view.q = e.target.value;
  view.offset = 0;
});
document.getElementById("sort").addEventListener("change", (e) => {
  view.sort = e.target.value;
  view.offset = 0;
});
document.getElementById("prev").addEventListener("click", () => (view.offset = Math.max(0, view.offset - view.limit)));
document.getElementById("next").addEventListener("click", () => {
  if (view.offset + view.limit < total) view.offset += view.limit;
});
poll();
