// Runs: the list with filters, and one run's DAG drawn as SVG with its jobs' details and actions.
import { api, h, table, state, when, short, facts, notice, act, onEvent, every } from "../lib.js";

const STATUSES = ["", "pending", "running", "cancel_requested", "succeeded", "partial", "failed", "cancelled"];
const TERMINAL = new Set(["succeeded", "partial", "failed", "cancelled"]);
const SVG = "http://www.w3.org/2000/svg";

export async function listRuns(view) {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const status = h("select", { id: "run-status" }, STATUSES.map((s) => h("option", { value: s }, s || "any status")));
  const session = h("input", { id: "run-session", type: "text", placeholder: "session id", size: 38 });
  const body = h("tbody", { id: "runs-rows" });
  const more = h("button", { id: "runs-more", type: "button", hidden: true }, "More");
  let next = null;

  async function load(append = false) {
    const q = new URLSearchParams({ limit: "50" });
    if (status.value) q.set("status", status.value);
    if (session.value.trim()) q.set("session", session.value.trim());
    const page = await api(append && next ? next : `/v1/runs?${q}`);
    const rows = page.items.map((r) => h("tr", { "data-run": r.id },
      h("td", {}, h("a", { href: `#/runs/${r.id}` }, short(r.id))),
      h("td", {}, h("a", { href: `#/sessions/${r.session_id}` }, short(r.session_id))),
      h("td", { class: "run-status" }, state(r.status)),
      h("td", {}, `${r.jobs_total - r.jobs_open} / ${r.jobs_total}`),
      h("td", {}, r.requested_by),
      h("td", {}, when(r.created_at)),
      h("td", {}, r.failure_reason ?? "")));
    if (append) body.append(...rows); else body.replaceChildren(...rows);
    next = page.next;
    more.hidden = !next;
  }

  status.value = params.get("status") || "";
  status.addEventListener("change", () => load());
  session.addEventListener("change", () => load());
  more.addEventListener("click", () => act(more, () => load(true)));
  await load();
  // Live: a run changed state somewhere in the tenant - re-read the page shown.
  onEvent(({ type }) => { if (type.startsWith("run.") || type === "reconnected") load(); });
  view.append(h("h1", {}, "Runs"), h("div", { class: "filters" }, status, session),
    table(["run", "session", "status", "jobs done", "requested by", "created", "failure"], [], { id: "runs" }),
    more);
  view.querySelector("#runs tbody").replaceWith(body);
}

export async function showRun(view, id) {
  const header = h("div", { id: "run-header" });
  const graph = h("div", { id: "dag" });
  const detail = h("div", { id: "job-detail" });
  let selected = null;
  let lastRun = null;

  async function load() {
    const [run, dag] = await Promise.all([api(`/v1/runs/${id}`), api(`/v1/runs/${id}/dag`)]);
    lastRun = run;
    header.replaceChildren(runHeader(run, load));
    graph.replaceChildren(drawDag(dag, selected, (name) => { selected = name; showJob(); draw(); }));
    function draw() { graph.replaceChildren(drawDag(dag, selected, (name) => { selected = name; showJob(); draw(); })); }
    function showJob() {
      const job = dag.jobs.find((j) => j.name === selected);
      detail.replaceChildren(job ? jobDetail(job) : h("p", { class: "muted" }, "Click a job for its attempts."));
    }
    showJob();
    gating.replaceChildren(...(dag.gating.length
      ? [h("h2", {}, "Gating"), table(["job", "reason", "why"], dag.gating.map((g) =>
        h("tr", {}, h("td", {}, g.job ?? ""), h("td", {}, g.reason ?? ""), h("td", {}, g.detail ?? g.source ?? ""))))]
      : []));
  }
  const gating = h("div", { id: "gating" });
  await load();
  onEvent(({ type, body }) => {
    if (type === "reconnected" || (type.startsWith("run.") && body.run_id === id)) load();
  });
  // Jobs move without a domain event each: while the run is open, re-read it every 2 s.
  every(2000, () => { if (lastRun && !TERMINAL.has(lastRun.status)) load(); });
  view.append(h("h1", {}, "Run ", h("code", {}, id)), header, h("h2", {}, "DAG"), graph, detail, gating);
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
  return h("div", {},
    facts([
      ["status", h("span", { id: "run-state" }, state(run.status))],
      ["session", h("a", { href: `#/sessions/${run.session_id}` }, run.session_id)],
      ["jobs", `${run.jobs_total - run.jobs_open} of ${run.jobs_total} done`],
      ["requested by", run.requested_by],
      ["created", when(run.created_at)],
      ["completed", when(run.completed_at)],
      ["active", run.active ? "yes (the session's current run)" : "no"],
      ["failure", run.failure_reason],
      ["retry of", run.retry_of && h("a", { href: `#/runs/${run.retry_of}` }, run.retry_of)],
      ["versions", `parser ${run.parser_version ?? "—"}, pipeline ${run.pipeline_version ?? "—"}`],
      ["features", features.length ? features.map(([k, ok]) => `${ok ? "✓" : "✗"} ${k}`).join("  ") : null],
    ]),
    h("div", { class: "actions" }, cancel, retry, reprocess));
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

function drawDag(dag, selected, onSelect) {
  const W = 158, H = 34, GX = 34, GY = 12;
  const { pos, columns } = layout(dag.jobs);
  const rows = Math.max(1, ...columns.map((c) => c.length));
  const width = columns.length * (W + GX) + GX, height = rows * (H + GY) + GY;
  const at = (n) => { const p = pos.get(n); return { x: GX + p.c * (W + GX), y: GY + p.r * (H + GY) }; };
  const root = svg("svg", { class: "dag", id: "dag-svg", width, height, viewBox: `0 0 ${width} ${height}`,
    role: "img", "aria-label": "the run's jobs and their dependencies" });
  for (const job of dag.jobs) {
    for (const dep of job.deps) {
      if (!pos.has(dep.on)) continue;
      const a = at(dep.on), b = at(job.name);
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
      root.append(svg("path", { class: dep.hard ? "edge" : "edge soft",
        d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}` }));
    }
  }
  for (const job of dag.jobs) {
    const { x, y } = at(job.name);
    const title = svg("title");
    title.textContent = `${job.name}: ${job.state}, attempt ${job.attempt_count}/${job.max_attempts}` +
      (job.last_error_code ? `, ${job.last_error_code}` : "") + (job.skip_reason ? `, ${job.skip_reason}` : "");
    const label = svg("text", { x: x + 8, y: y + 14 });
    label.textContent = job.name;
    const sub = svg("text", { x: x + 8, y: y + 27 });
    sub.textContent = `${job.state}${job.attempt_count ? ` · ${job.attempt_count}×` : ""}${job.busy_s ? ` · ${job.busy_s.toFixed(1)} s` : ""}`;
    const node = svg("g", { class: `dag-node${job.name === selected ? " selected" : ""}`,
      "data-job": job.name, "data-state": job.state, tabindex: 0 },
      title, svg("rect", { x, y, width: W, height: H, class: `fill-${job.state}` }), label, sub);
    node.addEventListener("click", () => onSelect(job.name));
    root.append(node);
  }
  return root;
}

function jobDetail(job) {
  return h("section", { class: "job" },
    h("h2", {}, "Job ", h("code", {}, job.name)),
    facts([
      ["state", state(job.state)],
      ["type / pool", `${job.job_type} / ${job.pool}${job.critical ? " (critical)" : ""}`],
      ["attempts", `${job.attempt_count} of ${job.max_attempts}`],
      ["depends on", job.deps.map((d) => `${d.on}${d.hard ? "" : " (soft)"}`).join(", ") || "nothing"],
      ["time in attempts", `${job.busy_s.toFixed(2)} s`],
      ["started / finished", `${when(job.started_at)} / ${when(job.finished_at)}`],
      ["next try", job.next_run_at && when(job.next_run_at)],
      ["skipped because", job.skip_reason],
      ["last error", job.last_error_code && `${job.last_error_code}: ${job.last_error_message ?? ""}`],
      ["datasets", job.datasets.join(", ")],
    ]),
    job.attempts.length ? table(["#", "status", "worker", "started", "duration", "error"],
      job.attempts.map((a) => h("tr", {},
        h("td", {}, a.number), h("td", {}, state(a.status)), h("td", {}, a.worker),
        h("td", {}, when(a.started_at)), h("td", {}, a.duration_s == null ? "—" : `${a.duration_s.toFixed(2)} s`),
        h("td", {}, a.error_code ? `${a.error_code}: ${a.message ?? ""}` : "")))) : null);
}

