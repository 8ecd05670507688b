// Sessions: the list, and one session with its runs, files, track, laps (timed per sector; two
// overlaid as speed and as delta to the reference lap over distance, with the corners against
// it), its exports and the active run's features.
import {
  api, h, table, cell, state, short, facts, notice, act, documented, timeAt, duration, viewState,
  setViewState, download, zoned,
} from "../lib.js";

const SVG = "http://www.w3.org/2000/svg";
const BINS = 12;

function svg(tag, attrs = {}) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v != null) el.setAttribute(k, v);
  return el;
}

/** Speed to colour: blue (slowest of the session) to red (fastest). */
const colour = (f) => `hsl(${Math.round(240 - 240 * f)}, 80%, 45%)`;

/** Where the track is drawn: an equirectangular projection around the track's middle (no map
 * tiles), fitted into W x H, and its inverse (a click on the drawing back to degrees). The
 * start/finish line's ends count too, so a line placed off the track still shows. */
function projection(points, line, W, H, PAD) {
  const lats = points.map((p) => p.lat), lons = points.map((p) => p.lon);
  if (line) { lats.push(line.lat1, line.lat2); lons.push(line.lon1, line.lon2); }
  const lat0 = lats.reduce((a, v) => a + v, 0) / lats.length;
  const k = Math.cos((lat0 * Math.PI) / 180);
  const xs = lons.map((v) => v * k), ys = lats.map((v) => -v);
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const scale = Math.min((W - 2 * PAD) / (x1 - x0 || 1e-9), (H - 2 * PAD) / (y1 - y0 || 1e-9));
  return {
    x: (lat, lon) => PAD + (lon * k - x0) * scale,
    y: (lat) => PAD + (-lat - y0) * scale,
    /** Degrees (rounded to 1e-7, about a centimetre) of a point of the drawing. */
    toLatLon: (x, y) => ({
      lat: +(-((y - PAD) / scale + y0)).toFixed(7),
      lon: +(((x - PAD) / scale + x0) / k).toFixed(7),
    }),
  };
}

/** The track as SVG, one path per speed band so thousands of points stay a dozen elements,
 * with the start/finish line (``line``: the laps report's, configured or detected) across it.
 * The drawing scales to its box (viewBox): a phone shows all of it. */
export function drawTrack(points, line = null) {
  const W = 640, H = 440, PAD = 12;
  const proj = projection(points, line, W, H, PAD);
  const px = (i) => `${proj.x(points[i].lat, points[i].lon).toFixed(1)},${proj.y(points[i].lat).toFixed(1)}`;
  const speeds = points.map((p) => p.speed_mps).filter((v) => v != null);
  const lo = speeds.length ? Math.min(...speeds) : 0, hi = speeds.length ? Math.max(...speeds) : 1;
  const bands = Array.from({ length: BINS }, () => []);
  for (let i = 1; i < points.length; i++) {
    const v = points[i].speed_mps ?? lo;
    const b = Math.min(BINS - 1, Math.floor(((v - lo) / (hi - lo || 1)) * BINS));
    bands[b].push(`M${px(i - 1)}L${px(i)}`);
  }
  const root = svg("svg", { id: "track-svg", class: "track", width: W, height: H, viewBox: `0 0 ${W} ${H}`,
    role: "img", "aria-label": "the session's track, coloured by speed, with its start/finish line" });
  bands.forEach((segs, b) => {
    if (segs.length) root.append(svg("path", { class: "track-seg", d: segs.join(""), stroke: colour((b + 0.5) / BINS) }));
  });
  if (line) root.append(lineMark(proj, line, "sf-line", `start-finish ${line.source ?? ""}`));
  const legend = h("p", { class: "muted", id: "track-legend" },
    `${points.length} points, speed ${(lo * 3.6).toFixed(0)} (blue) to ${(hi * 3.6).toFixed(0)} km/h (red)`);
  return { root, legend, proj };
}

/** A start/finish line on the track: the segment and a dot at each end. */
function lineMark(proj, line, id, cls) {
  const [xa, ya, xb, yb] = [proj.x(line.lat1, line.lon1), proj.y(line.lat1), proj.x(line.lat2, line.lon2), proj.y(line.lat2)];
  const g = svg("g", { id, class: cls, "data-source": line.source ?? "placed" });
  g.append(svg("line", { x1: xa.toFixed(1), y1: ya.toFixed(1), x2: xb.toFixed(1), y2: yb.toFixed(1) }));
  for (const [cx, cy] of [[xa, ya], [xb, yb]]) g.append(svg("circle", { cx: cx.toFixed(1), cy: cy.toFixed(1), r: 4 }));
  // A timing line is tens of metres on a circuit of kilometres: a label says where it is.
  const label = svg("text", { class: "sf-label", x: (Math.max(xa, xb) + 6).toFixed(1), y: (Math.min(ya, yb) - 4).toFixed(1) });
  label.textContent = id === "sf-draft" ? "new S/F" : "S/F";
  g.append(label);
  return g;
}

const LINE_SOURCES = {
  config: "placed by the run's config (start_finish)",
  auto: "detected where the track first closes on itself: if laps are missing, place it yourself",
};

/** The track with its start/finish line, and the tools to place another line and reprocess
 * with it (two clicks on the track: the line's ends; then Reprocess follows the new run). */
function trackPanel(id, points, line, run) {
  const { root, legend, proj } = drawTrack(points, line);
  const about = h("p", { id: "line-legend" }, line
    ? [h("span", { class: "sf-key" }, "━ "), `Start/finish line: ${LINE_SOURCES[line.source] ?? line.source}.`]
    : "No start/finish line: lap detection found none (the track never closes on itself). Place one.");
  const place = h("button", { id: "line-place", type: "button" }, "Place start/finish line");
  const go = h("button", { id: "line-reprocess", type: "button", hidden: true }, "Reprocess with this line");
  const cancel = h("button", { id: "line-cancel", type: "button", hidden: true }, "Cancel");
  const hint = h("span", { class: "muted", id: "line-hint" });
  let ends = null; // null: not placing; [] / [p] / [p, q]: the ends clicked so far
  const redraw = () => {
    root.querySelectorAll(".sf-draft").forEach((el) => el.remove());
    if (ends && ends.length === 2) {
      const [a, b] = ends;
      root.append(lineMark(proj, { lat1: a.lat, lon1: a.lon, lat2: b.lat, lon2: b.lon, source: "placed" }, "sf-draft", "sf-draft"));
    } else if (ends && ends.length === 1) {
      root.append(svg("circle", { class: "sf-draft", cx: proj.x(ends[0].lat, ends[0].lon).toFixed(1), cy: proj.y(ends[0].lat).toFixed(1), r: 4 }));
    }
    go.hidden = !(ends && ends.length === 2);
    cancel.hidden = !ends;
    place.hidden = !!ends;
    root.classList.toggle("placing", !!ends);
    hint.textContent = !ends ? "" : ends.length === 0 ? "Click one end of the line on the track, across it."
      : ends.length === 1 ? "Now click the other end." : "Reprocess with it, or click again to start over.";
  };
  place.addEventListener("click", () => { ends = []; redraw(); });
  cancel.addEventListener("click", () => { ends = null; redraw(); });
  root.addEventListener("click", (e) => {
    if (!ends) return;
    const pt = root.createSVGPoint();
    pt.x = e.clientX; pt.y = e.clientY;
    const at = pt.matrixTransform(root.getScreenCTM().inverse());
    if (ends.length === 2) ends = [];
    ends.push(proj.toLatLon(at.x, at.y));
    redraw();
  });
  go.addEventListener("click", () => act(go, async () => {
    const [a, b] = ends;
    // The new run keeps the active run's config (a reprocess's config replaces it whole).
    const config = { ...(run ? run.config : {}), start_finish: { lat1: a.lat, lon1: a.lon, lat2: b.lat, lon2: b.lon } };
    const r = await api(`/v1/sessions/${id}/reprocess`, { method: "POST", body: { config } });
    location.hash = `#/runs/${r.run_id}`;
  }));
  return [h("div", { id: "track" }, root), legend, about, h("div", { class: "actions line-actions" }, place, go, cancel, hint)];
}

/** A table that stacks on a phone: each cell carries its column's name (shown before it in
 * the narrow layout, style.css "Session pages"), so no row is wider than the screen. */
function stacked(el) {
  el.classList.add("stack");
  const names = [...el.querySelectorAll("thead th")].map((th) => th.textContent);
  for (const row of el.querySelectorAll("tbody tr")) {
    [...row.children].forEach((td, i) => td.setAttribute("data-label", names[i] ?? ""));
  }
  return el;
}

/** A lap or sector time as timing screens show it: 31.402, 1:20.402. A duration, never a clock
 * time: no time zone applies. Rounded to the millisecond once, so 59.9996 s reads 1:00.000. */
export function lapTime(s) {
  if (s == null || !Number.isFinite(s)) return "—";
  const ms = Math.round(s * 1000);
  if (ms < 60000) return (ms / 1000).toFixed(3);
  const m = Math.floor(ms / 60000);
  return `${m}:${((ms - m * 60000) / 1000).toFixed(3).padStart(6, "0")}`;
}

/** A time difference in seconds, signed: +0.054, -0.120. */
function signed(s) {
  if (s == null || !Number.isFinite(s)) return "—";
  const ms = Math.round(s * 1000);
  return ms === 0 ? "0.000" : `${ms > 0 ? "+" : "-"}${(Math.abs(ms) / 1000).toFixed(3)}`;
}
const kmh = (v) => (v == null ? "—" : (v * 3.6).toFixed(1));

/** A time with its standard uncertainty after it, smaller: "31.402 ±0.008". */
function timed(s, sigma) {
  return [h("span", { class: "t" }, lapTime(s)), sigma == null ? null : " ",
    sigma == null ? null : h("span", { class: "sigma", title: "standard uncertainty (s), from the timing-line crossings" },
      sigma < 0.0005 ? "±<0.001" : `±${sigma.toFixed(3)}`)];
}

/** The laps as a timing screen shows them: a column per sector (the best valid time of each
 * purple), the lap time, its gap to the best and the best so far, each time with its
 * uncertainty. A grid to read down its columns, so on a phone it scrolls inside its box
 * (the lap column stays put) instead of stacking into cards. */
function lapTable(report) {
  if (!report.laps.length) return h("p", { class: "muted" }, `No laps${report.reason ? `: ${report.reason}` : ""}.`);
  const n = Math.max(0, ...report.laps.map((l) => l.sectors.length));
  const sectors = Array.from({ length: n }, (_, k) => `S${k + 1}`);
  const el = table(["lap", ...sectors, "time", "Δ best", "rolling best", "distance", "max km/h", "avg km/h", "notes"],
    report.laps.map((l) => h("tr", { class: [l.is_best ? "best" : "", l.valid ? "" : "invalid"].join(" ").trim() || null, "data-lap": l.lap },
      h("td", {}, l.lap),
      sectors.map((_, k) => {
        const x = l.sectors.find((s) => s.sector === k + 1);
        if (!x) return h("td", { class: "sector", "data-sector": k + 1 });
        return h("td", { class: x.is_best ? "sector best-sector" : "sector", "data-sector": k + 1,
          title: x.is_best ? `best S${k + 1}` : x.delta_to_best_s == null ? null
            : `${signed(x.delta_to_best_s)} s to the best S${k + 1}` }, timed(x.time_s, x.sigma_s));
      }),
      h("td", { class: "lap-time" }, timed(l.lap_time_s, l.lap_time_sigma_s)),
      h("td", {}, l.delta_to_best_s == null ? "—" : signed(l.delta_to_best_s)),
      h("td", { class: l.rolling_best_s != null && l.valid && l.rolling_best_s === l.lap_time_s ? "rolling improved" : "rolling",
        title: "the best valid lap time up to this lap" }, lapTime(l.rolling_best_s)),
      h("td", {}, l.distance_m == null ? "—" : `${l.distance_m.toFixed(0)} m`),
      h("td", {}, kmh(l.max_speed_mps)), h("td", {}, kmh(l.avg_speed_mps)),
      h("td", {}, [l.is_best ? "best" : "", l.pit ? "pit" : "", l.valid ? "" : "invalid"].filter(Boolean).join(", ")))),
    { id: "lap-table" });
  return h("div", { id: "laps" }, lapSummary(report, n), h("div", { class: "lap-scroll" }, el));
}

/** The line over the lap table: the theoretical best, the best lap and the reference lap. */
function lapSummary(report, sectors) {
  const best = report.laps.find((l) => l.is_best);
  const parts = [];
  if (report.theoretical_best_s != null) {
    parts.push([h("strong", {}, "Theoretical best "), h("span", { id: "theoretical-best" }, lapTime(report.theoretical_best_s)),
      " (sum of the best valid sectors", report.theoretical_best_mini_s == null ? ")"
        : `; of the best mini-sectors ${lapTime(report.theoretical_best_mini_s)})`]);
  } else {
    parts.push(sectors ? "No theoretical best (no valid lap crossed every sector line)" : "No sector times");
  }
  if (best) parts.push(`best lap ${lapTime(best.lap_time_s)} (lap ${best.lap})`);
  parts.push(report.reference_lap == null ? "no reference lap"
    : [`reference lap `, h("span", { id: "reference-lap" }, report.reference_lap), " (deltas and corners are measured against it)"]);
  return h("div", { id: "lap-summary" },
    h("p", {}, parts.flatMap((p, i) => [i ? " · " : null, ...[p].flat()])),
    h("p", { class: "muted lap-key-line" }, h("span", { class: "best-sector-key" }, "purple"),
      ": the best valid time of the sector. ± the time's standard uncertainty (s)."));
}

const LAP_COLOURS = ["#1565c0", "#d84315"];

/** The corners drawn as numbered bands under a chart's lines: the reference lap's corners of
 * the lap analysis (numbered as in the corner table), else the first lap's own. */
function cornerBands(traces, analyses) {
  const analysed = analyses && analyses.find((x) => x.corners.length);
  if (analysed) return analysed.corners.map((c) => ({ label: `C${c.corner}`, corner: c.corner, start_m: c.start_m, end_m: c.end_m }));
  return corners(traces[0]).map((c, i) => ({ label: `C${i + 1}`, segment: c.segment_id, start_m: c.start_m, end_m: c.end_m }));
}

/** A chart's frame: the axes and the corner bands, on an x scale of 0..dMax metres. */
function frame(root, { W, H, L, R, T, B }, x, bands) {
  root.append(svg("path", { class: "axis", d: `M${L},${T}V${H - B}H${W - R}` }));
  for (const c of bands) {
    const x0 = +x(c.start_m), x1 = +x(c.end_m);
    root.append(svg("rect", { class: "corner", "data-corner": c.corner, "data-segment": c.segment, x: x0, y: T,
      width: Math.max(1, x1 - x0).toFixed(1), height: H - T - B }));
    root.append(text(c.label, { class: "axis-label corner-label", x: x0, y: H - B - 4 }));
  }
}

function text(content, attrs) {
  const el = svg("text", attrs);
  el.textContent = content;
  return el;
}

/** Laps as speed (km/h) over distance driven (m), one line each, on shared axes. ``dMax``:
 * the x axis's end, shared with the delta chart under it. */
export function drawLapChart(traces, { dMax = null, bands = cornerBands(traces, null) } = {}) {
  const box = { W: 640, H: 260, L: 60, R: 10, T: 10, B: 28 }, { W, H, L, R, T, B } = box;
  const pts = traces.flatMap((t) => t.points);
  dMax ??= Math.max(1, ...pts.map((p) => p.d_m));
  const vMax = Math.max(1, ...pts.map((p) => p.speed_mps * 3.6));
  const x = (d) => (L + (d / dMax) * (W - L - R)).toFixed(1);
  const y = (v) => (T + (1 - v / vMax) * (H - T - B)).toFixed(1);
  const root = svg("svg", { id: "lap-chart", class: "chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`,
    role: "img", "aria-label": "speed over distance, one line per lap" });
  frame(root, box, x, bands);
  for (const [content, attrs] of [[`${vMax.toFixed(0)} km/h`, { x: 2, y: T + 10 }], ["0", { x: L - 12, y: H - B }],
    [`${dMax.toFixed(0)} m`, { x: W - R - 50, y: H - 8 }]]) root.append(text(content, { class: "axis-label", ...attrs }));
  traces.forEach((t, i) => {
    if (t.points.length < 2) return;
    const d = t.points.map((p, j) => `${j ? "L" : "M"}${x(p.d_m)},${y(p.speed_mps * 3.6)}`).join("");
    root.append(svg("path", { class: "lap-line", "data-lap": t.lap, d, stroke: LAP_COLOURS[i % LAP_COLOURS.length] }));
  });
  const legend = h("p", { class: "muted", id: "lap-chart-legend" }, traces.map((t, i) =>
    h("span", { class: `lap-key lap-key-${i % LAP_COLOURS.length}` }, `lap ${t.lap} (${lapTime(t.lap_time_s)}) `)));
  return [root, legend];
}

/** Each lap's time behind (+, above the zero line) or ahead of (−) the reference lap at each
 * point of the reference lap's path: where a line climbs, the lap loses time there. The x axis
 * is the speed chart's (``dMax``), so a corner band sits under both. */
export function drawDeltaChart(analyses, { dMax, bands }) {
  const box = { W: 640, H: 180, L: 60, R: 10, T: 10, B: 28 }, { W, H, L, R, T, B } = box;
  const ref = analyses[0].reference_lap;
  const deltas = analyses.flatMap((a) => a.delta.map((p) => p.delta_s));
  let hi = Math.max(0, ...deltas), lo = Math.min(0, ...deltas);
  if (hi - lo < 0.1) { hi += 0.05; lo -= 0.05; } // the reference against itself is flat: keep an axis
  const x = (d) => (L + (d / dMax) * (W - L - R)).toFixed(1);
  const y = (v) => (T + ((hi - v) / (hi - lo)) * (H - T - B)).toFixed(1);
  const root = svg("svg", { id: "delta-chart", class: "chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`,
    role: "img", "aria-label": `time behind (+) or ahead of (-) reference lap ${ref} over the lap, one line per lap` });
  frame(root, box, x, bands);
  root.append(svg("path", { class: "zero-line", d: `M${L},${y(0)}H${W - R}` }));
  for (const [content, attrs] of [[`+${hi.toFixed(2)} s`, { x: 2, y: T + 10 }], ["0", { x: L - 12, y: +y(0) + 4 }],
    // The lower bound only where it does not sit on the zero line's label.
    ...(H - B - y(0) > 14 ? [[`-${(-lo).toFixed(2)} s`, { x: 2, y: H - B }]] : []), [`${dMax.toFixed(0)} m`, { x: W - R - 50, y: H - 8 }]]) {
    root.append(text(content, { class: "axis-label", ...attrs }));
  }
  analyses.forEach((a, i) => {
    if (a.delta.length < 2) return;
    const d = a.delta.map((p, j) => `${j ? "L" : "M"}${x(p.d_m)},${y(p.delta_s)}`).join("");
    root.append(svg("path", { class: "delta-line", "data-lap": a.lap, "data-reference": a.lap === ref ? "true" : null, d,
      stroke: LAP_COLOURS[i % LAP_COLOURS.length] }));
  });
  const compared = analyses.some((a) => a.lap === ref);
  const legend = h("p", { class: "muted", id: "delta-chart-legend" }, analyses.map((a, i) =>
    h("span", { class: `lap-key lap-key-${i % LAP_COLOURS.length}`, "data-lap": a.lap },
      a.lap === ref ? `lap ${a.lap} (reference) ` : `lap ${a.lap} ${signed(a.lap_time_s - a.reference_lap_time_s)} s `)),
  compared ? "" : `· 0 is reference lap ${ref} (${lapTime(analyses[0].reference_lap_time_s)}) `,
  "· above 0: behind the reference at that point of its path; a climbing line loses time there.");
  return [root, legend];
}

/** Why there is no delta channel, in the operator's terms (LapAnalysis.reason). */
const NO_DELTA = {
  NO_REFERENCE_LAP: "the run has no reference lap (no valid lap to measure against)",
  NOT_ANALYSED: "the run was processed before lap analysis existed: reprocess the session to see it",
};

const corners = (trace) => trace.segments.filter((g) => g.kind === "corner" && g.start_m != null && g.end_m != null);

/** The lap's corners as detected in it (without a lap analysis): where each starts, its apex
 * and how far it turns. */
function cornerTable(trace) {
  const list = corners(trace);
  if (!list.length) return h("p", { class: "muted", id: "corner-table" }, `No corners found in lap ${trace.lap}.`);
  const m = (v) => (v == null ? "—" : `${v.toFixed(0)} m`);
  return stacked(table(["corner", "direction", "from", "apex", "to", "turns"], list.map((c, i) => h("tr", { "data-segment": c.segment_id },
    h("td", {}, `C${i + 1}`), h("td", {}, c.direction ?? "—"), h("td", {}, m(c.start_m)), h("td", {}, m(c.apex_m)),
    h("td", {}, m(c.end_m)), h("td", {}, c.heading_change_deg == null ? "—" : `${Math.abs(c.heading_change_deg).toFixed(0)}°`))),
  { id: "corner-table" }));
}

/** One lap's corners against the reference lap: where it braked (its top speed before the
 * apex), its entry, apex (lowest) and exit speeds, and the time it gained (green, -) or lost
 * (red, +) from the reference's braking point to the corner's end. Distances are along the
 * reference lap's path. */
function analysedCornerTable(analysis) {
  const m = (v) => `${v.toFixed(0)} m`;
  return stacked(table(["corner", "direction", "brakes at", "apex at", "entry km/h", "apex km/h", "exit km/h", "vs reference"],
    analysis.corners.map((c) => h("tr", { "data-corner": c.corner },
      h("td", {}, `C${c.corner}`), h("td", {}, c.direction ?? "—"), h("td", {}, m(c.braking_m)), h("td", {}, m(c.apex_m)),
      h("td", {}, kmh(c.entry_speed_mps)), h("td", {}, kmh(c.apex_speed_mps)), h("td", {}, kmh(c.exit_speed_mps)),
      h("td", { class: `corner-delta ${Math.abs(c.time_delta_s) < 0.0005 ? "" : c.time_delta_s < 0 ? "time-gained" : "time-lost"}`,
        "data-delta": c.time_delta_s }, `${signed(c.time_delta_s)} s`))),
  { id: "corner-table" }));
}

/** The delta chart and the corner table of the compared laps, or why there are none. */
function analysisPart(traces, analyses, dMax, bands) {
  if (!analyses) return [h("h3", {}, `Corners of lap ${traces[0].lap}`), cornerTable(traces[0])];
  const reason = analyses.find((a) => a.reason)?.reason;
  if (reason) {
    return [h("p", { class: "notice", id: "delta-notice", "data-reason": reason }, `No delta to a reference lap: ${NO_DELTA[reason] ?? reason}.`),
      h("h3", {}, `Corners of lap ${traces[0].lap}`), cornerTable(traces[0])];
  }
  const ref = analyses[0].reference_lap;
  // The corners of the lap being compared with the reference: the second pick's, unless it is
  // the reference lap itself (all zeros).
  const shown = [...analyses].reverse().find((a) => a.lap !== ref) || analyses[0];
  return [h("h3", {}, `Delta to reference lap ${ref}`), ...drawDeltaChart(analyses, { dMax, bands }),
    h("h3", {}, shown.lap === ref ? `Corners of reference lap ${ref}` : `Corners of lap ${shown.lap} against reference lap ${ref}`),
    shown.corners.length ? analysedCornerTable(shown) : h("p", { class: "muted", id: "corner-table" }, `No corners in reference lap ${ref}.`)];
}

/** Two lap pickers, their overlaid speed lines and, when the API analyses laps, their delta to
 * the reference lap and the corners. The pair lives in the URL (``?a=3&b=5``), so a link shows
 * a colleague the same comparison; without one, the best lap and another. */
function lapComparison(id, laps, analysed = false) {
  const byLap = (n) => laps.find((l) => String(l.lap) === String(n));
  const best = laps.find((l) => l.is_best) || laps[0];
  const wanted = viewState();
  const first = byLap(wanted.a) || best;
  const second = byLap(wanted.b) || laps.find((l) => l.lap !== first.lap) || first;
  const pick = (name, chosen) => h("select", { id: name, "aria-label": name === "lap-a" ? "first lap" : "second lap" },
    laps.map((l) => h("option", { value: l.lap, selected: l.lap === chosen.lap }, `lap ${l.lap}${l.is_best ? " (best)" : ""}`)));
  const a = pick("lap-a", first), b = pick("lap-b", second);
  const chart = h("div", { id: "lap-compare" });
  async function load() {
    const pair = [...new Set([a.value, b.value])];
    const [traces, analyses] = await Promise.all([
      Promise.all(pair.map((lap) => api(`/v1/sessions/${id}/laps/${lap}/trace`))),
      analysed ? Promise.all(pair.map((lap) => api(`/v1/sessions/${id}/laps/${lap}/analysis`))) : null]);
    const dMax = Math.max(1, ...traces.flatMap((t) => t.points.map((p) => p.d_m)),
      ...(analyses || []).flatMap((x) => x.delta.map((p) => p.d_m)));
    const bands = cornerBands(traces, analyses);
    chart.replaceChildren(...drawLapChart(traces, { dMax, bands }), ...analysisPart(traces, analyses, dMax, bands));
  }
  const changed = () => { setViewState({ a: a.value, b: b.value }); return load(); };
  a.addEventListener("change", changed);
  b.addEventListener("change", changed);
  return [h("h2", {}, "Speed over distance"), h("div", { class: "filters" }, "compare ", a, " with ", b), chart, load];
}

// The export files (GET /v1/sessions/{id}/export/{file}) and the dataset each cannot be made
// without: stages/batch/export/files.py declares them; a file whose dataset the run lacks is
// named, not linked (the browser test checks those answer 409 EXPORT_UNAVAILABLE).
const EXPORTS = [
  ["laps.csv", "Laps CSV", "laps"], ["sectors.csv", "Sectors CSV", "sector_metrics"],
  ["delta.csv", "Delta CSV", "lap_delta"], ["session.gpx", "GPX", "time_align.gnss"],
  ["session.fit", "FIT", "time_align.gnss"],
];

/** Download links of the active run's exports (fetched with the key: see lib.download). */
function exportLinks(id, run) {
  const has = new Set(run.datasets.map((d) => d.name));
  const links = EXPORTS.filter(([, , needs]) => has.has(needs)).map(([file, label]) => {
    const a = h("a", { href: `/v1/sessions/${id}/export/${file}`, "data-file": file, class: "download" }, label);
    a.addEventListener("click", (e) => {
      e.preventDefault();
      act(a, () => download(a.getAttribute("href")));
    });
    return a;
  });
  const missing = EXPORTS.filter(([, , needs]) => !has.has(needs)).map(([, label]) => label);
  return [h("p", { class: "downloads", id: "session-downloads" }, links),
    ...(missing.length ? [h("p", { class: "muted", id: "session-downloads-missing" },
      `Not in this run: ${missing.join(", ")} (reprocess the session to make them).`)] : [])];
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
      cell("session", h("a", { href: `#/sessions/${s.id}` }, short(s.id))), cell("device", s.device),
      cell("title", s.title ?? ""), cell("status", state(s.status)), cell("latest run", state(s.latest_run_status)),
      cell("query ready", s.query_ready ? "yes" : "no"), cell("uploaded", timeAt(s.created_at)))));
    if (!page.items.length) body.append(h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No sessions.")));
  }
  device.addEventListener("change", () => { setViewState({ device: device.value.trim() }); load(); });
  await load();
  const t = table(["session", "device", "title", "status", "latest run", "query ready", "uploaded"], [], { id: "sessions", class: "cards" });
  t.querySelector("tbody").replaceWith(body);
  view.append(h("h1", {}, "Sessions"), h("div", { class: "filters" }, device), t, await tracks());
}

/** The tracks sessions are timed on: the tenant's saved ones (`tideway tracks add`), each with
 * its kind and when it was saved, and the library's circuits with their source. */
async function tracks() {
  const { items } = await api("/v1/tracks?include=all");
  const saved = items.filter((t) => t.source === "saved");
  const library = items.filter((t) => t.source === "library");
  const sectors = (n) => `${n} sector${n === 1 ? "" : "s"}`;
  const kind = (t) => `${t.finish ? "stage (start → finish)" : "circuit"}, ${sectors(t.sectors.length + 1)}`;
  const rows = saved.map((t) => h("tr", { "data-track": t.name },
    cell("track", t.name), cell("kind", kind(t)),
    cell("from", t.from_session ? h("a", { href: `#/sessions/${t.from_session}` }, short(t.from_session)) : "its lines"),
    cell("saved", zoned(t.created_at, { date: true }))));
  if (!rows.length) rows.push(h("tr", {}, h("td", { colspan: 4, class: "muted" }, "No saved tracks: add one with tideway tracks add.")));
  return h("section", { id: "tracks" }, h("h2", {}, "Tracks"),
    h("p", { class: "muted" }, "A session is timed on the saved or library track it was driven on (its start/finish crossed, its path on the circuit), unless its config names a line or a track."),
    table(["track", "kind", "from", "saved"], rows, { id: "saved-tracks", class: "cards" }),
    h("details", { id: "track-library" }, h("summary", {}, `Library: ${library.length} circuits`),
      h("ul", {}, library.map((t) => h("li", { "data-key": t.key }, `${t.name} (${t.key})`))),
      h("p", { class: "muted track-source" }, library.length ? `Source: ${library[0].reference}` : "")));
}

const GOOD = ["succeeded", "partial"];

/** Whether Roll back has somewhere to go: an earlier run than the active one that ended
 * succeeded or partial (streams/sessions/reprocess.py's rule; retention may still refuse it). */
function canRollBack(s) {
  const active = s.runs.find((r) => r.id === s.active_run_id);
  if (!active) return false;
  return s.runs.some((r) => r.id !== active.id && GOOD.includes(r.status) && r.created_at <= active.created_at);
}

/** Why a run failed, in the operator's terms: the failing job's code and message (a rejected
 * file names itself first: "junk.bin: content is not NMEA..."), and the files it rejected. */
function failure(run, artifacts) {
  const failed = run.jobs.filter((j) => j.state === "failed");
  const rejected = artifacts.filter((a) => a.status === "rejected");
  return h("div", { id: "session-failure", class: "failure", role: "alert" },
    h("p", {}, h("strong", {}, `Run ${short(run.id)} failed`), run.failure_reason ? `: ${run.failure_reason}.` : "."),
    failed.length ? h("ul", {}, failed.map((j) => h("li", { "data-job": j.name },
      h("code", {}, j.name), " ", j.last_error_code ? h("code", {}, j.last_error_code) : "",
      j.last_error_message ? ` — ${j.last_error_message}` : ""))) : null,
    rejected.length ? h("p", {}, `Rejected ${rejected.length === 1 ? "file" : "files"}: `,
      rejected.map((a) => a.filename).join(", "), ". Upload a corrected recording.") : null);
}

/** Why a session shows no track, laps or features: its run failed, or has not ended yet. */
function noResult(latest) {
  if (!latest) return "the session has no run yet";
  if (latest.status === "failed") return `its run ${short(latest.id)} failed (see above)`;
  if (latest.status === "cancelled") return `its run ${short(latest.id)} was cancelled`;
  return `its run ${short(latest.id)} is ${latest.status}`;
}

export async function showSession(view, id) {
  const s = await api(`/v1/sessions/${id}`);
  const latest = s.runs[s.runs.length - 1]; // oldest first
  const runId = s.active_run_id || (latest && latest.id);
  const run = runId ? await api(`/v1/runs/${runId}`) : null;
  const reprocess = h("button", { id: "session-reprocess", type: "button" }, "Reprocess");
  reprocess.addEventListener("click", () => act(reprocess, async () => {
    const r = await api(`/v1/sessions/${id}/reprocess`, { method: "POST", body: {} });
    location.hash = `#/runs/${r.run_id}`;
  }));
  const actions = h("div", { class: "actions" }, reprocess);
  if (canRollBack(s)) {
    const rollback = h("button", { id: "session-rollback", type: "button" }, "Roll back");
    rollback.addEventListener("click", () => act(rollback, async () => {
      const r = await api(`/v1/sessions/${id}/rollback`, { method: "POST", body: {} });
      // Read the session again, so every fact on the page is the new active run's.
      const fresh = h("div");
      await showSession(fresh, id);
      view.replaceChildren(...fresh.childNodes);
      notice(`Rolled back: the session now shows run ${short(r.to_run)} (was ${short(r.from_run)}).`);
    }));
    actions.append(rollback);
  }
  // A later run that failed while an earlier one stays active is told too.
  const failedRun = latest && latest.status === "failed"
    ? (latest.id === runId ? run : await api(`/v1/runs/${latest.id}`)) : null;
  view.append(h("h1", { class: "session-title" }, s.title || "Session", " ", h("code", {}, short(id))),
    facts([["device", h("a", { href: `#/devices/${encodeURIComponent(s.device)}` }, s.device)],
      ["status", state(s.status)], ["query ready", s.query_ready ? "yes" : "no"],
      ["active run", s.active_run_id ? h("a", { href: `#/runs/${s.active_run_id}`, id: "session-active-run" }, s.active_run_id)
        : h("span", { id: "session-active-run" }, "none")],
      ["uploaded", timeAt(s.created_at)]]),
    ...(failedRun ? [failure(failedRun, s.artifacts)] : []),
    actions,
    h("h2", {}, "Runs"),
    stacked(table(["run", "status", "requested by", "created", "took", "failure"], s.runs.map((r) => h("tr", { "data-run": r.id },
      h("td", {}, h("a", { href: `#/runs/${r.id}` }, short(r.id)), r.id === s.active_run_id ? " (active)" : ""),
      h("td", {}, state(r.status)), h("td", {}, r.requested_by), h("td", {}, timeAt(r.created_at)),
      h("td", {}, r.completed_at ? duration((new Date(r.completed_at) - new Date(r.created_at)) / 1000) : "—"),
      h("td", {}, r.failure_reason ?? ""))), { id: "session-runs" })),
    h("h2", {}, "Files"),
    stacked(table(["file", "format", "bytes", "status"], s.artifacts.map((a) => h("tr", {},
      h("td", {}, a.filename), h("td", {}, a.format_detected ?? "—"), h("td", {}, a.bytes.toLocaleString()),
      h("td", {}, state(a.status)))), { id: "session-files" })));
  if (!s.active_run_id) {
    // Nothing to draw: say why in the session's terms, not as the read model's NO_ACTIVE_RUN.
    view.append(h("h2", {}, "Track"), h("p", { class: "muted", id: "track-legend" }, `No track: ${noResult(latest)}.`),
      h("h2", {}, "Features"), h("p", { class: "muted", id: "session-features" }, `No features: ${noResult(latest)}.`));
    return;
  }
  const track = await api(`/v1/sessions/${id}/track`);
  // The lap table's route is served by newer APIs only: ask the document before calling it.
  const report = await documented("/v1/sessions/{id}/laps") ? await api(`/v1/sessions/${id}/laps`) : null;
  view.append(h("h2", {}, "Track"), ...(track.points.length > 1 ? trackPanel(id, track.points, report && report.line, run)
    : [h("p", { class: "muted", id: "track-legend" }, `No track${track.reason ? `: ${track.reason}` : ""}.`)]));
  if (report) {
    view.append(h("h2", {}, "Laps"), lapTable(report));
    if (report.laps.length && await documented("/v1/sessions/{id}/laps/{lap}/trace")) {
      const analysed = await documented("/v1/sessions/{id}/laps/{lap}/analysis");
      const [title, pickers, chart, load] = lapComparison(id, report.laps, analysed);
      view.append(title, pickers, chart);
      await load();
    }
  }
  if (await documented("/v1/sessions/{id}/export/{file}")) view.append(h("h2", {}, "Export"), ...exportLinks(id, run));
  const names = [...new Set([...Object.keys(run.features_available), ...Object.keys(run.feature_reasons)])].sort();
  view.append(h("h2", {}, "Features"), names.length
    ? stacked(table(["feature", "available", "why not"], names.map((n) => h("tr", {},
      h("td", {}, n), h("td", {}, run.features_available[n] ? "yes" : "no"), h("td", {}, run.feature_reasons[n] ?? ""))),
    { id: "session-features" }))
    : h("p", { class: "muted", id: "session-features" }, "The run has not decided its features yet."));
}
