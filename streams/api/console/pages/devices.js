// Devices: the registered devices (searchable), and one device with its hot state, a chart per
// numeric parameter over a chosen recent range (ClickHouse), its newest envelopes, its sessions
// and the credentials it connects to NATS with (issue, rotate, revoke; a new secret shown once).
import {
  api, h, table, cell, state, timeAt, short, facts, notice, act, documented, viewState, setViewState,
} from "../lib.js";

export async function listDevices(view) {
  const search = h("input", { id: "device-search", type: "search", placeholder: "filter the loaded devices" });
  const body = h("tbody", { id: "devices-rows" });
  const more = h("button", { id: "devices-more", type: "button", hidden: true }, "More");
  let items = [];
  let next = "/v1/devices?limit=200";
  search.value = viewState().q || ""; // #/devices?q=<text>: the filter typed
  async function load() { // a page at a time; the fleet page searches every device on the server
    const page = await api(next);
    items = items.concat(page.items);
    next = page.next;
    more.hidden = !next;
    draw();
  }
  function draw() {
    const q = search.value.trim().toLowerCase();
    const shown = items.filter((d) => !q || [d.external_id, d.name, d.schema].some((v) => v && v.toLowerCase().includes(q)));
    body.replaceChildren(...shown.map((d) => h("tr", {},
      cell("device", h("a", { href: `#/devices/${encodeURIComponent(d.external_id)}` }, d.external_id)),
      cell("name", d.name ?? ""), cell("state", d.active ? "active" : "inactive"),
      cell("schema", d.schema ? `${d.schema} v${d.schema_version ?? "?"}` : "—"), cell("updated", timeAt(d.updated_at)))));
    if (!shown.length) body.append(h("tr", {}, h("td", { colspan: 5, class: "muted" }, q ? "No loaded device matches." : "No devices.")));
  }
  search.addEventListener("input", () => { setViewState({ q: search.value.trim() }); draw(); });
  more.addEventListener("click", () => act(more, load));
  await load();
  const t = table(["device", "name", "state", "schema", "updated"], [], { id: "devices", class: "cards" });
  t.querySelector("tbody").replaceWith(body);
  view.append(h("h1", {}, "Devices"), h("div", { class: "filters" }, search), t, more);
}

export async function showDevice(view, device) {
  const enc = encodeURIComponent(device);
  let d = await api(`/v1/devices/${enc}`);
  const toggle = h("button", { id: "device-toggle", type: "button" });
  const stateCell = h("span", { id: "device-state" });
  function show() { // the device's activation as the server last answered it
    stateCell.replaceChildren(d.active ? "active" : "inactive (envelopes recorded, not published)");
    stateCell.dataset.active = String(d.active);
    toggle.textContent = d.active ? "Deactivate" : "Activate";
  }
  show();
  toggle.addEventListener("click", () => act(toggle, async () => {
    const r = await api(`/v1/devices/${enc}/${d.active ? "deactivate" : "activate"}`, { method: "POST" });
    // Read back, so the page shows what the registry holds now (its answer, should that fail).
    d = await api(`/v1/devices/${enc}`).catch(() => r.device);
    show();
    notice(`${device} is now ${d.active ? "active" : "inactive"}${r.changed ? "" : " (it already was)"}.`);
  }));
  const [sessions, activity] = await Promise.all([
    api(`/v1/sessions?device=${enc}&limit=50`), api(`/v1/devices/${enc}/activity`)]);
  const topics = Object.entries(activity.state).sort();
  const hot = topics.length
    ? topics.flatMap(([topic, doc]) => [
      h("h3", {}, topic, " ", h("span", { class: "muted" }, "measured ", timeAt(doc.ts), doc.seq == null ? "" : `, seq ${doc.seq}`)),
      table(["parameter", "value"], Object.entries(doc.values || {}).sort().map(([k, v]) =>
        h("tr", {}, h("td", {}, k), h("td", {}, typeof v === "object" && v !== null ? JSON.stringify(v) : String(v)))),
      { class: "hot-state", "data-topic": topic })])
    : [h("p", { class: "muted" }, "No measurement published yet.")];
  const recent = table(["envelope", "received", "measured", "seq", "topic", "status", "error"],
    activity.messages.map((m) => h("tr", {},
      cell("envelope", h("a", { href: `#/messages/${m.id}` }, m.id)), cell("received", timeAt(m.received_at)),
      cell("measured", timeAt(m.measured_at)), cell("seq", m.seq ?? "—"), cell("topic", m.topic),
      cell("status", state(m.status)), cell("error", m.error_code ?? ""))), { id: "device-messages", class: "cards" });
  view.append(h("h1", {}, "Device ", h("code", {}, device)),
    facts([["name", d.name], ["state", stateCell],
      ["schema", d.schema ? `${d.schema} v${d.schema_version ?? "?"}` : null], ["registered", timeAt(d.created_at)]]),
    h("div", { class: "actions" }, toggle),
    h("h2", {}, "Hot state"), h("div", { id: "device-hot-state" }, hot),
    await charts(enc),
    h("h2", {}, "Recent envelopes"), recent,
    h("h2", {}, "Sessions"),
    sessions.items.length
      ? table(["session", "title", "status", "uploaded"], sessions.items.map((s) => h("tr", {},
        cell("session", h("a", { href: `#/sessions/${s.id}` }, short(s.id))), cell("title", s.title ?? ""),
        cell("status", state(s.status)), cell("uploaded", timeAt(s.created_at)))), { id: "device-sessions", class: "cards" })
      : h("p", { class: "muted", id: "device-sessions" }, "No sessions uploaded."));
  if (d.schema && await documented("/v1/devices/{device}/schema-trial")) view.append(await schemaTrial(d, enc));
  if (await documented("/v1/devices/{device}/credentials")) view.append(await credentials(device, enc));
}

/** Try a stored version of the device's schema on its recorded envelopes (nothing is written). */
async function schemaTrial(d, enc) {
  const schema = await api(`/v1/schemas/${encodeURIComponent(d.schema)}`);
  const pick = h("select", { id: "trial-version", "aria-label": "version" },
    ...[...schema.versions].reverse().map((v) => h("option", { value: v, selected: v === schema.version },
      `${d.schema} v${v}${v === d.schema_version ? " (the device's)" : ""}`)));
  const last = h("input", { id: "trial-last", type: "number", min: 1, max: 100000, value: 1000, "aria-label": "envelopes" });
  const run = h("button", { id: "trial-run", type: "button" }, "Try");
  const out = h("div", { id: "trial-result" });
  const counts = (obj, what) => table([what, "envelopes"],
    Object.entries(obj).map(([k, v]) => h("tr", {}, cell(what, k), cell("envelopes", v))), { class: "cards" });
  run.addEventListener("click", () => act(run, async () => {
    const r = await api(`/v1/devices/${enc}/schema-trial`, { method: "POST",
      body: { schema: d.schema, version: Number(pick.value), last: Number(last.value) || 1000 } });
    const changed = r.envelopes.filter((e) => e.changed).slice(0, 20);
    out.replaceChildren(
      h("p", { id: "trial-verdict", class: r.flagged ? "error" : "muted", "data-flagged": String(r.flagged), "data-version": r.version },
        r.flagged ? `Flagged: v${r.version} would refuse ${r.refused} of ${r.tried} envelopes (${(100 * r.refused_share).toFixed(1)} %, more than ${(100 * r.max_refused_share).toFixed(1)} %).`
          : `v${r.version} would refuse ${r.refused} of ${r.tried} envelopes (${(100 * r.refused_share).toFixed(1)} %): within the limit.`),
      facts([["tried", r.tried], ["recorded before", r.compared], ["would change status", r.status_changed]]),
      Object.keys(r.status_changes).length ? counts(r.status_changes, "status change") : "",
      Object.keys(r.reasons).length ? counts(r.reasons, "reason") : "",
      Object.keys(r.parameters).length ? table(["parameter", "changed", "min", "median", "max"],
        Object.entries(r.parameters).map(([k, p]) => h("tr", {}, cell("parameter", k), cell("changed", p.changed),
          cell("min", p.min ?? "—"), cell("median", p.median ?? "—"), cell("max", p.max ?? "—"))),
        { id: "trial-parameters", class: "cards" }) : "",
      changed.length ? table(["envelope", "measured", "recorded", `v${r.version}`, "reasons", "values that change"],
        changed.map((e) => h("tr", {},
          cell("envelope", e.message_id == null ? `seq ${e.stream_seq}` : h("a", { href: `#/messages/${e.message_id}` }, e.message_id)),
          cell("measured", timeAt(e.measured_at)), cell("recorded", state(e.old_status)), cell(`v${r.version}`, state(e.new_status)),
          cell("reasons", e.new_reasons.join(", ")), cell("values that change", e.changed_parameters.join(", ")))),
        { id: "trial-envelopes", class: "cards" }) : h("p", { class: "muted" }, "No envelope would change."));
  }));
  return h("section", { id: "device-schema-trial" }, h("h2", {}, "Try a schema version"),
    h("p", { class: "muted" }, "Runs the device's newest recorded envelopes through a version of its schema, beside what was recorded. Nothing is written."),
    h("div", { class: "actions" }, pick, last, run), out);
}

/** The device's credentials with Issue, Rotate and Revoke; a secret just issued shown once. */
async function credentials(device, enc) {
  const path = `/v1/devices/${enc}/credentials`;
  const rows = h("tbody", { id: "credential-rows" });
  // The secret lives only in this box's DOM: it is never stored, and the API never shows it again.
  const secretBox = h("div", { id: "credential-secret" });
  async function load() {
    const page = await api(path);
    rows.replaceChildren(...(page.items.length ? page.items.map(row)
      : [h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No credential issued yet."))]));
  }
  function row(c) {
    let revoke = "";
    if (c.state === "active") {
      revoke = h("button", { type: "button", class: "credential-revoke" }, "Revoke");
      revoke.addEventListener("click", () => act(revoke, async () => {
        if (!confirm(`Revoke credential ${c.key_id} of ${device}? Its connections are closed.`)) return;
        await api(`${path}/${encodeURIComponent(c.key_id)}`, { method: "DELETE" });
        notice(`Revoked credential ${c.key_id} of ${device}.`);
        await load();
      }));
    }
    return h("tr", { "data-key": c.key_id, "data-state": c.state },
      cell("key id", h("code", {}, c.key_id)), cell("state", state(c.state)), cell("created", timeAt(c.created_at)),
      cell("revoked", timeAt(c.revoked_at)), cell("", revoke));
  }
  function showSecret(issued) {
    const value = h("input", { id: "credential-secret-value", class: "secret-value", type: "text",
      readonly: true, value: issued.secret, "aria-label": "secret", spellcheck: "false", autocomplete: "off" });
    value.addEventListener("focus", () => value.select());
    const hint = h("span", { class: "muted" }, "Select it and copy (Ctrl+C / ⌘C), or use Copy.");
    const copy = h("button", { type: "button" }, "Copy");
    copy.addEventListener("click", () => {
      value.focus();
      // The clipboard API needs a secure origin; elsewhere the selected text is the copy hint.
      navigator.clipboard?.writeText(issued.secret).then(() => { hint.textContent = "Copied."; }, () => {});
    });
    const done = h("button", { type: "button", id: "credential-secret-done" }, "Done, I stored it");
    done.addEventListener("click", () => secretBox.replaceChildren());
    secretBox.replaceChildren(h("div", { class: "secret-box", role: "alert" },
      h("p", {}, h("strong", {}, "This secret will not be shown again."),
        " Store it on the device now: Tideway keeps only its hash, so a lost secret is replaced (Rotate), never shown."),
      facts([["username", h("code", { id: "credential-username" }, issued.username)], ["secret", value],
        ["key id", h("code", {}, issued.key_id)]]),
      h("p", {}, "The device connects to NATS with user ", h("code", {}, issued.username),
        " and the secret as password; over MQTT, the same username and password."),
      issued.retired.length ? h("p", {}, `Retired: ${issued.retired.join(", ")}.`) : "",
      h("div", { class: "actions" }, copy, done, hint)));
    secretBox.scrollIntoView({ block: "nearest" }); // below the fold on a long device page
  }
  const issue = h("button", { id: "credential-issue", type: "button" }, "Issue");
  issue.addEventListener("click", () => act(issue, async () => {
    showSecret(await api(path, { method: "POST" }));
    await load();
  }));
  const rotate = h("button", { id: "credential-rotate", type: "button" }, "Rotate");
  rotate.addEventListener("click", () => act(rotate, async () => {
    if (!confirm(`Rotate the credentials of ${device}? Every current one is retired and its connections are closed; the device needs the new secret.`)) return;
    showSecret(await api(`${path}/rotate`, { method: "POST" }));
    await load();
  }));
  await load();
  const t = table(["key id", "state", "created", "revoked", ""], [], { id: "device-credentials", class: "cards" });
  t.querySelector("tbody").replaceWith(rows);
  return h("section", {}, h("h2", {}, "Credentials"),
    h("p", { class: "muted" }, "The secrets ", device, " connects to NATS or MQTT with, as the password of user ",
      h("code", {}, `<tenant>.${device}`), ". A secret is shown once, when it is issued."),
    h("div", { class: "actions" }, issue, rotate), secretBox, t);
}

// -- charts ----------------------------------------------------------------------------------------
// The API answers buckets in UTC (with their offset) over the readings' own span; the page draws
// them on one time axis for all the device's charts, ticked on round times of the browser's zone.

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}

const SECOND = 1000, MINUTE = 60 * SECOND, HOUR = 60 * MINUTE, DAY = 24 * HOUR;
/** The ranges a person can chart (window_minutes, how the page says it). */
export const RANGES = [[15, "15 minutes"], [60, "hour"], [360, "6 hours"], [1440, "24 hours"]];
const TICK_STEPS = [...[1, 2, 5, 10, 15, 30].map((n) => n * SECOND), ...[1, 2, 5, 10, 15, 30].map((n) => n * MINUTE),
  ...[1, 2, 3, 6, 12].map((n) => n * HOUR), DAY, 2 * DAY, 7 * DAY];

/** The browser's time zone: its IANA name and its short name at instant ``t`` (EST, GMT+9). */
export function zoneAt(t) {
  const name = Intl.DateTimeFormat().resolvedOptions().timeZone;
  const part = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(new Date(t))
    .find((x) => x.type === "timeZoneName");
  return { name, short: part ? part.value : "" };
}

/** Round instants of the browser's wall clock from t0 to t1 (ms), at most ``most``: {step, ticks}. */
export function timeTicks(t0, t1, most) {
  const step = TICK_STEPS.find((s) => (t1 - t0) / s <= most) ?? TICK_STEPS.at(-1);
  // Rounded on the local wall clock (minutes east of UTC at t0), so that in a zone half an hour
  // off UTC an hourly tick still falls on the hour there.
  const offset = -new Date(t0).getTimezoneOffset() * MINUTE;
  const ticks = [];
  for (let t = Math.ceil((t0 + offset) / step) * step - offset; t <= t1; t += step) ticks.push(t);
  return { step, ticks };
}

function tickLabel(t, step) {
  const d = new Date(t);
  const midnight = d.getHours() === 0 && d.getMinutes() === 0 && d.getSeconds() === 0;
  const opts = step >= DAY || (midnight && step >= MINUTE) ? { month: "short", day: "numeric" }
    : { hour: "2-digit", minute: "2-digit", hourCycle: "h23", ...(step < MINUTE ? { second: "2-digit" } : {}) };
  return new Intl.DateTimeFormat(undefined, opts).format(d);
}

const instant = (t) => new Intl.DateTimeFormat(undefined,
  { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" }).format(new Date(t));

/** A bucket width in seconds as a person says it: 1 s, 15 s, 10 min, 1 h. */
export function span(seconds) {
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${seconds / 60} min`;
  return `${seconds / 3600} h`;
}

/** Round value ticks covering lo..hi (about ``most``): {lo, hi, ticks, digits}. */
function valueTicks(lo, hi, most = 3) {
  if (lo === hi) { const pad = Math.abs(lo) * 0.05 || 1; lo -= pad; hi += pad; }
  const raw = (hi - lo) / most, mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const a = Math.floor(lo / step) * step, b = Math.ceil(hi / step) * step;
  const ticks = [];
  for (let i = 0; a + i * step <= b + step / 2; i++) ticks.push(a + i * step);
  return { lo: a, hi: b, ticks, digits: Math.max(0, -Math.floor(Math.log10(step))) };
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)] : undefined;
}

/** The points cut where the readings stop: a spacing over twice the usual one (never less than a
 * bucket) is a gap, left blank. Returns {runs, usual} (ms). */
export function runsOf(points, stepMs) {
  const usual = Math.max(stepMs, median(points.slice(1).map((p, i) => p.t - points[i].t)) ?? stepMs);
  const runs = [];
  points.forEach((p, i) => {
    if (!i || p.t - points[i - 1].t > 2 * usual) runs.push([]);
    runs.at(-1).push(p);
  });
  return { runs, usual };
}

const W = 360, L = 46, R = 10, T = 20, B = 22;

/** The time axis under a chart: gridlines and labels at round local times. */
function timeAxis(root, frame, x, top, bottom) {
  const { ticks, step } = timeTicks(frame.t0, frame.t1, Math.floor((W - L - R) / 60));
  const g = svg("g", { class: "time-axis" });
  g.append(svg("line", { class: "axis", x1: L, x2: W - R, y1: bottom, y2: bottom }));
  for (const t of ticks) {
    const tx = x(t).toFixed(1);
    g.append(svg("line", { class: "grid", x1: tx, x2: tx, y1: top, y2: bottom }),
      svg("line", { class: "axis", x1: tx, x2: tx, y1: bottom, y2: bottom + 3 }));
    const anchor = x(t) > W - 26 ? "end" : "middle"; // the last label stays inside the drawing
    g.append(svg("text", { class: "tick-label", x: tx, y: bottom + 14, "text-anchor": anchor,
      "data-t": new Date(t).toISOString() }, tickLabel(t, step)));
  }
  root.append(g);
}

/** One chart of a parameter's buckets on the shared time frame {t0, t1, step} (ms): a number as a
 * line of bucket averages with a value axis, a boolean as a band of the share of its readings that
 * were true per bucket. Where readings stop, the chart is blank. */
export function drawParameter(series, frame) {
  const boolean = series.kind === "boolean";
  const H = boolean ? 84 : 136, bottom = H - B;
  const x = (t) => L + ((t - frame.t0) / (frame.t1 - frame.t0 || 1)) * (W - L - R);
  const pts = series.points.map((p) => ({ t: Date.parse(p.t), v: p.value }));
  const { runs, usual } = runsOf(pts, frame.step);
  const unit = series.unit ? ` ${series.unit}` : "";
  const root = svg("svg", { class: `chart param-chart ${boolean ? "bool-chart" : "number-chart"}`,
    "data-parameter": series.parameter, "data-kind": series.kind, "data-runs": runs.length,
    viewBox: `0 0 ${W} ${H}`, role: "img", preserveAspectRatio: "xMinYMin meet" });
  let title;
  if (boolean) {
    title = `${series.parameter}: share of readings true, per bucket`;
    const y0 = T + 4, h0 = bottom - y0;
    root.append(svg("text", { class: "tick-label", x: L - 4, y: y0 + 8, "text-anchor": "end" }, "true"),
      svg("text", { class: "tick-label", x: L - 4, y: bottom - 1, "text-anchor": "end" }, "false"));
    for (const run of runs) {
      run.forEach((p, i) => { // a bucket holds until the next one, or for the usual spacing
        const end = Math.min(frame.t1, i + 1 < run.length ? run[i + 1].t : p.t + usual);
        const bx = x(p.t), bw = Math.max(1, x(end) - bx);
        const g = svg("g", { class: "bool-bucket", "data-t": new Date(p.t).toISOString(), "data-share": p.v });
        g.append(svg("title", {}, `${instant(p.t)}: true in ${Math.round(p.v * 100)} % of readings`),
          svg("rect", { class: "bool-false", x: bx.toFixed(1), y: y0, width: bw.toFixed(1), height: h0 }));
        if (p.v > 0) g.append(svg("rect", { class: "bool-true", x: bx.toFixed(1), y: (bottom - p.v * h0).toFixed(1),
          width: bw.toFixed(1), height: (p.v * h0).toFixed(1) }));
        root.append(g);
      });
    }
  } else {
    const vs = pts.map((p) => p.v);
    const lo = Math.min(...vs), hi = Math.max(...vs);
    title = `${series.parameter}: ${lo.toPrecision(4)} to ${hi.toPrecision(4)}${unit}`;
    const scale = valueTicks(lo, hi);
    const y = (v) => T + 4 + (1 - (v - scale.lo) / (scale.hi - scale.lo)) * (bottom - T - 4);
    const fmt = new Intl.NumberFormat(undefined, { maximumFractionDigits: scale.digits,
      notation: Math.max(Math.abs(scale.lo), Math.abs(scale.hi)) >= 1e5 ? "compact" : "standard" });
    for (const v of scale.ticks) {
      const ty = y(v).toFixed(1);
      root.append(svg("line", { class: "grid", x1: L, x2: W - R, y1: ty, y2: ty }),
        svg("text", { class: "tick-label value-tick", x: L - 4, y: (y(v) + 3.5).toFixed(1), "text-anchor": "end" }, fmt.format(v)));
    }
    const d = runs.filter((r) => r.length > 1)
      .map((r) => r.map((p, i) => `${i ? "L" : "M"}${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join("")).join("");
    if (d) root.append(svg("path", { class: "param-line", d }));
    // A reading alone between gaps is still a mark: a dot (a zero-length line would vanish).
    for (const r of runs.filter((r) => r.length === 1)) {
      root.append(svg("circle", { class: "param-dot", cx: x(r[0].t).toFixed(1), cy: y(r[0].v).toFixed(1), r: 2.5 }));
    }
  }
  timeAxis(root, frame, x, T, bottom);
  root.prepend(svg("title", {}, `${title}${boolean ? "" : " (bucket averages)"}`));
  root.setAttribute("aria-label", title);
  root.append(svg("text", { class: "chart-title", x: 4, y: 13 }, title));
  return root;
}

/** The shared time frame of the device's charts: from its first bucket (at least a minute back)
 * to when the API answered, so the readings fill the width whatever the range asked. */
export function frameOf(r) {
  const t1 = Date.parse(r.until);
  const first = Math.min(...r.parameters.flatMap((p) => p.points.map((q) => Date.parse(q.t))));
  return { t0: Math.min(first, t1 - MINUTE), t1, step: r.step_s * SECOND };
}

/** The device's charts from ClickHouse over a range a person picks; a sentence instead when there
 * is nothing or it fails. */
async function charts(enc) {
  const box = h("div", { id: "device-charts", class: "charts" });
  const caption = h("p", { id: "device-charts-caption", class: "muted chart-caption" });
  // #/devices/<id>?minutes=360: the range charted (an hour unless the URL says another).
  const linked = Number(viewState().minutes);
  const initial = RANGES.some(([m]) => m === linked) ? linked : 60;
  const range = h("select", { id: "device-range", "aria-label": "Chart range" },
    RANGES.map(([m, label]) => h("option", { value: m, selected: m === initial }, `last ${label}`)));
  let asked = 0;
  async function load() {
    const ticket = ++asked, minutes = Number(range.value);
    const label = RANGES.find(([m]) => m === minutes)[1];
    let shown;
    try {
      const r = await api(`/v1/devices/${enc}/series?window_minutes=${minutes}`);
      if (ticket !== asked) return; // a newer pick is on its way
      if (r.parameters.length) {
        const frame = frameOf(r), zone = zoneAt(frame.t1);
        box.dataset.zone = zone.name;
        caption.replaceChildren(`Times in ${zone.name} (${zone.short}), ${instant(frame.t0)} to ${instant(frame.t1)}. `,
          `Each point is a ${span(r.step_s)} bucket: a number's average, a boolean's share of readings that were true. `,
          "Where readings stop for more than twice their usual interval the chart is left blank.");
        shown = r.parameters.map((p) => drawParameter(p, frame));
      } else {
        caption.replaceChildren();
        shown = [h("p", { class: "muted" }, r.reason ? `Charts unavailable: ${r.reason}.` : `No numeric values measured in the last ${label}.`)];
      }
    } catch (err) { // the page stays usable without its charts (ClickHouse down, an older API)
      if (ticket !== asked) return;
      caption.replaceChildren();
      shown = [h("p", { class: "muted" }, `Charts unavailable: ${err.message}`)];
    }
    box.replaceChildren(...shown);
    box.dataset.minutes = minutes; // what the charts show now
  }
  range.addEventListener("change", () => {
    setViewState({ minutes: Number(range.value) === 60 ? null : range.value });
    act(range, load);
  });
  await load();
  return h("section", { id: "device-charts-section" },
    h("div", { class: "chart-head" }, h("h2", {}, "Charts"), range), caption, box);
}
