// Devices: the registered devices (searchable), and one device with its sessions.
import { api, h, table, state, when, short, facts, notice, act } from "../app.js";

export async function listDevices(view) {
  const search = h("input", { id: "device-search", type: "search", placeholder: "filter the loaded devices" });
  const body = h("tbody", { id: "devices-rows" });
  const more = h("button", { id: "devices-more", type: "button", hidden: true }, "More");
  let items = [];
  let next = "/v1/devices?limit=200";
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
      h("td", {}, h("a", { href: `#/devices/${encodeURIComponent(d.external_id)}` }, d.external_id)),
      h("td", {}, d.name ?? ""), h("td", {}, d.active ? "active" : "inactive"),
      h("td", {}, d.schema ? `${d.schema} v${d.schema_version ?? "?"}` : "—"), h("td", {}, when(d.updated_at)))));
  }
  search.addEventListener("input", draw);
  more.addEventListener("click", () => act(more, load));
  await load();
  const t = table(["device", "name", "state", "schema", "updated"], [], { id: "devices" });
  t.querySelector("tbody").replaceWith(body);
  view.append(h("h1", {}, "Devices"), h("div", { class: "filters" }, search), t, more);
}

export async function showDevice(view, device) {
  const enc = encodeURIComponent(device);
  const d = await api(`/v1/devices/${enc}`);
  const toggle = h("button", { id: "device-toggle", type: "button" }, d.active ? "Deactivate" : "Activate");
  toggle.addEventListener("click", () => act(toggle, async () => {
    const r = await api(`/v1/devices/${enc}/${d.active ? "deactivate" : "activate"}`, { method: "POST" });
    notice(`${device} is now ${r.device.active ? "active" : "inactive"}.`);
    d.active = r.device.active;
    toggle.textContent = d.active ? "Deactivate" : "Activate";
  }));
  const [sessions, activity] = await Promise.all([
    api(`/v1/sessions?device=${enc}&limit=50`), api(`/v1/devices/${enc}/activity`)]);
  const topics = Object.entries(activity.state).sort();
  const hot = topics.length
    ? topics.flatMap(([topic, doc]) => [
      h("h3", {}, topic, " ", h("span", { class: "muted" }, `measured ${when(doc.ts)}`, doc.seq == null ? "" : `, seq ${doc.seq}`)),
      table(["parameter", "value"], Object.entries(doc.values || {}).sort().map(([k, v]) =>
        h("tr", {}, h("td", {}, k), h("td", {}, typeof v === "object" && v !== null ? JSON.stringify(v) : String(v)))),
      { class: "hot-state", "data-topic": topic })])
    : [h("p", { class: "muted" }, "No measurement published yet.")];
  const recent = table(["envelope", "received", "measured", "seq", "topic", "status", "error"],
    activity.messages.map((m) => h("tr", {},
      h("td", {}, h("a", { href: `#/messages/${m.id}` }, m.id)), h("td", {}, when(m.received_at)),
      h("td", {}, when(m.measured_at)), h("td", {}, m.seq ?? "—"), h("td", {}, m.topic),
      h("td", {}, state(m.status)), h("td", {}, m.error_code ?? ""))), { id: "device-messages" });
  view.append(h("h1", {}, "Device ", h("code", {}, device)),
    facts([["name", d.name], ["state", d.active ? "active" : "inactive (envelopes recorded, not published)"],
      ["schema", d.schema ? `${d.schema} v${d.schema_version ?? "?"}` : null], ["registered", when(d.created_at)]]),
    h("div", { class: "actions" }, toggle),
    h("h2", {}, "Hot state"), h("div", { id: "device-hot-state" }, hot),
    h("h2", {}, "Recent envelopes"), recent,
    h("h2", {}, "Sessions"),
    table(["session", "title", "status", "uploaded"], sessions.items.map((s) => h("tr", {},
      h("td", {}, h("a", { href: `#/sessions/${s.id}` }, short(s.id))), h("td", {}, s.title ?? ""),
      h("td", {}, state(s.status)), h("td", {}, when(s.created_at))))));
}
