// Dead letters, triaged: grouped by error signature; redrive or resolve a whole group at once.
import { api, h, table, state, when, notice, act, documented } from "../lib.js";

function report(r) {
  return `Redrive: ${r.completed} completed, ${r.failed} failed, ${r.not_redrivable} not redrivable` +
    ` (resolve those), ${r.not_open} no longer open.`;
}

export async function listGroups(view) {
  const which = h("select", { id: "dlq-state" }, h("option", { value: "open" }, "open"),
    h("option", { value: "resolved" }, "resolved"));
  const body = h("tbody", { id: "dlq-rows" });
  async function load() {
    const page = await api(`/v1/dead-letter-groups?state=${which.value}&limit=200`);
    body.replaceChildren(...page.items.map((g) => groupRow(g, which.value, load)));
    if (!page.items.length) body.append(h("tr", {}, h("td", { colspan: 8, class: "muted" }, "No dead letters.")));
  }
  which.addEventListener("change", load);
  await load();
  const t = table(["code", "stage", "schema", "count", "first seen", "last seen", "sample", ""], [], { id: "dlq-groups" });
  t.querySelector("tbody").replaceWith(body);
  view.append(h("h1", {}, "Dead letters"),
    h("p", { class: "muted" }, "Grouped by error signature: reason code, failing stage, schema version."),
    h("div", { class: "filters" }, which), t);
  if (await documented("/v1/session-dead-letters")) view.append(await sessionDeadLetters());
}

/** Session notices intake dead-lettered (JetStream's SESSIONS_DLQ), oldest first. */
async function sessionDeadLetters() {
  const page = await api("/v1/session-dead-letters?limit=200");
  const rows = page.items.map((d) => h("tr", { "data-session-dead-letter": d.id },
    h("td", {}, d.device), h("td", {}, d.code), h("td", {}, d.message),
    h("td", {}, when(d.last_seen_at))));
  if (!rows.length) rows.push(h("tr", {}, h("td", { colspan: 4, class: "muted" }, "No session dead letters.")));
  return h("section", { id: "session-dlq" },
    h("h2", {}, "Session dead letters"),
    h("p", { class: "muted" }, "Session notices intake could not accept (tideway sessions dlq redrive)."),
    table(["device", "code", "message", "when"], rows, { id: "session-dlq-rows" }),
    page.next ? h("p", { class: "muted" }, "Showing the oldest 200.") : null);
}

function groupRow(g, which, reload) {
  const redrive = h("button", { type: "button", class: "dlq-redrive" }, "Redrive group");
  const note = h("input", { type: "text", class: "dlq-note", placeholder: "why resolved", size: 18 });
  const resolve = h("button", { type: "button", class: "dlq-resolve" }, "Resolve group");
  redrive.addEventListener("click", () => act(redrive, async () => {
    notice(report(await api(`/v1/dead-letter-groups/${encodeURIComponent(g.id)}/redrive`, { method: "POST" })));
    await reload();
  }));
  resolve.addEventListener("click", () => act(resolve, async () => {
    if (!note.value.trim()) throw new Error("say why the group is resolved");
    const r = await api(`/v1/dead-letter-groups/${encodeURIComponent(g.id)}/resolve`,
      { method: "POST", body: { note: note.value.trim() } });
    notice(`Resolved ${r.resolved.length} dead letters${r.not_resolved.length ? `, ${r.not_resolved.length} were not open` : ""}.`);
    await reload();
  }));
  return h("tr", { "data-group": g.id },
    h("td", {}, h("a", { href: `#/dead-letters/${which}/${encodeURIComponent(g.id)}` }, g.code)),
    h("td", {}, g.stage ?? "—"),
    h("td", {}, g.schema ? `${g.schema} v${g.schema_version ?? "?"}` : "—"),
    h("td", { class: "dlq-count" }, g.count),
    h("td", {}, when(g.first_seen_at)), h("td", {}, when(g.last_seen_at)),
    h("td", {}, h("div", { class: "muted" }, g.sample.subject), h("code", {}, g.sample.payload_text)),
    h("td", {}, which === "open" ? h("div", { class: "actions" }, redrive, note, resolve) : null));
}

export async function showGroup(view, which, group) {
  const page = await api(`/v1/dead-letters?state=${which}&group=${encodeURIComponent(group)}&limit=200`);
  view.append(h("h1", {}, "Dead letters of one signature"),
    h("p", {}, h("a", { href: "#/dead-letters" }, "← all groups")),
    table(["id", "envelope", "subject", "reason", "state", "redrives", "first seen", "last seen"],
      page.items.map((d) => h("tr", {},
        h("td", {}, d.id), h("td", {}, h("a", { href: `#/messages/${d.ingestion_message_id}` }, d.ingestion_message_id)),
        h("td", {}, d.subject), h("td", {}, d.reason_code), h("td", {}, state(d.state)),
        h("td", {}, d.redrive_count), h("td", {}, when(d.first_seen_at)), h("td", {}, when(d.last_seen_at)))),
      { id: "dlq-letters" }),
    page.next ? h("p", { class: "muted" }, "Showing the oldest 200.") : null);
}
