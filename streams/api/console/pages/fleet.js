// Fleet: ingest by status, end-to-end latency and the consumer's backlog, open dead letters, and every device's data-quality figures over the
// last hour - sortable (by the server, so a 10,000-device fleet sorts as fast as ten) and
// searchable, so the sick devices are found at once. Two charts show the ingest rate by status
// and the end-to-end latency (p50, p99) over a chosen range, on a time axis in the browser's zone.
import { api, h, timeAt, every, documented, formatDuration, viewState, setViewState } from "../lib.js";

const COLUMNS = [
  ["device", "device", (d) => h("a", { href: `#/devices/${encodeURIComponent(d.device)}` }, d.device)],
  ["last_seen_at", "last seen", (d) => timeAt(d.last_seen_at)],
  ["envelopes", "envelopes/min", (d, r) => (d.envelopes / (r.window_s / 60)).toFixed(2)],
  ["invalid_share", "invalid", (d) => `${(d.invalid_share * 100).toFixed(1)} %`],
  ["duplicates", "duplicates", (d) => d.duplicates],
  ["out_of_order", "out of order", (d) => d.out_of_order],
  ["seq_gaps", "seq gaps", (d) => d.seq_gaps],
  ["latency_p50_s", "latency p50", (d) => formatDuration(d.latency_p50_s)],
  ["clock_skew_s", "clock skew", (d) => formatDuration(d.clock_skew_s)],
];
const TITLES = {
  invalid_share: "Failed validation, or malformed: too large, not JSON, not an envelope",
  clock_skew_s: "Smallest received - measured: large means the device's clock is behind, negative ahead",
};

// -- charts ---------------------------------------------------------------------------------------

const RANGES = [["15m", "15 min"], ["1h", "1 h"], ["6h", "6 h"], ["24h", "24 h"]];
const STATUS_ORDER = ["completed", "failed_validation", "failed_terminal", "inactive_skipped", "duplicate"];
const SVG = "http://www.w3.org/2000/svg";
// The drawing's own units; the SVG scales to its box's width (never wider than the page).
const W = 640, H = 220, M = { left: 58, right: 12, top: 12, bottom: 34 };

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v != null) el.setAttribute(k, v);
  for (const c of children.flat(Infinity)) if (c != null) el.append(c);
  return el;
}

/** The browser's zone, as the axis says it ("Asia/Tokyo", "UTC"). */
function zoneName() {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
}

const MINUTE = 60e3;
const STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720].map((m) => m * MINUTE);

/** Tick times between t0 and t1 (ms), at round local times (every 5 min, every 2 h...). */
function timeTicks(t0, t1) {
  const step = STEPS.find((s) => (t1 - t0) / s <= 6) || STEPS[STEPS.length - 1];
  const d = new Date(t0);
  d.setSeconds(0, 0);
  if (step < 60 * MINUTE) {
    const m = step / MINUTE;
    d.setMinutes(Math.ceil(d.getMinutes() / m) * m);
  } else {
    const hrs = step / (60 * MINUTE);
    if (d.getMinutes() > 0) d.setHours(d.getHours() + 1, 0);
    d.setHours(Math.ceil(d.getHours() / hrs) * hrs);
  }
  const ticks = [];
  for (let t = d.getTime(); t <= t1; t += step) if (t >= t0) ticks.push(t);
  return ticks;
}

function timeLabel(t, spanMs) {
  const opts = { hour: "2-digit", minute: "2-digit" };
  if (spanMs > 12 * 3600e3 && new Date(t).getHours() === 0) {
    return new Date(t).toLocaleDateString(undefined, { month: "short", day: "numeric" });
  }
  return new Date(t).toLocaleTimeString(undefined, opts);
}

/** A line chart over time: ``series`` = [{name, cls, points: [[t ms, value or null]]}];
 *  a null value breaks its line (no data), never draws across the gap. */
function timeChart({ id, title, t0, t1, series, yFormat }) {
  const x0 = M.left, x1 = W - M.right, y0 = H - M.bottom, y1 = M.top;
  const values = series.flatMap((s) => s.points.map(([, v]) => v)).filter((v) => v != null);
  const top = Math.max(...values, 0) || 1;
  const x = (t) => x0 + ((t - t0) / (t1 - t0)) * (x1 - x0);
  const y = (v) => y0 - (v / top) * (y0 - y1);
  const grid = [0, 0.5, 1].map((f) => [
    svg("line", { class: "fleet-grid", x1: x0, x2: x1, y1: y(top * f), y2: y(top * f) }),
    svg("text", { class: "axis-label", x: x0 - 4, y: y(top * f) + 4, "text-anchor": "end" }, yFormat(top * f)),
  ]);
  const ticks = timeTicks(t0, t1).map((t) => [
    svg("line", { class: "axis", x1: x(t), x2: x(t), y1: y0, y2: y0 + 4 }),
    svg("text", { class: "axis-label fleet-tick", x: x(t), y: y0 + 16, "text-anchor": "middle",
      "data-t": new Date(t).toISOString() }, timeLabel(t, t1 - t0)),
  ]);
  const lines = series.map((s) => {
    let d = "", pen = false;
    const dots = [];
    for (const [t, v] of s.points) {
      if (v == null) { pen = false; continue; }
      d += `${pen ? "L" : "M"}${x(t).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
      dots.push(svg("circle", { class: `fleet-dot ${s.cls}`, cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 2,
        "data-t": new Date(t).toISOString() }, svg("title", {}, `${timeLabel(t, 0)} ${s.name}: ${yFormat(v)}`)));
    }
    return svg("g", { class: `fleet-series ${s.cls}`, "data-series": s.name },
      d ? svg("path", { class: "fleet-line", d }) : null, dots);
  });
  return svg("svg", { id, class: "chart fleet-chart", viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": title, preserveAspectRatio: "xMidYMid meet" },
  svg("rect", { class: "fleet-plot", x: x0, y: y1, width: x1 - x0, height: y0 - y1 }),
  grid, svg("path", { class: "axis", d: `M${x0},${y1}V${y0}H${x1}` }), ticks, lines,
  svg("text", { class: "axis-label", x: (x0 + x1) / 2, y: H - 4, "text-anchor": "middle" },
    `time (${zoneName()})`));
}

function legend(series) {
  return h("p", { class: "fleet-legend" }, series.map((s) =>
    h("span", { class: `fleet-key ${s.cls}` }, s.name)));
}

function drawHistory(box, r) {
  const t0 = Date.parse(r.since), t1 = Date.parse(r.until), half = (r.bucket_s * 1000) / 2;
  const mid = (b) => Date.parse(b.t) + half;
  const seen = new Set(r.buckets.flatMap((b) => Object.keys(b.statuses)));
  const statuses = [...STATUS_ORDER.filter((s) => seen.has(s)), ...[...seen].filter((s) => !STATUS_ORDER.includes(s)).sort()];
  const perMin = 60 / r.bucket_s;
  const rate = statuses.map((s) => ({ name: s, cls: `status-${s}`,
    points: r.buckets.map((b) => [mid(b), (b.statuses[s] || 0) * perMin]) }));
  const latency = [["p50", "end_to_end_p50_s"], ["p99", "end_to_end_p99_s"]].map(([name, key]) => ({
    name, cls: `latency-${name}`, points: r.buckets.map((b) => [mid(b), b[key]]) }));
  const empty = !statuses.length;
  box.replaceChildren(
    h("figure", { class: "fleet-figure" },
      h("figcaption", {}, "Ingest rate by status (envelopes/min)"),
      timeChart({ id: "fleet-rate-chart", title: "Ingest rate by status", t0, t1, series: rate,
        yFormat: (v) => v.toLocaleString(undefined, { maximumFractionDigits: v < 1 ? 2 : v < 10 ? 1 : 0 }) }),
      empty ? h("p", { class: "muted" }, "Nothing received in this range.") : legend(rate)),
    h("figure", { class: "fleet-figure" },
      h("figcaption", {}, "End-to-end latency (JetStream to recorded)"),
      timeChart({ id: "fleet-latency-chart", title: "End-to-end latency p50 and p99", t0, t1,
        series: latency, yFormat: formatDuration }),
      legend(latency)));
}

// -- the page -------------------------------------------------------------------------------------

export async function showFleet(view) {
  // The view's state in the URL: #/fleet?sort=device&order=asc&q=<text>&range=6h; what it does
  // not name (or names wrongly) is the default.
  const asked = viewState();
  const sortable = (key) => COLUMNS.some(([k]) => k === key);
  let sort = sortable(asked.sort) ? asked.sort : "seq_gaps";
  let order = asked.order === "asc" ? "asc" : "desc";
  let range = RANGES.some(([k]) => k === asked.range) ? asked.range : "1h";
  const search = h("input", { id: "fleet-search", type: "search", placeholder: "device id" });
  search.value = asked.q || "";
  const summary = h("div", { id: "fleet-summary" });
  const live = h("p", { id: "fleet-live" });
  const [hasLive, hasHistory] = await Promise.all([documented("/v1/fleet/live"), documented("/v1/fleet/history")]);
  const head = h("tr", {});
  const body = h("tbody", { id: "fleet-rows" });
  const charts = h("div", { id: "fleet-charts", class: "fleet-charts" });
  const picker = h("div", { id: "fleet-range", class: "fleet-range", role: "group", "aria-label": "time range" });

  async function loadHistory() {
    if (!hasHistory) return;
    drawHistory(charts, await api(`/v1/fleet/history?range=${range}`));
    for (const b of picker.children) b.setAttribute("aria-pressed", String(b.dataset.range === range));
  }
  const pick = (key) => { range = key; setViewState({ range }); loadHistory(); };
  picker.append(...RANGES.map(([key, label]) => h("button", { type: "button", "data-range": key,
    "aria-pressed": String(key === range), onclick: () => pick(key) }, label)));

  async function loadLive() {
    if (!hasLive) return;
    const r = await api("/v1/fleet/live");
    const c = r.consumer;
    live.replaceChildren(
      h("span", { id: "fleet-e2e" }, `end-to-end latency p50 ${formatDuration(r.end_to_end_p50_s)}, p95 ${formatDuration(r.end_to_end_p95_s)}`),
      ` over ${r.envelopes} envelopes in the last ${r.window_s / 60} min · `,
      h("span", { id: "fleet-pending" }, c ? `consumer pending ${c.pending}, unacknowledged ${c.ack_pending}`
        : "consumer pending unknown"));
  }
  async function load() {
    await Promise.all([loadLive(), loadHistory()]);
    const q = new URLSearchParams({ sort, order, limit: "200" });
    if (search.value.trim()) q.set("search", search.value.trim());
    const r = await api(`/v1/fleet?${q}`);
    const statuses = Object.entries(r.statuses).sort();
    summary.replaceChildren(
      h("p", {}, h("strong", {}, `${r.rate_per_min.toFixed(2)} envelopes/min`), ` over the last ${r.window_s / 60} min: `,
        statuses.length ? statuses.map(([s, n]) => `${s} ${n}`).join(" · ") : "nothing received"),
      h("p", {}, h("a", { href: "#/dead-letters", id: "fleet-dead-letters" }, `${r.open_dead_letters} open dead letters`),
        ` · ${r.matched} devices seen${r.matched > r.devices.length ? `, first ${r.devices.length} shown` : ""}`));
    head.replaceChildren(...COLUMNS.map(([key, label]) => {
      const th = h("th", { class: "sortable", "data-sort": key, title: TITLES[key] },
        label, key === sort ? (order === "desc" ? " ▼" : " ▲") : "");
      th.addEventListener("click", () => {
        order = key === sort && order === "desc" ? "asc" : "desc";
        sort = key;
        setViewState({ sort, order });
        load();
      });
      return th;
    }));
    body.replaceChildren(...r.devices.map((d) =>
      h("tr", { "data-device": d.device }, COLUMNS.map(([key, , cell]) => h("td", { "data-col": key }, cell(d, r))))));
  }
  let typing;
  search.addEventListener("input", () => {
    setViewState({ q: search.value.trim() });
    clearTimeout(typing);
    typing = setTimeout(load, 250);
  });
  await load();
  every(10000, load);
  view.append(h("h1", {}, "Fleet"), summary, live,
    hasHistory ? h("section", { class: "fleet-history" }, picker, charts) : null,
    h("div", { class: "filters" }, search),
    h("table", { id: "fleet" }, h("thead", {}, head), body));
}
