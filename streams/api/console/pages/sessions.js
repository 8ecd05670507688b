// Sessions: the list, and one session with its runs, files, track, laps (two overlaid as speed
// over distance, with the corners) and the active run's features.
import {
  api, h, table, state, when, short, facts, notice, act, documented, viewState, setViewState,
} from "../lib.js";

const SVG = "http://www.w3.org/2000/svg";
const BINS = 12;

function svg(tag, attrs = {}) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

/** Speed to colour: blue (slowest of the session) to red (fastest). */
const colour = (f) => `hsl(${Math.round(240 - 240 * f)}, 80%, 45%)`;

/** The track as SVG: an equirectangular projection around the track's middle (no map tiles),
 * one path per speed band so thousands of points stay a dozen elements. */
export function drawTrack(points) {
  const W = 640, H = 440, PAD = 12;
  const lat0 = points.reduce((a, p) => a + p.lat, 0) / points.length;
  const k = Math.cos((lat0 * Math.PI) / 180);
  const xs = points.map((p) => p.lon * k), ys = points.map((p) => -p.lat);
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const scale = Math.min((W - 2 * PAD) / (x1 - x0 || 1e-9), (H - 2 * PAD) / (y1 - y0 || 1e-9));
  const px = (i) => `${(PAD + (xs[i] - x0) * scale).toFixed(1)},${(PAD + (ys[i] - y0) * scale).toFixed(1)}`;
  const speeds = points.map((p) => p.speed_mps).filter((v) => v != null);
  const lo = speeds.length ? Math.min(...speeds) : 0, hi = speeds.length ? Math.max(...speeds) : 1;
  const bands = Array.from({ length: BINS }, () => []);
  for (let i = 1; i < points.length; i++) {
    const v = points[i].speed_mps ?? lo;
    const b = Math.min(BINS - 1, Math.floor(((v - lo) / (hi - lo || 1)) * BINS));
    bands[b].push(`M${px(i - 1)}L${px(i)}`);
  }
  const root = svg("svg", { id: "track-svg", class: "track", width: W, height: H, viewBox: `0 0 ${W} ${H}`,
    role: "img", "aria-label": "the session's track, coloured by speed" });
  bands.forEach((segs, b) => {
    if (segs.length) root.append(svg("path", { class: "track-seg", d: segs.join(""), stroke: colour((b + 0.5) / BINS) }));
  });
  const legend = h("p", { class: "muted", id: "track-legend" },
    `${points.length} points, speed ${(lo * 3.6).toFixed(0)} (blue) to ${(hi * 3.6).toFixed(0)} km/h (red)`);
  return [root, legend];
}

function lapTable(report) {
  if (!report.laps.length) return h("p", { class: "muted" }, `No laps${report.reason ? `: ${report.reason}` : ""}.`);
  const kmh = (v) => (v == null ? "—" : (v * 3.6).toFixed(1));
  return table(["lap", "time", "Δ best", "distance", "max km/h", "avg km/h", ""], report.laps.map((l) =>
    h("tr", { class: l.is_best ? "best" : null, "data-lap": l.lap },
      h("td", {}, l.lap), h("td", {}, `${l.lap_time_s.toFixed(3)} s`),
      h("td", {}, l.delta_to_best_s == null ? "—" : `+${l.delta_to_best_s.toFixed(3)}`),
      h("td", {}, l.distance_m == null ? "—" : `${l.distance_m.toFixed(0)} m`),
      h("td", {}, kmh(l.max_speed_mps)), h("td", {}, kmh(l.avg_speed_mps)),
      h("td", {}, [l.is_best ? "best" : "", l.pit ? "pit" : "", l.valid ? "" : "invalid"].filter(Boolean).join(", ")))),
  { id: "lap-table" });
}

const LAP_COLOURS = ["#1565c0", "#d84315"];

/** Laps as speed (km/h) over distance driven (m), one line each, on shared axes. */
export function drawLapChart(traces) {
  const W = 640, H = 260, L = 60, R = 10, T = 10, B = 28;
  const pts = traces.flatMap((t) => t.points);
  const dMax = Math.max(1, ...pts.map((p) => p.d_m)), vMax = Math.max(1, ...pts.map((p) => p.speed_mps * 3.6));
  const x = (d) => (L + (d / dMax) * (W - L - R)).toFixed(1);
  const y = (v) => (T + (1 - v / vMax) * (H - T - B)).toFixed(1);
  const root = svg("svg", { id: "lap-chart", class: "chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`,
    role: "img", "aria-label": "speed over distance, one line per lap" });
  root.append(svg("path", { class: "axis", d: `M${L},${T}V${H - B}H${W - R}` }));
  for (const [text, attrs] of [[`${vMax.toFixed(0)} km/h`, { x: 2, y: T + 10 }], ["0", { x: L - 12, y: H - B }],
    [`${dMax.toFixed(0)} m`, { x: W - R - 50, y: H - 8 }]]) {
    const label = svg("text", { class: "axis-label", ...attrs });
    label.textContent = text;
    root.append(label);
  }
  // The first lap's corners as bands under the lines, numbered as in the corner table.
  corners(traces[0]).forEach((c, i) => {
    const x0 = +x(c.start_m), x1 = +x(c.end_m);
    root.append(svg("rect", { class: "corner", "data-segment": c.segment_id, x: x0, y: T,
      width: Math.max(1, x1 - x0).toFixed(1), height: H - T - B }));
    const label = svg("text", { class: "axis-label corner-label", x: x0, y: H - B - 4 });
    label.textContent = `C${i + 1}`;
    root.append(label);
  });
  traces.forEach((t, i) => {
    if (t.points.length < 2) return;
    const d = t.points.map((p, j) => `${j ? "L" : "M"}${x(p.d_m)},${y(p.speed_mps * 3.6)}`).join("");
    root.append(svg("path", { class: "lap-line", "data-lap": t.lap, d, stroke: LAP_COLOURS[i % LAP_COLOURS.length] }));
  });
  const legend = h("p", { class: "muted", id: "lap-chart-legend" }, traces.map((t, i) =>
    h("span", { class: `lap-key lap-key-${i % LAP_COLOURS.length}` }, `lap ${t.lap} (${t.lap_time_s.toFixed(3)} s) `)));
  return [root, legend];
}

const corners = (trace) => trace.segments.filter((g) => g.kind === "corner" && g.start_m != null && g.end_m != null);

/** The lap's corners: where each starts, its apex and how far it turns. */
function cornerTable(trace) {
  const list = corners(trace);
  if (!list.length) return h("p", { class: "muted", id: "corner-table" }, `No corners found in lap ${trace.lap}.`);
  const m = (v) => (v == null ? "—" : `${v.toFixed(0)} m`);
  return table(["corner", "direction", "from", "apex", "to", "turns"], list.map((c, i) => h("tr", { "data-segment": c.segment_id },
    h("td", {}, `C${i + 1}`), h("td", {}, c.direction ?? "—"), h("td", {}, m(c.start_m)), h("td", {}, m(c.apex_m)),
    h("td", {}, m(c.end_m)), h("td", {}, c.heading_change_deg == null ? "—" : `${Math.abs(c.heading_change_deg).toFixed(0)}°`))),
  { id: "corner-table" });
}

/** Two lap pickers (the best lap and another, to start with) and their overlaid lines. */
function lapComparison(id, laps) {
  const best = laps.find((l) => l.is_best) || laps[0];
  const other = laps.find((l) => l.lap !== best.lap) || best;
  const pick = (name, chosen) => h("select", { id: name }, laps.map((l) =>
    h("option", { value: l.lap, selected: l.lap === chosen.lap }, `lap ${l.lap}${l.is_best ? " (best)" : ""}`)));
  const a = pick("lap-a", best), b = pick("lap-b", other);
  const chart = h("div", { id: "lap-compare" });
  async function load() {
    const wanted = [...new Set([a.value, b.value])];
    const traces = await Promise.all(wanted.map((lap) => api(`/v1/sessions/${id}/laps/${lap}/trace`)));
    chart.replaceChildren(...drawLapChart(traces), h("h3", {}, `Corners of lap ${traces[0].lap}`), cornerTable(traces[0]));
  }
  a.addEventListener("change", load);
  b.addEventListener("change", load);
  return [h("h2", {}, "Speed over distance"), h("div", { class: "filters" }, "compare ", a, " with ", b), chart, load];
}

export async function listSessions(view) {
  const device = h("input", { id: "session-device", type: "search", placeholder: "device" });
  device.value = viewState().device || ""; // #/sessions?device=<id>: the device filter
  const body = h("tbody", { id: "sessions-rows" });
  async function load() {
    const q = new URLSearchParams({ limit: "100" });
    if (device.value.trim()) q.set("device", device.value.trim());
    const page = await api(`/v1/sessions?${q}`);
    body.replaceChildren(...page.items.map((s) => h("tr", {},
      h("td", {}, h("a", { href: `#/sessions/${s.id}` }, short(s.id))), h("td", {}, s.device),
      h("td", {}, s.title ?? ""), h("td", {}, state(s.status)), h("td", {}, state(s.latest_run_status)),
      h("td", {}, s.query_ready ? "yes" : "no"), h("td", {}, when(s.created_at)))));
  }
  device.addEventListener("change", () => { setViewState({ device: device.value.trim() }); load(); });
  await load();
  const t = table(["session", "device", "title", "status", "latest run", "query ready", "uploaded"], [], { id: "sessions" });
  t.querySelector("tbody").replaceWith(body);
  view.append(h("h1", {}, "Sessions"), h("div", { class: "filters" }, device), t);
}

export async function showSession(view, id) {
  const s = await api(`/v1/sessions/${id}`);
  const reprocess = h("button", { id: "session-reprocess", type: "button" }, "Reprocess");
  const rollback = h("button", { id: "session-rollback", type: "button" }, "Roll back");
  reprocess.addEventListener("click", () => act(reprocess, async () => {
    const r = await api(`/v1/sessions/${id}/reprocess`, { method: "POST", body: {} });
    location.hash = `#/runs/${r.run_id}`;
  }));
  rollback.addEventListener("click", () => act(rollback, async () => {
    const r = await api(`/v1/sessions/${id}/rollback`, { method: "POST", body: {} });
    notice(`The session now shows run ${r.to_run} (was ${r.from_run}).`);
  }));
  view.append(h("h1", {}, s.title || "Session", " ", h("code", {}, short(id))),
    facts([["device", h("a", { href: `#/devices/${encodeURIComponent(s.device)}` }, s.device)],
      ["status", state(s.status)], ["query ready", s.query_ready ? "yes" : "no"],
      ["active run", s.active_run_id && h("a", { href: `#/runs/${s.active_run_id}` }, s.active_run_id)],
      ["uploaded", when(s.created_at)]]),
    h("div", { class: "actions" }, reprocess, rollback),
    h("h2", {}, "Runs"),
    table(["run", "status", "requested by", "created", "completed", "failure"], s.runs.map((r) => h("tr", {},
      h("td", {}, h("a", { href: `#/runs/${r.id}` }, short(r.id))), h("td", {}, state(r.status)),
      h("td", {}, r.requested_by), h("td", {}, when(r.created_at)), h("td", {}, when(r.completed_at)),
      h("td", {}, r.failure_reason ?? ""))), { id: "session-runs" }),
    h("h2", {}, "Files"),
    table(["file", "format", "bytes", "status"], s.artifacts.map((a) => h("tr", {},
      h("td", {}, a.filename), h("td", {}, a.format_detected ?? "—"), h("td", {}, a.bytes), h("td", {}, state(a.status))))));
  const track = await api(`/v1/sessions/${id}/track`);
  view.append(h("h2", {}, "Track"), track.points.length > 1 ? h("div", { id: "track" }, drawTrack(track.points))
    : h("p", { class: "muted", id: "track-legend" }, `No track${track.reason ? `: ${track.reason}` : ""}.`));
  // The lap table's route is served by newer APIs only: ask the document before calling it.
  if (s.active_run_id && await documented("/v1/sessions/{id}/laps")) {
    const report = await api(`/v1/sessions/${id}/laps`);
    view.append(h("h2", {}, "Laps"), lapTable(report));
    if (report.laps.length && await documented("/v1/sessions/{id}/laps/{lap}/trace")) {
      const [title, pickers, chart, load] = lapComparison(id, report.laps);
      view.append(title, pickers, chart);
      await load();
    }
  }
  const runId = s.active_run_id || (s.runs[0] && s.runs[0].id);
  if (runId) {
    const run = await api(`/v1/runs/${runId}`);
    const names = [...new Set([...Object.keys(run.features_available), ...Object.keys(run.feature_reasons)])].sort();
    view.append(h("h2", {}, "Features"), names.length
      ? table(["feature", "available", "why not"], names.map((n) => h("tr", {},
        h("td", {}, n), h("td", {}, run.features_available[n] ? "yes" : "no"), h("td", {}, run.feature_reasons[n] ?? ""))),
      { id: "session-features" })
      : h("p", { class: "muted" }, "The run has not decided its features yet."));
  }
}
