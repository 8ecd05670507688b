// Runs: the list with filters, and one run's DAG drawn as SVG with its jobs' details and actions.
import {
  api, h, table, cell, state, short, facts, notice, act, onEvent, every, onResize, zoned, zoneName, duration,
  viewState, setViewState,
} from "../lib.js";

const STATUSES = ["", "pending", "running", "cancel_requested", "succeeded", "partial", "failed", "cancelled"];
const TERMINAL = new Set(["succeeded", "partial", "failed", "cancelled"]);
const SVG = "http://www.w3.org/2000/svg";

export async function listRuns(view) {
  // The view's state in the URL: #/runs?status=failed&session=…&pages=2 (pages: how many shown).
  const asked = viewState();
  const status = h("select", { id: "run-status" }, STATUSES.map((s) => h("option", { value: s }, s || "any status")));
  const session = h("input", { id: "run-session", type: "text", placeholder: "session id", size: 38 });
  const body = h("tbody", { id: "runs-rows" });
  const more = h("button", { id: "runs-more", type: "button", hidden: true }, "More");
  let next = null;
  let pages = Math.max(1, Math.min(20, Number.parseInt(asked.pages, 10) || 1));

  /** The first page and as many more as the view shows (so a link, or a live re-read, shows as
   * many runs as were shown); with ``append``, the next page. */
  async function load(append = false) {
    const q = new URLSearchParams({ limit: "50" });
    if (status.value) q.set("status", status.value);
    if (session.value.trim()) q.set("session", session.value.trim());
    let page = await api(append && next ? next : `/v1/runs?${q}`);
    const items = [...page.items];
    for (let n = 1; !append && n < pages && page.next; n++) {
      page = await api(page.next);
      items.push(...page.items);
    }
    const rows = items.map((r) => h("tr", { "data-run": r.id },
      cell("run", h("a", { href: `#/runs/${r.id}` }, short(r.id))),
      cell("session", h("a", { href: `#/sessions/${r.session_id}` }, short(r.session_id))),
      h("td", { class: "run-status", "data-label": "status" }, state(r.status)),
      cell("jobs done", `${r.jobs_total - r.jobs_open} / ${r.jobs_total}`),
      cell("requested by", r.requested_by),
      cell("created", zoned(r.created_at, { date: true })),
      cell("failure", r.failure_reason ?? "")));
    if (append) body.append(...rows); else body.replaceChildren(...rows);
    if (!body.children.length) body.append(h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No runs.")));
    next = page.next;
    more.hidden = !next;
  }

  function filtered() { // a new filter starts again from the first page
    pages = 1;
    setViewState({ status: status.value, session: session.value.trim(), pages: null });
    load();
  }
  status.value = STATUSES.includes(asked.status) ? asked.status : "";
  session.value = asked.session || "";
  status.addEventListener("change", filtered);
  session.addEventListener("change", filtered);
  more.addEventListener("click", () => act(more, async () => {
    await load(true);
    pages += 1;
    setViewState({ pages });
  }));
  await load();
  // Live: a run changed state somewhere in the tenant - re-read the page shown.
  onEvent(({ type }) => { if (type.startsWith("run.") || type === "reconnected") load(); });
  view.append(h("h1", {}, "Runs"), h("div", { class: "filters" }, status, session),
    table(["run", "session", "status", "jobs done", "requested by", "created", "failure"], [], { id: "runs", class: "cards" }),
    more, await schedules());
  view.querySelector("#runs tbody").replaceWith(body);
}

/** The tenant's scheduled backfills: when each runs next, and what its last tick did. */
async function schedules() {
  const { items } = await api("/v1/backfill-schedules");
  if (!items.length) return "";
  const last = (s) => s.last_error ? h("span", { class: "error" }, s.last_error)
    : s.last_run_at ? Object.entries(s.last_outcome || {}).map(([k, n]) => `${n} ${k}`).join(", ") || "no sessions" : "—";
  return h("section", { id: "backfill-schedules" }, h("h2", {}, "Scheduled backfills"),
    h("p", { class: "muted" }, "Backfills the workers run by the clock (cron, in UTC); each starts a run only for the sessions not yet at the current versions."),
    table(["schedule", "cron (UTC)", "sessions", "next", "last", "last tick"], items.map((s) => h("tr", { "data-schedule": s.name },
      cell("schedule", s.name), cell("cron (UTC)", h("code", {}, s.cron)),
      cell("sessions", [s.device ? `device ${s.device}` : "every device",
        s.uploaded_within_s ? `uploaded within ${duration(s.uploaded_within_s)}` : ""].filter(Boolean).join(", ")),
      cell("next", zoned(s.next_run_at, { date: true })), cell("last", s.last_run_at ? zoned(s.last_run_at, { date: true }) : "—"),
      cell("last tick", last(s)))), { id: "schedules", class: "cards" }));
}

export async function showRun(view, id) {
  const header = h("div", { id: "run-header" });
  const graph = h("div", { id: "dag" });
  const chart = h("div", { id: "timeline" });
  const detail = h("div", { id: "job-detail" });
  const gating = h("div", { id: "gating" });
  let selected = viewState().job || null; // #/runs/<id>?job=<name>: the job shown
  let lastRun = null;
  let dag = null;
  let width = 0; // the DAG box's width, known once the page is laid out (onResize)

  const select = (name) => { selected = name; setViewState({ job: name }); draw(); };
  function draw() {
    if (!dag) return;
    if (width) graph.replaceChildren(drawDag(dag, width, selected, select));
    chart.replaceChildren(...timeline(dag, selected, select, Date.now()));
    const job = dag.jobs.find((j) => j.name === selected);
    detail.replaceChildren(job ? jobDetail(job) : h("p", { class: "muted" }, "Click a job for its attempts."));
  }

  async function load() {
    const [run, got] = await Promise.all([api(`/v1/runs/${id}`), api(`/v1/runs/${id}/dag`)]);
    lastRun = run;
    dag = got;
    header.replaceChildren(runHeader(run, load));
    draw();
    gating.replaceChildren(...(dag.gating.length
      ? [h("h2", {}, "Gating"), table(["job", "reason", "why"], dag.gating.map((g) =>
        h("tr", {}, h("td", {}, g.job ?? ""), h("td", {}, g.reason ?? ""), h("td", {}, g.detail ?? g.source ?? ""))))]
      : []));
  }
  await load();
  onResize(graph, (w) => { width = w; draw(); });
  onEvent(({ type, body }) => {
    if (type === "reconnected" || (type.startsWith("run.") && body.run_id === id)) load();
  });
  // Jobs move without a domain event each: while the run is open, re-read it every 2 s.
  every(2000, () => { if (lastRun && !TERMINAL.has(lastRun.status)) load(); });
  view.append(h("h1", { class: "run-title" }, "Run ", h("code", {}, id)), header,
    h("h2", {}, "DAG"), graph, detail, h("h2", {}, "Timeline"), chart, gating);
}

function runHeader(run, reload) {
  const cancel = h("button", { id: "run-cancel", type: "button", disabled: TERMINAL.has(run.status) }, "Cancel");
  const retry = h("button", { id: "run-retry", type: "button",
    disabled: !["failed", "cancelled", "partial"].includes(run.status) }, "Retry");
  const reprocess = h("button", { id: "run-reprocess", type: "button" }, "Reprocess session");
  cancel.addEventListener("click", () => act(cancel, async () => {
    const r = await api(`/v1/runs/${run.id}/cancel`, { method: "POST" });
    notice(`Cancelled: ${r.cancelled} jobs cancelled, ${r.requested} asked to stop; run ${r.status}.`);
    await reload();
  }));
  retry.addEventListener("click", () => act(retry, async () => {
    const r = await api(`/v1/runs/${run.id}/retry`, { method: "POST" });
    location.hash = `#/runs/${r.run_id}`;
  }));
  reprocess.addEventListener("click", () => act(reprocess, async () => {
    const r = await api(`/v1/sessions/${run.session_id}/reprocess`, { method: "POST", body: {} });
    location.hash = `#/runs/${r.run_id}`;
  }));
  const features = Object.entries(run.features_available || {});
  const drift = run.summary && run.summary.drift;
  let gate = "";
  if (drift) { // publish_session's drift gate against the run this one would replace
    const held = drift.exceeded && !run.active;
    const promote = h("button", { id: "run-promote", type: "button" }, "Make active");
    promote.addEventListener("click", () => act(promote, async () => {
      const r = await api(`/v1/runs/${run.id}/promote`, { method: "POST" });
      notice(`Run ${r.to_run} is now the session's active run (was ${r.from_run}).`);
      await reload();
    }));
    gate = h("section", { id: "run-drift", "data-held": String(held) },
      h("h2", {}, "Drift gate"),
      h("p", { class: drift.exceeded ? "error" : "muted" }, drift.exceeded
        ? `DRIFT_EXCEEDED: key figures moved beyond the limits from run ${drift.against_run}; ${run.active ? "made active by hand." : "held back, not made active."}`
        : `Within the limits against run ${drift.against_run}.`),
      table(["figure", "before", "after", "change", "limit"], (drift.checks || []).map((c) =>
        h("tr", { class: c.exceeded ? "exceeded" : "" }, cell("figure", c.figure), cell("before", String(c.before ?? "—")),
          cell("after", String(c.after ?? "—")), cell("change", c.change == null ? "—" : String(c.change)),
          cell("limit", c.limit == null ? "—" : String(c.limit)))), { id: "drift-checks", class: "cards" }),
      held ? h("div", { class: "actions" }, promote) : "");
  }
  return h("div", {},
    facts([
      ["status", h("span", { id: "run-state" }, state(run.status))],
      ["session", h("a", { href: `#/sessions/${run.session_id}` }, run.session_id)],
      ["jobs", `${run.jobs_total - run.jobs_open} of ${run.jobs_total} done`],
      ["requested by", run.requested_by],
      ["created", zoned(run.created_at, { date: true })],
      ["completed", run.completed_at && zoned(run.completed_at, { date: true })],
      ["active", run.active ? "yes (the session's current run)" : "no"],
      ["failure", run.failure_reason],
      ["retry of", run.retry_of && h("a", { href: `#/runs/${run.retry_of}` }, run.retry_of)],
      ["versions", `parser ${run.parser_version ?? "—"}, pipeline ${run.pipeline_version ?? "—"}`],
      ["features", features.length ? features.map(([k, ok]) => `${ok ? "✓" : "✗"} ${k}`).join("  ") : null],
    ]),
    h("div", { class: "actions" }, cancel, retry, reprocess), gate);
}

/** Lay the DAG out in columns by depth (a job's column is one past its deepest dependency). */
export function layout(jobs) {
  const depth = new Map();
  const byName = new Map(jobs.map((j) => [j.name, j]));
  const depthOf = (name, seen = new Set()) => {
    if (depth.has(name)) return depth.get(name);
    if (seen.has(name)) return 0; // a cycle cannot happen; do not hang if it did
    seen.add(name);
    const job = byName.get(name);
    const d = job && job.deps.length ? 1 + Math.max(...job.deps.map((e) => depthOf(e.on, seen))) : 0;
    depth.set(name, d);
    return d;
  };
  const columns = [];
  for (const j of jobs) (columns[depthOf(j.name)] ||= []).push(j.name);
  const pos = new Map();
  columns.forEach((names, c) => names.forEach((n, r) => pos.set(n, { c, r })));
  return { pos, columns };
}

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children) el.append(c);
  return el;
}

// -- the DAG, laid out to fit its box -------------------------------------------------------------
//
// Layers are the columns of layout(): a job one past its deepest dependency. In a wide box they
// run left to right and, when they do not all fit, wrap into bands one under the other (a
// 16-job session DAG has 12 layers); an edge into a later band leaves its node to the right,
// drops into the gap under its band and comes in from the left. In a narrow box (a phone) the
// layers run top to bottom instead, as many nodes side by side as fit. Nodes shrink to fit but
// never below NODE.minW, so the box never needs to scroll sideways.

const NODE = { w: 158, minW: 136, h: 34 };
const WIDE = 760; // below this a band would hold 3 layers or fewer: top to bottom reads better
const PAD = 12;

/** Each job's node box ({x, y, w, h, band}) in a drawing ``width`` px wide, and its height. */
export function place(jobs, width) {
  const { columns } = layout(jobs);
  return width >= WIDE ? across(columns, width) : down(columns, width);
}

function across(columns, width) {
  const GX = 34, GY = 12, BAND_GAP = 30;
  let per = Math.max(1, Math.floor((width - GX) / (NODE.minW + GX)));
  const bands = Math.ceil(columns.length / per);
  per = Math.ceil(columns.length / bands); // balanced: 12 layers in 2 bands are 6 and 6
  const w = Math.min(NODE.w, Math.floor((width - GX) / per) - GX);
  const left = Math.floor((width - (per * (w + GX) + GX)) / 2); // centred in the box
  const nodes = new Map();
  const gaps = []; // the y of the middle of the gap under each band
  let top = PAD;
  for (let b = 0; b < bands; b++) {
    const cols = columns.slice(b * per, (b + 1) * per);
    cols.forEach((names, k) => names.forEach((n, r) =>
      nodes.set(n, { x: left + GX + k * (w + GX), y: top + r * (NODE.h + GY), w, h: NODE.h, band: b })));
    const bottom = top + Math.max(...cols.map((c) => c.length)) * (NODE.h + GY) - GY;
    gaps.push(bottom + BAND_GAP / 2);
    top = bottom + BAND_GAP;
  }
  return { mode: "across", nodes, gaps, gx: GX, width, height: top - BAND_GAP + PAD };
}

function down(columns, width) {
  const G = 12, GY = 22;
  const widest = Math.max(1, ...columns.map((c) => c.length));
  const per = Math.min(widest, Math.max(1, Math.floor((width - G) / (NODE.minW + G))));
  const nodes = new Map();
  let y = PAD;
  for (const names of columns) {
    for (let i = 0; i < names.length; i += per) {
      const row = names.slice(i, i + per);
      // A row of one node (most of a session DAG) gets room for its whole label.
      const w = Math.max(Math.min(NODE.w * 1.3, Math.floor((width - G) / row.length) - G),
        Math.min(NODE.minW, width - 2 * G));
      const x0 = (width - (row.length * (w + G) - G)) / 2;
      row.forEach((n, k) => nodes.set(n, { x: x0 + k * (w + G), y, w, h: NODE.h, band: 0 }));
      y += NODE.h + GY;
    }
  }
  return { mode: "down", nodes, gaps: [], gx: G, width, height: y - GY + PAD };
}

/** The SVG path of the edge from node a to node b. */
function edgePath(plan, a, b) {
  if (plan.mode === "down") {
    const x1 = a.x + a.w / 2, y1 = a.y + a.h, x2 = b.x + b.w / 2, y2 = b.y, my = (y1 + y2) / 2;
    return `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}`;
  }
  const x1 = a.x + a.w, y1 = a.y + a.h / 2, x2 = b.x, y2 = b.y + b.h / 2;
  if (a.band === b.band) {
    const mx = (x1 + x2) / 2;
    return `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`;
  }
  const out = x1 + plan.gx / 2, into = x2 - plan.gx / 2, gap = plan.gaps[a.band];
  return `M${x1},${y1} H${out} V${gap} H${into} V${y2} H${x2}`;
}

/** ``text`` cut to about ``px`` pixels of 11 px type, with an ellipsis when cut. */
function fit(text, px) {
  const n = Math.max(4, Math.floor(px / 6.1));
  return text.length <= n ? text : `${text.slice(0, n - 1)}…`;
}

function drawDag(dag, width, selected, onSelect) {
  const plan = place(dag.jobs, width);
  const root = svg("svg", { class: `dag dag-${plan.mode}`, id: "dag-svg", width: plan.width, height: plan.height,
    viewBox: `0 0 ${plan.width} ${plan.height}`, role: "img", "aria-label": "the run's jobs and their dependencies" });
  for (const job of dag.jobs) {
    for (const dep of job.deps) {
      if (!plan.nodes.has(dep.on)) continue;
      root.append(svg("path", { class: dep.hard ? "edge" : "edge soft",
        d: edgePath(plan, plan.nodes.get(dep.on), plan.nodes.get(job.name)) }));
    }
  }
  for (const job of dag.jobs) {
    const { x, y, w, h: ht } = plan.nodes.get(job.name);
    const title = svg("title");
    title.textContent = `${job.name}: ${job.state}, attempt ${job.attempt_count}/${job.max_attempts}` +
      (job.last_error_code ? `, ${job.last_error_code}` : "") + (job.skip_reason ? `, ${job.skip_reason}` : "");
    const label = svg("text", { x: x + 8, y: y + 14 });
    label.textContent = fit(job.name, w - 14);
    const sub = svg("text", { x: x + 8, y: y + 27 });
    sub.textContent = fit(`${job.state}${job.attempt_count > 1 ? ` · ${job.attempt_count} tries` : ""}` +
      `${job.busy_s ? ` · ${duration(job.busy_s)}` : ""}`, w - 14);
    const node = svg("g", { class: `dag-node${job.name === selected ? " selected" : ""}`,
      "data-job": job.name, "data-state": job.state, tabindex: 0 },
      title, svg("rect", { x, y, width: w, height: ht, class: `fill-${job.state}` }), label, sub);
    node.addEventListener("click", () => onSelect(job.name));
    node.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") onSelect(job.name); });
    root.append(node);
  }
  return root;
}

// -- the timeline: when each job could start, when it ran, and for how long -----------------------

const ms = (t) => (t ? Date.parse(t) : null);

/** A job's pieces on the time axis: the wait for a worker, each attempt, the waits for a retry. */
export function pieces(job, now) {
  const attempts = [...job.attempts].sort((a, b) => a.number - b.number)
    .filter((a) => a.started_at)
    .map((a) => ({ kind: "attempt", status: a.status, number: a.number, from: ms(a.started_at),
      to: ms(a.ended_at) ?? (a.status === "running" ? now : ms(a.started_at)) }));
  if (!attempts.length) return [];
  const out = [];
  const queued = ms(job.queued_at);
  if (queued !== null && queued < attempts[0].from) out.push({ kind: "wait", from: queued, to: attempts[0].from });
  attempts.forEach((a, i) => {
    if (i) out.push({ kind: "retry", from: attempts[i - 1].to, to: a.from });
    out.push(a);
  });
  const next = ms(job.next_run_at);
  if (job.state === "retry_wait" && next !== null) out.push({ kind: "retry", from: attempts.at(-1).to, to: Math.max(next, now) });
  return out;
}

/** Round tick steps for an axis of ``span`` ms: about ``n`` of them. */
function tickStep(span, n) {
  const steps = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400]
    .map((s) => s * 1000);
  return steps.find((s) => span / s <= n) ?? Math.ceil(span / n / 86400000) * 86400000;
}

function timeline(dag, selected, onSelect, now) {
  const rows = dag.jobs.map((job, order) => ({ job, order, parts: pieces(job, now) }));
  const ran = rows.filter((r) => r.parts.length);
  const zone = h("p", { class: "muted", id: "timeline-zone" }, `Times in ${zoneName()}.`);
  if (!ran.length) return [zone, h("p", { class: "muted", id: "timeline-empty" }, "No job has started yet.")];
  let t0 = Math.min(...ran.map((r) => r.parts[0].from));
  let t1 = Math.max(...ran.map((r) => r.parts.at(-1).to));
  if (!TERMINAL.has(dag.status)) t1 = Math.max(t1, now);
  if (t1 - t0 < 1000) t1 = t0 + 1000;
  const pct = (t) => `${((t - t0) / (t1 - t0)) * 100}%`;
  const stretch = (el, from, to) => {
    el.style.left = pct(from);
    el.style.width = `${((to - from) / (t1 - t0)) * 100}%`;
    return el;
  };

  // Ticks on round instants, labelled in the browser's zone (named above the chart); every
  // other one is hidden on a phone, and none sits so far right that its label would be cut.
  const step = tickStep(t1 - t0, 6);
  const clock = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit",
    hourCycle: "h23", ...(step < 1000 ? { fractionalSecondDigits: step < 100 ? 2 : 1 } : {}) });
  const ticks = [];
  for (let t = Math.ceil(t0 / step) * step, i = 0; t <= t0 + 0.88 * (t1 - t0); t += step, i++) {
    const tick = h("span", { class: `tl-tick${i % 2 ? " minor" : ""}` },
      h("time", { datetime: new Date(t).toISOString() }, clock.format(new Date(t))));
    tick.style.left = pct(t);
    ticks.push(tick);
  }
  zone.append(" From ", zoned(new Date(t0).toISOString(), { date: true }), " to ",
    zoned(new Date(t1).toISOString(), { date: true }), ` (${duration((t1 - t0) / 1000)}).`);

  ran.sort((a, b) => a.parts[0].from - b.parts[0].from || a.order - b.order);
  const idle = rows.filter((r) => !r.parts.length);
  const lines = [...ran, ...idle].map(({ job, parts }) => {
    const name = h("button", { type: "button", class: "tl-name", title: job.name }, job.name);
    name.addEventListener("click", () => onSelect(job.name));
    const track = h("div", { class: "tl-track" });
    let facts;
    if (parts.length) {
      const from = parts[0].from, to = parts.at(-1).to;
      const bar = stretch(h("div", { class: "tl-bar", "data-job": job.name }), from, to);
      for (const p of parts) {
        const seg = h("span", { class: p.kind === "attempt" ? `tl-attempt tl-${p.status}` : `tl-${p.kind}`,
          title: p.kind === "attempt" ? `attempt ${p.number}: ${p.status}, ${duration((p.to - p.from) / 1000)}`
            : `${p.kind === "wait" ? "waited for a worker" : "waited to retry"} ${duration((p.to - p.from) / 1000)}` });
        seg.style.left = `${((p.from - from) / Math.max(1, to - from)) * 100}%`;
        seg.style.width = `${((p.to - p.from) / Math.max(1, to - from)) * 100}%`;
        bar.append(seg);
      }
      track.append(bar);
      const attempts = parts.filter((p) => p.kind === "attempt");
      const busy = attempts.reduce((sum, p) => sum + (p.to - p.from), 0) / 1000;
      const waited = parts[0].kind === "wait" ? (parts[0].to - parts[0].from) / 1000 : null;
      const end = job.finished_at ?? job.attempts.map((a) => a.ended_at).filter(Boolean).at(-1);
      facts = h("div", { class: "tl-facts" },
        h("span", { class: "tl-start" }, zoned(job.started_at ?? new Date(attempts[0].from).toISOString())),
        " → ", end ? h("span", { class: "tl-end" }, zoned(end)) : state(job.state),
        ` · ran ${duration(busy)}${attempts.length > 1 ? ` in ${attempts.length} attempts` : ""}`,
        waited !== null ? ` · waited ${duration(waited)}` : "");
    } else {
      facts = h("div", { class: "tl-facts muted" }, state(job.state),
        job.skip_reason ? ` ${job.skip_reason}` : "", job.state === "created" ? " (waiting for its dependencies)" : "");
    }
    return h("div", { class: `tl-row${job.name === selected ? " selected" : ""}`, "data-job": job.name },
      name, h("div", { class: "tl-lane" }, track, facts));
  });
  const axis = h("div", { class: "tl-row tl-axis-row" }, h("span", {}),
    h("div", { class: "tl-lane" }, h("div", { class: "tl-axis" }, ticks)));
  const legend = h("p", { class: "tl-legend muted" },
    h("span", { class: "tl-key tl-wait" }), " waiting for a worker ", h("span", { class: "tl-key tl-attempt tl-succeeded" }),
    " attempt ", h("span", { class: "tl-key tl-attempt tl-failed" }), " failed attempt ",
    h("span", { class: "tl-key tl-retry" }), " waiting to retry");
  return [zone, h("div", { class: "tl", role: "list" }, axis, lines), legend];
}

function jobDetail(job) {
  return h("section", { class: "job" },
    h("h2", {}, "Job ", h("code", {}, job.name)),
    facts([
      ["state", state(job.state)],
      ["type / pool", `${job.job_type} / ${job.pool}${job.critical ? " (critical)" : ""}`],
      ["attempts", `${job.attempt_count} of ${job.max_attempts}`],
      ["depends on", job.deps.map((d) => `${d.on}${d.hard ? "" : " (soft)"}`).join(", ") || "nothing"],
      ["time in attempts", duration(job.busy_s)],
      ["created", zoned(job.created_at, { date: true })],
      ["could start", job.queued_at && zoned(job.queued_at, { date: true })],
      ["started / finished", h("span", {}, zoned(job.started_at, { date: true }), " / ",
        zoned(job.finished_at, { date: true }))],
      ["next try", job.next_run_at && zoned(job.next_run_at, { date: true })],
      ["skipped because", job.skip_reason],
      ["last error", job.last_error_code && `${job.last_error_code}: ${job.last_error_message ?? ""}`],
      ["datasets", job.datasets.join(", ")],
    ]),
    job.attempts.length ? table(["#", "status", "worker", "started", "duration", "error"],
      job.attempts.map((a) => h("tr", {},
        cell("#", a.number), cell("status", state(a.status)), cell("worker", a.worker),
        cell("started", zoned(a.started_at)), cell("duration", duration(a.duration_s)),
        cell("error", a.error_code ? `${a.error_code}: ${a.message ?? ""}` : ""))),
      { class: "cards" }) : null);
}
