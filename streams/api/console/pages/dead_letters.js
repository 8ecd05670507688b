// Dead letters, triaged: grouped by error signature; redrive or resolve a whole group at once.
// A group's sample is clipped (one oversized body must not push the actions off the screen);
// the resolved view says, for each group and each dead letter, why, who and when.
import {
  api, h, table, cell, state, timeAt, longText, tell, attempt, documented, viewState, setViewState,
} from "../lib.js";

function report(r) {
  return `Redrive: ${r.completed} completed, ${r.failed} failed, ${r.not_redrivable} not redrivable` +
    ` (resolve those), ${r.not_open} no longer open.`;
}

/** How a dead letter was resolved: by whom, when, and the operator's note. */
function resolution(d) {
  if (!d.resolution) return h("span", { class: "muted" }, "—");
  const how = d.resolution === "redriven" ? "Redriven" : "Resolved";
  return h("div", { class: "dlq-resolution" },
    h("div", {}, `${how} `, timeAt(d.resolved_at),
      d.resolved_by ? [" by ", h("span", { class: "dlq-resolved-by" }, d.resolved_by)] : null),
    d.resolution_note ? h("div", { class: "dlq-resolution-note" }, `“${d.resolution_note}”`) : null);
}

export async function listGroups(view) {
  // The view's state in the URL: #/dead-letters?state=resolved&expanded=<group id> (the group
  // whose sample is shown whole).
  const asked = viewState();
  const which = h("select", { id: "dlq-state" }, h("option", { value: "open" }, "open"),
    h("option", { value: "resolved" }, "resolved"));
  which.value = asked.state === "resolved" ? "resolved" : "open";
  let expanded = asked.expanded || null;
  const body = h("tbody", { id: "dlq-rows" });
  const last = h("th", {}, "");
  async function load() {
    const page = await api(`/v1/dead-letter-groups?state=${which.value}&limit=200`);
    last.textContent = which.value === "open" ? "" : "resolution";
    body.replaceChildren(...page.items.map((g) => groupRow(g, which.value, load)));
    if (!page.items.length) body.append(h("tr", {}, h("td", { colspan: 8, class: "muted" }, "No dead letters.")));
    for (const tr of body.querySelectorAll("tr[data-group]")) { // the expanded sample stays open
      const sample = tr.querySelector(".dlq-sample details");
      if (sample && tr.dataset.group === expanded) sample.open = true;
    }
  }
  // A sample opened or closed ("toggle" does not bubble: caught on its way down).
  body.addEventListener("toggle", (e) => {
    const tr = e.target.closest?.("tr[data-group]");
    if (!tr || !e.target.matches(".dlq-sample details")) return;
    if (e.target.open) expanded = tr.dataset.group;
    else if (expanded === tr.dataset.group) expanded = null;
    setViewState({ expanded });
  }, true);
  which.addEventListener("change", () => {
    expanded = null;
    setViewState({ state: which.value === "open" ? null : which.value, expanded });
    load();
  });
  await load();
  const t = table(["code", "stage", "schema", "count", "first seen", "last seen", "sample"], [],
    { id: "dlq-groups", class: "dlq-table" });
  t.querySelector("thead tr").append(last);
  t.querySelector("tbody").replaceWith(body);
  view.append(h("h1", {}, "Dead letters"),
    h("p", { class: "muted" }, "Grouped by error signature: reason code, failing stage, schema version."),
    h("div", { class: "filters" }, h("label", {}, "state ", which)), t);
  if (await documented("/v1/session-dead-letters")) view.append(await sessionDeadLetters());
}

/** Session notices intake dead-lettered (JetStream's SESSIONS_DLQ), oldest first. */
async function sessionDeadLetters() {
  const page = await api("/v1/session-dead-letters?limit=200");
  const rows = page.items.map((d) => h("tr", { "data-session-dead-letter": d.id },
    cell("device", d.device), cell("code", d.code), cell("message", longText(d.message)),
    cell("when", timeAt(d.last_seen_at))));
  if (!rows.length) rows.push(h("tr", {}, h("td", { colspan: 4, class: "muted" }, "No session dead letters.")));
  return h("section", { id: "session-dlq" },
    h("h2", {}, "Session dead letters"),
    h("p", { class: "muted" }, "Session notices intake could not accept (tideway sessions dlq redrive)."),
    table(["device", "code", "message", "when"], rows, { id: "session-dlq-rows", class: "dlq-table" }),
    page.next ? h("p", { class: "muted" }, "Showing the oldest 200.") : null);
}

function groupRow(g, which, reload) {
  const href = `#/dead-letters/${which}/${encodeURIComponent(g.id)}`;
  let last;
  if (which === "open") {
    const redrive = h("button", { type: "button", class: "dlq-redrive" }, "Redrive group");
    const note = h("input", { type: "text", class: "dlq-note", placeholder: "why resolved", size: 18,
      "aria-label": `why the ${g.code} group is resolved` });
    const resolve = h("button", { type: "button", class: "dlq-resolve" }, "Resolve group");
    redrive.addEventListener("click", () => attempt(redrive, async () => {
      const r = await api(`/v1/dead-letter-groups/${encodeURIComponent(g.id)}/redrive`, { method: "POST" });
      await reload();
      tell(report(r));
    }));
    resolve.addEventListener("click", () => attempt(resolve, async () => {
      if (!note.value.trim()) throw new Error("say why the group is resolved");
      const r = await api(`/v1/dead-letter-groups/${encodeURIComponent(g.id)}/resolve`,
        { method: "POST", body: { note: note.value.trim() } });
      await reload();
      tell(`Resolved ${r.resolved.length} dead letters${r.not_resolved.length ? `, ${r.not_resolved.length} were not open` : ""}.`);
    }));
    last = cell("", h("div", { class: "actions" }, redrive, note, resolve));
  } else {
    // A group's oldest dead letter stands for it; the group's page lists each one's.
    last = cell("resolution", resolution(g.sample),
      g.count > 1 ? h("a", { class: "muted", href }, `each of the ${g.count}`) : null);
  }
  return h("tr", { "data-group": g.id },
    cell("code", h("a", { href }, g.code)),
    cell("stage", g.stage ?? "—"),
    cell("schema", g.schema ? `${g.schema} v${g.schema_version ?? "?"}` : "—"),
    h("td", { class: "dlq-count", "data-label": "count" }, g.count),
    cell("first seen", timeAt(g.first_seen_at)), cell("last seen", timeAt(g.last_seen_at)),
    h("td", { class: "dlq-sample", "data-label": "sample" },
      h("div", { class: "muted" }, h("a", { href: `#/dead-letters/${which}/${encodeURIComponent(g.id)}` }, g.sample.subject)),
      longText(g.sample.payload_text, 120)),
    last);
}

export async function showGroup(view, which, group) {
  const page = await api(`/v1/dead-letters?state=${which}&group=${encodeURIComponent(group)}&limit=200`);
  const resolved = which === "resolved";
  const columns = ["id", "envelope", "subject", "reason", "state", "redrives", "first seen", "last seen"];
  view.append(h("h1", {}, `Dead letters of one signature (${which})`),
    h("p", {}, h("a", { href: resolved ? "#/dead-letters?state=resolved" : "#/dead-letters" }, "← all groups")),
    table(resolved ? [...columns, "resolution"] : columns,
      page.items.map((d) => h("tr", { "data-dead-letter": d.id },
        cell("id", d.id),
        cell("envelope", h("a", { href: `#/messages/${d.ingestion_message_id}` }, d.ingestion_message_id)),
        cell("subject", h("span", { class: "dlq-subject" }, d.subject)), cell("reason", d.reason_code),
        cell("state", state(d.state)), cell("redrives", d.redrive_count),
        cell("first seen", timeAt(d.first_seen_at)), cell("last seen", timeAt(d.last_seen_at)),
        resolved ? cell("resolution", resolution(d)) : null)),
      { id: "dlq-letters", class: "dlq-table" }));
  if (!page.items.length) view.append(h("p", { class: "muted" }, "None in this state."));
  if (page.next) view.append(h("p", { class: "muted" }, "Showing the oldest 200."));
}
